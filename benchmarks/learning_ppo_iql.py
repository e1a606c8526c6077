"""PPO predators and IQL prey trained together on torch:simple_tag (algos/ppo_iql.py), each side
measured against a uniformly random opponent through training.

The run is trained in --segments pieces (each a --resume of the last to a larger
--total-timesteps); after the first iteration and after every piece, its checkpoint plays
--episodes greedy episodes three ways: predators (PPO) against random prey, prey (IQL) against
random predators, and the two learned sides against each other. Random against random is the
reference. Writes benchmarks/results/learning_ppo_iql/ppo_iql_simple_tag-torch_3m.json and
docs/img/learning_ppo_iql.png, and prints the table. Seeds already in --out are kept and new ones
merged in (--fresh starts over), so seeds can be added later. Run:

    python benchmarks/learning_ppo_iql.py --total-timesteps 3000000 --seeds 1
    python benchmarks/learning_ppo_iql.py --total-timesteps 3000000 --seed-list 2 3   # merged with seed 1
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


def run_seed(seed: int, cli) -> dict:
    """Train one seed in --segments pieces and measure every piece's checkpoint."""
    base = dict(env="torch:simple_tag", seed=seed, eval_every=0, checkpoint_every=0, eval_episodes=100,
                ppo_group="adversary", iql_group="agent", cuda=False)
    first = ppo_iql.Args().batch_steps  # one iteration: the untrained start, as near as a run gets
    points, run_path, t0 = [], None, time.time()
    for total in [first] + [cli.total_timesteps * s // cli.segments for s in range(1, cli.segments + 1)]:
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
    return {"run_dir": run_path, "points": points, "wall_time_s": time.time() - t0}


def load_results(cli) -> dict:
    """The results already in --out (so new seeds are merged into them), or an empty record. Seeds
    measured with another budget or episode count are not comparable: refuse to mix them."""
    results = {"env": "torch:simple_tag", "algo": "ppo_iql", "total_timesteps": cli.total_timesteps,
               "episodes": cli.episodes, "segments": cli.segments, "seeds": {}}
    if cli.fresh or not os.path.exists(cli.out):
        return results
    with open(cli.out) as f:
        old = json.load(f)
    if len(old["seeds"]) == 1 and "wall_time_s" not in next(iter(old["seeds"].values())):
        next(iter(old["seeds"].values()))["wall_time_s"] = old.get("wall_time_s", 0.0)  # written before per-seed times
    old.setdefault("segments", len(next(iter(old["seeds"].values()))["points"]) - 1 if old["seeds"] else cli.segments)
    for key in ("total_timesteps", "episodes", "segments"):
        if old[key] != results[key]:
            raise SystemExit(f"{cli.out} holds seeds with {key}={old[key]}, this run asks for {results[key]}: "
                             f"pass the same value, or --fresh to start a new file")
    return old


def plot(results: dict, path: str):
    """Per-seed thin lines and the mean over seeds (thick) for each side: learned vs random opponent,
    learned vs learned, and random vs random as the reference."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted(results["seeds"], key=int)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, side, own, label in ((axes[0], "predators", "ppo_vs_random", "PPO predators vs random prey"),
                                 (axes[1], "prey", "iql_vs_random", "IQL prey vs random predators")):
        for key, style, color, name in ((own, "-", "C0", label), ("ppo_vs_iql", "--", "C1", "PPO predators vs IQL prey"),
                                        ("random_vs_random", ":", "gray", "random vs random")):
            curves = []
            for seed in seeds:
                pts = results["seeds"][seed]["points"]
                steps = np.array([p["global_step"] for p in pts]) / 1e6
                curves.append([p[key][side] for p in pts])
                ax.plot(steps, curves[-1], ls=style, color=color, lw=0.7, alpha=0.4)
            ax.plot(steps, np.mean(curves, axis=0), ls=style, color=color, lw=2, marker="o", ms=3,
                    label=f"{name} (mean of {len(seeds)})")
    for ax, side in zip(axes, ("predators' return (3 adversaries)", "prey's return (1 agent)")):
        ax.set_xlabel("env steps (millions)")
        ax.set_ylabel(side)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"ppo_iql on torch:simple_tag: greedy returns over {results['episodes']} episodes per point, "
                 f"seeds {', '.join(seeds)} (thin lines)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=3_000_000, help="env steps per seed")
    parser.add_argument("--segments", type=int, default=6, help="evaluation points after the first iteration")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1..S (ignored when --seed-list is given)")
    parser.add_argument("--seed-list", type=int, nargs="+", default=None, help="exactly these seeds, e.g. 2 3")
    parser.add_argument("--fresh", action="store_true",
                        help="overwrite --out; by default new seeds are merged into the seeds already there "
                             "(a seed run again replaces its old entry)")
    parser.add_argument("--plot-only", action="store_true", help="redraw --plot from --out and exit")
    parser.add_argument("--episodes", type=int, default=200, help="greedy episodes per match-up and point")
    parser.add_argument("--run-dir", default="runs/learning_ppo_iql", help="where the runs go")
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "learning_ppo_iql",
                                                      "ppo_iql_simple_tag-torch_3m.json"))
    parser.add_argument("--plot", default=os.path.join(REPO, "docs", "img", "learning_ppo_iql.png"))
    cli = parser.parse_args()
    if cli.plot_only:
        with open(cli.out) as f:
            plot(json.load(f), cli.plot)
        print(f"wrote {cli.plot}")
        return
    results = load_results(cli)
    for seed in cli.seed_list or range(1, cli.seeds + 1):
        results["seeds"][str(seed)] = run_seed(seed, cli)
        # Written after every seed, so a long multi-seed run that stops keeps the seeds it finished.
        results["seeds"] = dict(sorted(results["seeds"].items(), key=lambda kv: int(kv[0])))
        results["wall_time_s"] = sum(r.get("wall_time_s", 0.0) for r in results["seeds"].values())
        os.makedirs(os.path.dirname(cli.out), exist_ok=True)
        with open(cli.out, "w") as f:
            json.dump(results, f, indent=2)
    plot(results, cli.plot)
    print(f"wrote {cli.out} and {cli.plot}; {results['wall_time_s']:.0f} s of training and measuring in all")


if __name__ == "__main__":
    main()
