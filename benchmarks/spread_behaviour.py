"""What a trained simple_spread policy does, beyond its return: how fast the agents cover the
landmarks and how often they collide (greedy play, mpe2 or the torch port).

    python benchmarks/spread_behaviour.py runs/bench_ha5m/torch:simple_spread/happo/<run> runs/<mappo run>
    python benchmarks/spread_behaviour.py runs/bench_ha5m --episodes 200 --json behaviour.json

For every run folder (or every run with a checkpoint under a folder) it loads the actor from
checkpoint.pt, plays --episodes greedy episodes on fresh copies of the run's env and prints:
- return: the mean episode return (R_pz3);
- team reward at steps 1, 4, 7, ...: the mean over episodes of the summed reward of that step
  (how fast the distance term shrinks);
- covered by: the mean first step at which every landmark has an agent within --radius of it
  (the episode's length when that never happens), and the share of episodes where it never does;
- colliding pairs: agent pairs closer than two agent radii, summed over the episode's steps;
- gaps at the end: after the last step, each landmark's distance to its nearest agent, sorted
  from the best-covered landmark to the worst, averaged over episodes.
Positions come from the observations (mpe2's layout: own velocity, own position, landmarks
relative to the agent, ...), read after every step. Works for the actor-critic files
(their checkpoint's "actor"; continuous or discrete actions) and the value-based ones (IQL, VDN,
QMIX, QPLEX: their Q-agents, greedy), each through its own `acting_policy`.
"""
import argparse
import importlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common.cli import make_args, saved_args  # noqa: E402
from common.results import find_runs  # noqa: E402
from common.run_utils import load_checkpoint  # noqa: E402
from envs import make_env, parse_env_kwargs  # noqa: E402

AGENT_SIZE = 0.15  # mpe2 simple_spread's agent radius: two agents collide closer than 0.3


def runs_with_checkpoints(given: list) -> list:
    """The run folders named, or found under the folders named, that hold a checkpoint.pt."""
    paths = []
    for folder in given:
        paths += [folder] if os.path.isfile(os.path.join(folder, "checkpoint.pt")) else \
            [p for p in find_runs(folder) if os.path.isfile(os.path.join(p, "checkpoint.pt"))]
    if not paths:
        raise SystemExit(f"error: no run with a checkpoint.pt in or under {', '.join(given)}")
    return paths


def load_run(run_dir: str):
    """(algo module, the run's saved Args, algo name, checkpoint) of a run folder holding checkpoint.pt."""
    ckpt = load_checkpoint(os.path.join(run_dir, "checkpoint.pt"), torch.device("cpu"))
    module = importlib.import_module(f"algos.{ckpt['algo']}")
    with open(os.path.join(run_dir, "args.json")) as f:
        saved = make_args(module.Args, **saved_args(module.Args, json.load(f)))
    return module, saved, ckpt["algo"], ckpt


def behaviour(run_dir: str, episodes: int, seed: int, radius: float) -> dict:
    """Greedy episodes of one run and the figures in the module docstring."""
    device = torch.device("cpu")
    module, saved, algo, ckpt = load_run(run_dir)
    if saved.env.split(":")[-1].split("_v")[0] != "simple_spread":
        raise SystemExit(f"error: {run_dir} was trained on {saved.env}; this script reads simple_spread "
                         "observations (simple_spread, simple_spread_v3, torch:simple_spread)")
    env = make_env(saved.env, episodes, seed, parse_env_kwargs(saved.env_kwargs), device=device)
    actor = module.acting_policy(saved, env, ckpt, device)  # the actor, or value-based files' Q-agents (greedy)
    E, N = env.num_envs, env.n_agents
    obs, _, mask = env.reset()
    state, starts = actor.initial_state(E, device), torch.ones(1, E, N)
    start = np.asarray(obs, dtype=np.float64)  # (E, N, d); landmarks do not move: agent 0's view at the start
    landmarks = start[:, 0, 4:4 + 2 * N].reshape(E, N, 2) + start[:, 0:1, 2:4]  # (E, L, 2), L = N here
    step_rewards, positions = [], []
    while True:
        with torch.no_grad():
            dist, state = actor(torch.as_tensor(obs, dtype=torch.float32)[None], state, starts,
                                None if mask is None else torch.as_tensor(mask)[None])
            action = dist.mode()[0]
            if hasattr(actor, "remember"):  # Q-agents feed their last action back in
                state = actor.remember(state, action)
        result = env.step(action)
        step_rewards.append(np.asarray(result.reward, dtype=np.float64).sum(-1))  # (E,)
        positions.append(np.asarray(result.final_obs, dtype=np.float64)[..., 2:4])  # (E, N, 2) after the step
        obs, mask, starts = result.obs, result.action_mask, torch.zeros(1, E, N)
        if np.asarray(result.done).all():  # every copy plays one episode (simple_spread's run to the clock)
            break
    env.close()
    pos, rewards = np.stack(positions, 1), np.stack(step_rewards, 1)  # (E, T, N, 2), (E, T)
    T = rewards.shape[1]
    to_landmark = np.linalg.norm(pos[:, :, :, None] - landmarks[:, None, None], axis=-1)  # (E, T, N agents, L)
    covered = (to_landmark.min(2) < radius).all(-1)  # (E, T) every landmark has an agent within radius
    first = np.where(covered.any(1), covered.argmax(1) + 1, T)  # steps counted from 1
    apart = np.linalg.norm(pos[:, :, :, None] - pos[:, :, None], axis=-1)  # (E, T, N, N)
    pairs = ((apart < 2 * AGENT_SIZE).sum((2, 3)) - N) / 2  # (E, T) colliding pairs after each step
    gaps = np.sort(to_landmark[:, -1].min(1), axis=1).mean(0)  # (L,) nearest agent of each landmark, sorted
    return {"run": run_dir, "algo": algo, "env": saved.env, "episodes": E, "return": float(rewards.sum(1).mean()),
            "team_reward_per_step": rewards.mean(0).round(4).tolist(), "covered_by_step": float(first.mean()),
            "never_covered": float((~covered.any(1)).mean()), "colliding_pairs": float(pairs.sum(1).mean()),
            "final_gaps": gaps.round(4).tolist(), "radius": radius}


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders, or folders holding runs")
    parser.add_argument("--episodes", type=int, default=100, help="greedy episodes per run (one per env copy)")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the env copies")
    parser.add_argument("--radius", type=float, default=0.1, help="a landmark is covered by an agent this close")
    parser.add_argument("--json", default=None, help="write the figures of every run to this file")
    opts = parser.parse_args(argv)
    paths = runs_with_checkpoints(opts.runs)
    rows = [behaviour(p, opts.episodes, opts.seed, opts.radius) for p in paths]
    for r in rows:
        print(f"{r['algo']:<7} {os.path.basename(r['run'])[:44]:<44} return {r['return']:7.2f} | team reward at "
              f"steps 1,4,7,..: {' '.join(f'{x:.2f}' for x in r['team_reward_per_step'][::3])} | covered by step "
              f"{r['covered_by_step']:.1f} (never {r['never_covered']:.0%}) | colliding pairs {r['colliding_pairs']:.2f} | "
              f"gaps at the end {' '.join(f'{g:.2f}' for g in r['final_gaps'])}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
