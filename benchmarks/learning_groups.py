"""Any algorithm against any other: predators trained by one algorithm against prey loaded from
another algorithm's run (`--load-group`), on torch:simple_tag (3 predators `adversary`, 1 prey
`agent`, 25-step episodes).

1. The opponent: a MAPPO run with one policy per side (`--share-params group`), both sides
   learning (`--opponent-steps`). Its prey are what every predator team below trains against.
2. For each algorithm and seed: predators trained from scratch with `--share-params group
   --load-group agent=<the MAPPO run>`; the prey act as that run's own evaluation does (greedy
   MAPPO actor) and stay fixed.
3. Evaluation, `--episodes` per matchup against the same loaded prey: the trained predators
   (greedy) and uniformly random predators. The return of a side is its agents' rewards summed
   over the episode (each predator earns +10 per contact with the prey, so 30 per contact step).
   Bar (issue 25): trained predators' return >= 3 x and >= 30 + that of random predators.
4. `--reverse ALGO`: the other way round, prey trained by ALGO against the MAPPO run's predators
   (fixed), against random prey.

Every finished (algorithm, seed) writes its JSON under --out-dir at once, and a later call skips
what is there, so a long benchmark continues across sessions.

    python benchmarks/learning_groups.py --algos qmix maddpg happo ia2c --seeds 1 2 3
    python benchmarks/learning_groups.py --algos --reverse ia2c --seeds 1 2 3
    python benchmarks/learning_groups.py --report --markdown
"""
import argparse
import glob
import json
import os

import numpy as np
import torch

from common.cli import make_args
from common.groups import policy_map
from common.run_utils import evaluate, load_checkpoint
from envs import make_env
from nets import MaskedCategorical

ENV = "torch:simple_tag"
PREDATORS, PREY = "adversary", "agent"
ACTING = ("algo", "args", "actor", "agents", "agent_groups", "agent_rows", "global_step")  # an opponent's keys


def module(algo):
    return __import__(f"algos.{algo}", fromlist=["main"])


class Uniform(torch.nn.Module):
    """Every agent acts uniformly at random over its valid actions (the `nets.Actor` interface);
    `Teams.policy` puts the loaded side's run in for its agents."""

    def __init__(self, env):
        super().__init__()
        self.register_buffer("dim_mask", torch.as_tensor(env.action_dim_mask, dtype=torch.bool))

    def initial_state(self, batch, device=None):
        return None

    def forward(self, obs, state=None, starts=None, action_mask=None):
        mask = self.dim_mask if action_mask is None else action_mask
        return MaskedCategorical(torch.zeros(*obs.shape[:3], mask.shape[-1]), mask), None


def side_return(per_agent: np.ndarray, members) -> tuple:
    """Per-episode agent returns (episodes, N) -> (mean, 95% CI half-width) of the side's sum."""
    x = per_agent[:, members].sum(-1)
    return float(x.mean()), float(1.96 * x.std(ddof=1) / np.sqrt(len(x)))


def train_opponent(opts) -> str:
    """The MAPPO run whose sides are loaded, trained once: its checkpoint is kept under --out-dir
    (its actor only, about 100 kB), so every later (algorithm, seed) meets the same opponent."""
    path = os.path.join(opts.out_dir, "opponent_mappo.pt")
    if not os.path.exists(path):
        m = module("mappo")
        args = make_args(m.Args, env=ENV, seed=100, total_timesteps=opts.opponent_steps, share_params="group",
                         eval_every=0, checkpoint_every=0, torch_threads=opts.torch_threads,
                         run_dir=os.path.join(opts.run_dir, "opponent"), cuda=False)
        ckpt = load_checkpoint(m.main(args)["run_dir"])
        torch.save({k: ckpt[k] for k in ACTING}, path + ".tmp")  # what acting needs: no optimiser, no critic
        os.replace(path + ".tmp", path)
    return path


def train_against(algo, seed, learner, opponent, opts) -> dict:
    """Train `learner` side by `algo` against the opponent run's other side; evaluate both matchups."""
    m = module(algo)
    fixed = PREY if learner == PREDATORS else PREDATORS
    args = make_args(m.Args, env=ENV, env_kwargs=("continuous_actions=false",), seed=seed,  # as the opponent
                     total_timesteps=opts.total_timesteps, share_params="group", load_group=(f"{fixed}={opponent}",), eval_every=0, checkpoint_every=0,
                     torch_threads=opts.torch_threads, run_dir=os.path.join(opts.run_dir, algo), cuda=False)
    summary = m.main(args)
    env = make_env(ENV, 10, seed + 20_000)
    teams = policy_map(args, env, algo, torch.device("cpu"))
    ckpt = load_checkpoint(summary["run_dir"])
    trained = m.acting_policy(args, env, ckpt, torch.device("cpu"))
    members = teams.members
    row = {"algo": algo, "seed": seed, "learner": learner, "opponent_run": opponent, "run_dir": summary["run_dir"],
           "total_timesteps": opts.total_timesteps, "train_wall_time_s": summary["wall_time_s"],
           "train_sps": summary["sps"], "greedy_eval_group_returns": summary.get("eval_group_returns")}
    for label, policy, greedy in (("trained", teams.policy(trained), True), ("random", teams.policy(Uniform(env)), False)):
        torch.manual_seed(seed)
        per_agent = evaluate(env, policy, opts.episodes, torch.device("cpu"), greedy=greedy, per_agent=True)
        row[label] = {side: side_return(per_agent, idx) for side, idx in members.items()}
    return row


def bar_met(row) -> bool:
    """Predators: trained >= 3 x random and >= random + 30. Prey: trained clearly above random
    (beyond both 95% intervals)."""
    side = row["learner"]
    (t, t_ci), (z, z_ci) = row["trained"][side], row["random"][side]
    return (t >= 3 * z and t >= z + 30) if side == PREDATORS else t - t_ci > z + z_ci


def report(out_dir, markdown: bool = False) -> list:
    rows = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out_dir, "*_seed*.json")))]
    if markdown:
        print("| algorithm | learns | env steps | seed | trained side's return | random side's return | ratio | "
              "difference | bar met | training s |\n|---|---|---|---|---|---|---|---|---|---|")
    else:
        print(f"\n{'algo':<7} {'learns':<9} {'seed':>4} {'steps':>9} | {'trained side':>14} | {'random side':>14} | "
              f"{'ratio':>6} {'diff':>7} {'bar met':>7}")
    for r in rows:
        side = r["learner"]
        (t, t_ci), (z, z_ci) = r["trained"][side], r["random"][side]
        ratio = t / z if z > 0 else float("nan")
        if markdown:
            print(f"| {r['algo']} | {side} | {r['total_timesteps'] / 1e6:g}M | {r['seed']} | {t:.1f} +- {t_ci:.1f} | "
                  f"{z:.1f} +- {z_ci:.1f} | {ratio:.1f} | {t - z:+.1f} | {'yes' if bar_met(r) else 'no'} | "
                  f"{r['train_wall_time_s']:.0f} |")
        else:
            print(f"{r['algo']:<7} {side:<9} {r['seed']:>4} {r['total_timesteps']:>9,} | {t:14.1f} | {z:14.1f} | "
                  f"{ratio:6.1f} {t - z:+7.1f} {str(bar_met(r)):>7}")
    means = {}  # the bar is on the mean over seeds
    for r in rows:
        means.setdefault((r["algo"], r["learner"], r["total_timesteps"]), []).append(r)
    print("\nmean over seeds:" if not markdown else "")
    for (algo, side, steps), group in sorted(means.items()):
        t = float(np.mean([r["trained"][side][0] for r in group]))
        z = float(np.mean([r["random"][side][0] for r in group]))
        met = t >= 3 * z and t >= z + 30 if side == PREDATORS else all(bar_met(r) for r in group)
        line = (f"{algo} {side}, {steps / 1e6:g}M steps, {len(group)} seed(s): trained {t:.1f}, random {z:.1f}, "
                f"ratio {t / z:.1f}, difference {t - z:+.1f}, bar {'met' if met else 'not met'}")
        print(f"- {line}" if markdown else line)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="*", default=["qmix", "maddpg", "happo", "ia2c"],
                        help="algorithms training the predators")
    parser.add_argument("--reverse", nargs="*", default=[], help="algorithms training the prey against the predators")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, default=500_000, help="training env steps per run")
    parser.add_argument("--opponent-steps", type=int, default=1_000_000, help="env steps of the MAPPO opponent run")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes per matchup")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--run-dir", default="runs/groups")
    parser.add_argument("--out-dir", default="benchmarks/results/learning_groups")
    parser.add_argument("--report", action="store_true", help="only print the table of what --out-dir holds")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (BENCHMARKS.md)")
    opts = parser.parse_args(argv)
    if not opts.report:
        os.makedirs(opts.out_dir, exist_ok=True)
        opponent = train_opponent(opts)
        jobs = [(a, PREDATORS) for a in opts.algos] + [(a, PREY) for a in opts.reverse]
        for seed in opts.seeds:
            for algo, learner in jobs:
                path = os.path.join(opts.out_dir, f"{algo}_{learner}_{opts.total_timesteps // 1000}k_seed{seed}.json")
                if os.path.exists(path):
                    continue
                row = train_against(algo, seed, learner, opponent, opts)
                with open(path + ".tmp", "w") as f:
                    json.dump(row, f, indent=1)
                os.replace(path + ".tmp", path)
    return report(opts.out_dir, opts.markdown)


if __name__ == "__main__":
    main()
