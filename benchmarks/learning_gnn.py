"""MAPPO with a GNN actor and critic against MAPPO with MLPs on simple_spread with 5 agents.

Both variants train with algos/mappo.py's defaults on the same budget, seeds 1..SEEDS, on the
batched torch port (`torch:simple_spread`, `--env-kwargs N=5`); the GNN variant only adds
`--actor-model gnn --critic-model gnn` (topology full, one message-passing layer, relative
positions and velocities as edge features, the critic mean-pooled). The script prints each
variant's final and best greedy evaluation return (mean over seeds, 95% bootstrap interval) and
whether the GNN learns at least as well as the MLP within the budget, and draws the curves
(mean over seeds with its 95% bootstrap band) into a PNG.

    python benchmarks/learning_gnn.py --seeds 3 --total-timesteps 2000000 --workers 2
    python benchmarks/learning_gnn.py --from-runs runs/bench_gnn --plot docs/img/gnn_simple_spread_n5.png
    python benchmarks/learning_gnn.py --variant gnn --seeds 1 --total-timesteps 500000   # one probe

Runs go to <run-dir>/<variant>/ and are named mappo_mlp / mappo_gnn (their exp_name); --from-runs
tells the variants apart by the --actor-model / --critic-model saved with each run, so runs
started by hand with algos/mappo.py count too. Launching again reads the runs that finished back
instead of training them again.
"""
import argparse
import importlib
import json
import os
from multiprocessing import Pool

import numpy as np

from common.results import (
    bootstrap_ci,
    curves_on_grid,
    find_runs,
    latest_per_seed,
    mean_and_band,
    read_run,
)

ENV, ENV_KWARGS = "torch:simple_spread", ("N=5",)
VARIANTS = {"mlp": {}, "gnn": {"actor_model": "gnn", "critic_model": "gnn"}}
DEFAULT_PLOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "img",
                            "gnn_simple_spread_n5.png")


def train(job) -> str:
    """One run: (variant, seed, total env steps, run folder, extra Args) -> the run's folder."""
    from common.cli import make_args

    variant, seed, total, run_dir, extra = job
    mappo = importlib.import_module("algos.mappo")
    args = make_args(mappo.Args, env=ENV, env_kwargs=ENV_KWARGS, seed=seed, total_timesteps=total, run_dir=run_dir,
                     exp_name=f"mappo_{variant}", checkpoint_every=0, **VARIANTS[variant], **extra)
    return mappo.main(args)["run_dir"]


def variant_of(args: dict):
    """"mlp" or "gnn" from a run's saved args (both networks of one kind), else None."""
    actor, critic = args.get("actor_model", "mlp"), args.get("critic_model", "mlp")
    return actor if actor == critic else None


def records_under(root: str, total: int = 0) -> dict:
    """{variant: [run records]}, one per seed (the finished, else furthest one), for the MAPPO
    runs on simple_spread N=5 under root; with total > 0 only runs of that budget."""
    records = []
    for r in [read_run(p) for p in find_runs(root)] if os.path.isdir(root) else []:
        variant = variant_of(r["args"])
        if (r["env"] == ENV and tuple(r["args"]["env_kwargs"]) == ENV_KWARGS and variant in VARIANTS
                and (r["algo"] == "mappo" or r["label"].startswith("mappo_"))
                and (not total or r["args"]["total_timesteps"] == total)):
            records.append({**r, "label": variant})
    found = {}
    for r in latest_per_seed(records):
        found.setdefault(r["label"], []).append(r)
    return found


def report(by_variant: dict, out_path=None) -> dict:
    """Print and return, per variant: seeds, env steps reached, final and best evaluation return
    (mean over seeds, its 95% bootstrap interval), and the comparison GNN vs MLP."""
    rows = {}
    print(f"\n{'variant':<8} {'seeds':>5} {'env steps':>10} {'final mean':>11} {'final 95% CI':>18} "
          f"{'best of mean curve':>19}   per seed final")
    for variant, runs in sorted(by_variant.items()):
        finals = [r["final_return"] for r in runs]
        _steps, values = curves_on_grid([r["curve"] for r in runs])  # (P,), (S, P)
        mean, _, _, count = mean_and_band(values)
        best = float(np.nanmax(np.where(count == len(runs), mean, np.nan)))  # points every seed reached
        low, high = bootstrap_ci(finals)
        rows[variant] = {"seeds": len(runs), "env_steps": min(r["global_step"] for r in runs),
                             "final_mean": float(np.mean(finals)), "final_ci": [low, high], "best_mean": best,
                             "final_per_seed": finals, "curves": [r["curve"] for r in runs]}
        print(f"{variant:<8} {len(runs):>5} {rows[variant]['env_steps']:>10,d} {np.mean(finals):>11.2f} "
              f"{f'[{low:.2f}, {high:.2f}]':>18} {best:>19.2f}   {', '.join(f'{x:.1f}' for x in finals)}")
    if {"mlp", "gnn"} <= set(rows):
        gnn, mlp = rows["gnn"], rows["mlp"]
        verdict = gnn["final_mean"] >= mlp["final_mean"] and gnn["best_mean"] >= mlp["best_mean"]
        print(f"GNN - MLP: final {gnn['final_mean'] - mlp['final_mean']:+.2f}, "
              f"best {gnn['best_mean'] - mlp['best_mean']:+.2f}"
              f" -> GNN learns at least as well as the MLP: {'yes' if verdict else 'no'}")
        rows["gnn_at_least_as_good"] = verdict
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"env": ENV, "env_kwargs": list(ENV_KWARGS), "variants": rows}, f, indent=2)
        print(f"wrote {out_path}")
    return rows


def plot(by_variant: dict, path: str) -> None:
    """Greedy evaluation return against env steps: per variant the mean over seeds and its 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, runs in sorted(by_variant.items()):
        steps, values = curves_on_grid([r["curve"] for r in runs])
        mean, low, high, _ = mean_and_band(values)
        line, = ax.plot(steps / 1e6, mean, lw=2, marker="o" if len(steps) <= 20 else None, ms=3, label=f"MAPPO {variant} ({len(runs)} seed{'s' * (len(runs) > 1)})")
        ax.fill_between(steps / 1e6, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.set(xlabel="env steps (millions)", ylabel="greedy evaluation return (100 episodes)",
           title="torch:simple_spread, N=5: MAPPO GNN vs MLP (mean, 95% bootstrap CI)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", nargs="+", default=sorted(VARIANTS), choices=sorted(VARIANTS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS")
    parser.add_argument("--total-timesteps", type=int, default=2_000_000, help="env steps per run, the same for both")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at the same time")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads per run")
    parser.add_argument("--run-dir", default="runs/bench_gnn")
    parser.add_argument("--from-runs", default=None, help="read the runs under this folder instead of training")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=DEFAULT_PLOT, help="PNG of the learning curves")
    opts = parser.parse_args()
    if opts.seeds < 1:
        parser.error("--seeds must be at least 1")
    if opts.from_runs:
        by_variant = records_under(opts.from_runs)
    else:
        done = records_under(opts.run_dir, opts.total_timesteps)
        finished = {(v, r["seed"]) for v, runs in done.items() for r in runs if r["finished"]}
        jobs = [(v, seed, opts.total_timesteps, os.path.join(opts.run_dir, v), {"torch_threads": opts.torch_threads})
                for v in opts.variant for seed in range(1, opts.seeds + 1) if (v, seed) not in finished]
        print(f"{len(jobs)} runs to train, {len(finished)} finished already (read back)", flush=True)
        if jobs:
            with Pool(max(1, min(opts.workers, len(jobs)))) as pool:
                pool.map(train, jobs, chunksize=1)
        by_variant = records_under(opts.run_dir, opts.total_timesteps)
    by_variant = {v: runs for v, runs in by_variant.items() if v in opts.variant and any(r["curve"] for r in runs)}
    if not by_variant:
        raise SystemExit("error: no MAPPO runs on torch:simple_spread N=5 with an evaluation curve")
    report(by_variant, opts.json)
    if opts.plot:
        plot(by_variant, opts.plot)


if __name__ == "__main__":
    main()
