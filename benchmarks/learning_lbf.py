"""Learning bars on Level-Based Foraging `lbf:Foraging-8x8-2p-3f-v3` (8x8 grid, 2 agents, 3 food
items, 50-step episodes): a mean normalised return >= 0.8 for MAPPO within 5M env steps and for
QMIX within 2M, 3 seeds each (the best point of the 3-seed mean evaluation curve within the
algorithm's budget).

The normalised return is LBF's own: collecting food of level f pays f / (total level spawned),
shared between the agents that load it, so the team's return summed over agents is the fraction
of the food collected (1.0: all of it). With LBF's default arguments (`normalize_reward=True`,
`penalty=0`) that is exactly the return every algorithm logs and evaluates
(`eval/episodic_return`, `summary.json`'s `eval_return_mean`); this script refuses runs made
with other reward settings. A random policy (uniform over the valid actions) scores 0.20 here (`--random`).

MAPPO's preset evaluates by sampling from the policy (`eval_policy: sampled`), as EPyMARL evaluates
MAPPO (its `soft_policies` action selector samples in test mode too), and each row says which
evaluation its curve is. After training, the script also plays every run's final checkpoint
greedily (100 episodes, `--evaluate-checkpoint ... --eval-policy greedy`) and shows that beside
it, because on LBF the two part ways: a feed-forward greedy policy can lock itself into a loop (an
agent stepping into its partner's cell while the partner waits to load: the same state, the same
actions, every step to the time limit), which sampling escapes (BENCHMARKS.md).

QMIX's preset (`configs/qmix/lbf_Foraging-8x8-2p-3f-v3.yaml`, the file's defaults written out)
evaluates greedily, as every value-based method does: its GRU agents see their own history.

Trains with the presets `configs/<algo>/lbf_Foraging-8x8-2p-3f-v3.yaml` through `run.py` (runs
go to <run-dir>/<env>/<algo>/, a second launch resumes or skips them), or reads runs already
made (`--from-runs`, any depth, finished or not) with `common/results.py`:

    python benchmarks/learning_lbf.py --seeds 3 --workers 2 --total-timesteps 500000   # ~10 min a seed on one core
    python benchmarks/learning_lbf.py --algo qmix --seeds 3 --total-timesteps 500000   # ~20 min a seed on one core
    python benchmarks/learning_lbf.py --from-runs runs/bench_lbf --json lbf.json --plot lbf.png
    python benchmarks/learning_lbf.py --random                                   # the random policy's score
"""
import argparse
import json
import os

import numpy as np

import run as launcher
from common.results import (curves_on_grid, find_runs, latest_per_seed, mean_and_band, read_run, scalar_history,
                            seed_count)

ENV = "lbf:Foraging-8x8-2p-3f-v3"
BARS = {"mappo": (0.8, 5_000_000), "qmix": (0.8, 2_000_000)}  # algo: (normalised return, within env steps)
BUDGET = 5_000_000  # the window of an algorithm without a bar
REWARD_ARGS = ("normalize_reward", "penalty")  # env arguments that would change what the return means


def normalised_reward_run(record: dict) -> bool:
    """True if the run kept LBF's normalised rewards (its return is then the normalised return)."""
    kwargs = " ".join(record["args"].get("env_kwargs") or [])
    return not any(key in kwargs for key in REWARD_ARGS)


TRAIN_TAG = "charts/episodic_return"
WINDOW = 50_000  # env steps over which the training returns are averaged


def training_curve(run_path: str) -> list:
    """The sampled (not greedy) policy's normalised return: the training episodes' mean per
    WINDOW env steps, [(window end, mean)], from the run's TensorBoard log."""
    points = scalar_history(run_path, (TRAIN_TAG,))[TRAIN_TAG]
    windows = {}
    for step, value in points:
        windows.setdefault((step - 1) // WINDOW, []).append(value)
    return [((w + 1) * WINDOW, float(np.mean(v))) for w, v in sorted(windows.items())]


def bar_of(algo: str):
    """(bar, budget) of an algorithm (a label like 'qmix' or 'qmix,greedy'); (None, BUDGET) without a bar."""
    return BARS.get(algo.split(",")[0], (None, BUDGET))


def report(records, out_path=None) -> list:
    """One row per algorithm: best and final point of the mean evaluation curve within its budget, against its bar."""
    rows = []
    by_algo = {}
    for r in records:
        by_algo.setdefault(f"{r['label']},{r['args'].get('eval_policy', 'greedy')}", []).append(r)
    print(f"\n{'algo,eval':<15} {'seeds':>5} {'steps (min)':>12} {'best mean eval':>15} {'final mean eval':>16} "
          f"{'bar':>5} {'met':>4}   (normalised return within each algorithm's budget)")
    for algo, runs in sorted(by_algo.items()):
        bar, budget = bar_of(algo)
        steps, values = curves_on_grid([[(s, v) for s, v in r["curve"] if s <= budget * 1.001] for r in runs])
        mean, low, high, count = mean_and_band(values)
        full = count == len(runs)  # points every seed has reached
        if not full.any():
            print(f"{algo:<15} {len(runs):>5}   (no evaluation point shared by every seed yet)")
            continue
        best_i = int(np.nanargmax(np.where(full, mean, np.nan)))
        final_i = int(np.flatnonzero(full)[-1])
        reached = int(steps[final_i])
        met = None if bar is None or (reached < budget * 0.999 and mean[best_i] < bar) else bool(mean[best_i] >= bar)
        train_steps, train_values = curves_on_grid([[(s, v) for s, v in r["train_curve"] if s <= budget * 1.001]
                                                    for r in runs])
        train_mean = mean_and_band(train_values)[0] if train_values.size else np.array([np.nan])
        rows.append(dict(algo=algo, seeds=len(runs), budget=budget, steps_reached=reached,
                         best_mean_eval=float(mean[best_i]),
                         best_at=int(steps[best_i]), best_ci=[float(low[best_i]), float(high[best_i])],
                         final_mean_eval=float(mean[final_i]), bar=bar, met=met,
                         best_per_seed=[float(np.nanmax(v[full])) for v in values],
                         final_mean_train_return=float(train_mean[~np.isnan(train_mean)][-1])
                         if np.isfinite(train_mean).any() else None,
                         final_greedy_per_seed=[r.get("final_greedy") for r in runs]))
        verdict = "-" if bar is None else ("yes" if met else "open" if met is None else "NO")
        sampled = rows[-1]["final_mean_train_return"]
        greedy = [g for g in rows[-1]["final_greedy_per_seed"] if g is not None]
        print(f"{algo:<15} {len(runs):>5} {reached:>12,d} {mean[best_i]:>15.3f} {mean[final_i]:>16.3f} "
              f"{bar if bar is not None else '-':>5} {verdict:>4}   within {budget:,d}; best at "
              f"{int(steps[best_i]):,d}; per seed best: "
              + ", ".join(f"{x:.2f}" for x in rows[-1]["best_per_seed"])
              + (f"; sampled policy (training episodes, last {WINDOW:,d} steps): {sampled:.3f}"
                 if sampled is not None else "")
              + (f"; final checkpoint played greedily: " + ", ".join(f"{g:.2f}" for g in greedy) if greedy else ""))
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"env": ENV, "rows": rows,
                       "curves": {r["label"] + f" seed {r['seed']}": r["curve"] for r in records},
                       "training_curves": {r["label"] + f" seed {r['seed']}": r["train_curve"] for r in records}},
                      f, indent=2)
    return rows


def plot(records, path: str) -> None:
    """Greedy normalised return against env steps: mean over seeds (95% bootstrap band), the bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_algo = {}
    for r in records:
        by_algo.setdefault(f"{r['label']}, {r['args'].get('eval_policy', 'greedy')} evaluation", []).append(r)
    for algo, runs in sorted(by_algo.items()):
        steps, values = curves_on_grid([r["curve"] for r in runs])
        mean, low, high, _ = mean_and_band(values)
        line, = ax.plot(steps / 1e6, mean, lw=2, label=f"{algo} ({seed_count(len(runs))})")
        ax.fill_between(steps / 1e6, low, high, color=line.get_color(), alpha=0.2)
        bar, budget = bar_of(algo)
        if bar is not None:
            ax.axhline(bar, color=line.get_color(), ls="--", lw=1, label=f"bar {bar:g} by {budget / 1e6:g}M")
    ax.set_xlabel("env steps (millions)")
    ax.set_ylabel("evaluation, normalised return")
    ax.set_title(ENV)
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def final_greedy(run_path: str, episodes: int = 100) -> float:
    """The run's final checkpoint played greedily: mean normalised return over `episodes` episodes."""
    import importlib

    from common.cli import make_args

    algo = importlib.import_module(f"algos.{read_run(run_path)['algo']}")
    args = make_args(algo.Args, evaluate_checkpoint=run_path, eval_policy="greedy", eval_episodes=episodes, cuda=False)
    return algo.main(args)["eval_return_mean"]


def random_score(episodes: int = 200, seed: int = 0) -> float:
    """Mean normalised return of uniformly random valid actions."""
    from envs import make_env

    env = make_env(ENV, 10, seed=seed)
    env.reset()
    rng = np.random.default_rng(seed)
    scores = []
    while len(scores) < episodes:
        step = env.step(env.sample_actions(rng))
        scores += step.episode_normalised_return[step.done].tolist()
    return float(np.mean(scores[:episodes]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["mappo"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help="env steps per run (default: the preset's, each algorithm's budget)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--run-dir", default="runs/bench_lbf")
    parser.add_argument("--from-runs", default=None, help="read every run under this folder instead of training")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the learning curves to this PNG file")
    parser.add_argument("--random", action="store_true", help="print the random policy's normalised return and stop")
    opts = parser.parse_args()
    if opts.random:
        print(f"random valid actions, 200 episodes: normalised return {random_score():.3f}")
        return
    root = opts.from_runs or opts.run_dir
    if not opts.from_runs:
        launcher.main(["--algo", *opts.algo, "--env", ENV, "--seeds", str(opts.seeds), "--presets",
                       "--workers", str(opts.workers), "--run-dir", root]
                      + (["--", "--total-timesteps", str(opts.total_timesteps)] if opts.total_timesteps else []))
    records = latest_per_seed([read_run(p) for p in find_runs(root)])
    records = [dict(r, train_curve=training_curve(r["path"])) for r in records if r["env"] == ENV and r["curve"]]
    records = [dict(r, final_greedy=final_greedy(r["path"]) if r["args"].get("eval_policy") == "sampled"
                    and os.path.isfile(os.path.join(r["path"], "checkpoint.pt")) else None) for r in records]
    kept = [r for r in records if normalised_reward_run(r)]
    if len(kept) < len(records):
        print(f"left out {len(records) - len(kept)} run(s) made with {' or '.join(REWARD_ARGS)} changed: "
              "their return is not the normalised return")
    report(kept, opts.json)
    if opts.plot:
        plot(kept, opts.plot)


if __name__ == "__main__":
    main()
