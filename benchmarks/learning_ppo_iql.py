"""PPO predators and IQL prey trained together on torch:simple_tag (algos/ppo_iql.py), each side
measured against a uniformly random opponent through training.

The run is trained in --segments pieces (each a --resume of the last to a larger
--total-timesteps); after the first iteration and after every piece, its checkpoint plays
--episodes greedy episodes three ways: predators (PPO) against random prey, prey (IQL) against
random predators, and the two learned sides against each other. Random against random is the
reference. Writes benchmarks/results/learning_ppo_iql.json and docs/img/learning_ppo_iql.png,
and prints the table. Run:

    python benchmarks/learning_ppo_iql.py --total-timesteps 3000000 --seeds 1
"""
import argparse
import json
import os
import time

import numpy as np
import torch

from algos import ppo_iql
from common.cli import make_args
from common.run_utils import evaluate, load_checkpoint
from envs import make_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def side_returns(ckpt, episodes: int, seed: int) -> dict:
    """Mean predator and prey returns (each summed over the side's agents) of greedy episodes in
    four match-ups: learned vs random prey, random predators vs learned prey, learned vs learned,
    random vs random."""
    saved = ppo_iql.Args(**{k: tuple(v) if isinstance(v, list) else v for k, v in ckpt["args"].items()})
    env = make_env(saved.env, 20, seed + 20_000, {}, device=torch.device("cpu"))
    out = {}
    for name, random_groups in (("ppo_vs_random", ("iql",)), ("iql_vs_random", ("ppo",)), ("ppo_vs_iql", ()),
                                ("random_vs_random", ("ppo", "iql"))):
        policy = ppo_iql.load_joint_policy(ckpt, saved, env, torch.device("cpu"), random_groups)
        returns = evaluate(env, policy, episodes, torch.device("cpu"), per_agent=True)  # (episodes, N)
        out[name] = {"predators": float(returns[:, policy.ppo_idx.numpy()].sum(-1).mean()),
                     "prey": float(returns[:, policy.iql_idx.numpy()].sum(-1).mean())}
    env.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=3_000_000, help="env steps per seed")
    parser.add_argument("--segments", type=int, default=6, help="evaluation points after the first iteration")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1..S")
    parser.add_argument("--episodes", type=int, default=200, help="greedy episodes per match-up and point")
    parser.add_argument("--run-dir", default="runs/learning_ppo_iql", help="where the runs go")
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "learning_ppo_iql.json"))
    parser.add_argument("--plot", default=os.path.join(REPO, "docs", "img", "learning_ppo_iql.png"))
    cli = parser.parse_args()
    results = {"env": "torch:simple_tag", "algo": "ppo_iql", "total_timesteps": cli.total_timesteps,
               "episodes": cli.episodes, "seeds": {}}
    t0 = time.time()
    for seed in range(1, cli.seeds + 1):
        base = dict(env="torch:simple_tag", seed=seed, eval_every=0, checkpoint_every=0, eval_episodes=100,
                    ppo_group="adversary", iql_group="agent", cuda=False)
        first = ppo_iql.Args().batch_steps  # one iteration: the untrained start, as near as a run gets
        points, run_path = [], None
        for k, total in enumerate([first] + [cli.total_timesteps * s // cli.segments
                                             for s in range(1, cli.segments + 1)]):
            args = make_args(ppo_iql.Args, run_dir=cli.run_dir, total_timesteps=total, **base,
                             **({"resume": run_path} if run_path else {}))
            summary = ppo_iql.main(args)
            run_path = summary["run_dir"]
            ckpt = load_checkpoint(run_path)
            point = {"global_step": ckpt["global_step"], "sps": summary["sps"], **side_returns(ckpt, cli.episodes, seed)}
            points.append(point)
            print(f"seed {seed} step {point['global_step']:>9,d}: predators vs random prey "
                  f"{point['ppo_vs_random']['predators']:7.2f} | prey vs random predators "
                  f"{point['iql_vs_random']['prey']:7.2f} | head to head {point['ppo_vs_iql']['predators']:7.2f} / "
                  f"{point['ppo_vs_iql']['prey']:7.2f} | random vs random {point['random_vs_random']['predators']:6.2f} "
                  f"/ {point['random_vs_random']['prey']:6.2f} | {time.time() - t0:5.0f} s", flush=True)
        results["seeds"][str(seed)] = {"run_dir": run_path, "points": points}
    results["wall_time_s"] = time.time() - t0
    os.makedirs(os.path.dirname(cli.out), exist_ok=True)
    with open(cli.out, "w") as f:
        json.dump(results, f, indent=2)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for seed, res in results["seeds"].items():
        steps = np.array([p["global_step"] for p in res["points"]]) / 1e6
        for ax, side, own, label in ((axes[0], "predators", "ppo_vs_random", "PPO predators vs random prey"),
                                     (axes[1], "prey", "iql_vs_random", "IQL prey vs random predators")):
            ax.plot(steps, [p[own][side] for p in res["points"]], marker="o", label=f"{label} (seed {seed})")
            ax.plot(steps, [p["ppo_vs_iql"][side] for p in res["points"]], ls="--", marker=".",
                    label=f"PPO predators vs IQL prey (seed {seed})")
            ax.plot(steps, [p["random_vs_random"][side] for p in res["points"]], ls=":", color="gray",
                    label="random vs random")
    for ax, side in zip(axes, ("predators' return (3 adversaries)", "prey's return (1 agent)")):
        ax.set_xlabel("env steps (millions)")
        ax.set_ylabel(side)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"ppo_iql on torch:simple_tag: greedy returns over {cli.episodes} episodes per point")
    fig.tight_layout()
    os.makedirs(os.path.dirname(cli.plot), exist_ok=True)
    fig.savefig(cli.plot, dpi=100)
    print(f"wrote {cli.out} and {cli.plot} in {results['wall_time_s']:.0f} s")


if __name__ == "__main__":
    main()
