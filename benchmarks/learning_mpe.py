"""Learning bars on mpe2 simple_spread (greedy evaluation, R_pz3), for every algorithm that has one.

Trains each algorithm with its file's defaults for several seeds (or reads runs already made
with --from-runs), then prints, per algorithm, the 3-seed mean greedy evaluation curve's best
point within each budget and its final point, beside the bars and reference numbers:

    MAPPO >= -30 within 2M env steps, >= -25 within 10M;  IPPO >= -32 within 2M
    QMIX, VDN, QPLEX >= -30 within 2M;  IQL >= -35 within 2M
    VDPPO >= -28 within 5M;  MAA2C, VDA2C, IA2C >= -35;  COMA >= -40;  IPG >= -50 (5M)
    MAT >= -26.6 within 2M (MAPPO's recorded best 3-seed mean at that budget)
    continuous actions (--continuous): MADDPG, MATD3, FACMAC, MASAC, ISAC >= -30 within 2M;  IDDPG >= -35;
    HASAC >= -25.1, HATD3 >= -26.8, HADDPG >= -26.4 (their counterparts' recorded results);  MAT >= -27
    random -79, scripted (optimal assignment) -22.6 (REFERENCE.md)

    python benchmarks/learning_mpe.py --algo mappo ippo --seeds 3 --total-timesteps 2000000
    python benchmarks/learning_mpe.py --algo qmix vdn --env torch:simple_spread   # the batched torch port
    python benchmarks/learning_mpe.py --from-runs runs/bench   # re-read finished runs
    python benchmarks/learning_mpe.py --algo maddpg matd3 facmac masac iddpg --env torch:simple_spread --continuous

`--env torch:simple_spread` trains on the torch port of the same task (same dynamics, step for
step; initial states drawn by torch instead of numpy), which runs several times faster.
"""
import argparse
import glob
import json
import os

import numpy as np

import run as launcher
from common.results import seed_count

BARS = {("mappo", 2_000_000): -30.0, ("mappo", 10_000_000): -25.0, ("ippo", 2_000_000): -32.0,
        ("qmix", 2_000_000): -30.0, ("vdn", 2_000_000): -30.0, ("qplex", 2_000_000): -30.0, ("iql", 2_000_000): -35.0,
        ("vdppo", 5_000_000): -28.0, ("maa2c", 5_000_000): -35.0, ("vda2c", 5_000_000): -35.0,
        ("ia2c", 5_000_000): -35.0, ("coma", 5_000_000): -40.0, ("ipg", 5_000_000): -50.0,
        ("mat", 2_000_000): -26.6}  # MAT: at least MAPPO's best 3-seed mean within 2M (the table in BENCHMARKS.md)
# Bars on continuous simple_spread (--continuous): the deterministic-policy and soft actor-critic family, and
# the new files of the algorithms issue at their counterparts' recorded results (HASAC: MASAC's -25.1,
# HATD3: MATD3's -26.8, HADDPG: MADDPG's -26.4)
CONTINUOUS_BARS = {("maddpg", 2_000_000): -30.0, ("matd3", 2_000_000): -30.0, ("facmac", 2_000_000): -30.0,
                   ("masac", 2_000_000): -30.0, ("iddpg", 2_000_000): -35.0, ("isac", 2_000_000): -30.0,
                   ("hasac", 2_000_000): -25.1, ("hatd3", 2_000_000): -26.8, ("haddpg", 2_000_000): -26.4,
                   ("mat", 2_000_000): -27.0}
RANDOM_CONTINUOUS = -75.4  # uniform random actions in the box, 1000 episodes of mpe2 simple_spread (torch port -75.0)
SPREAD_NAMES = ("simple_spread", "simple_spread_v3", "mpe2:simple_spread", "torch:simple_spread", "torch:simple_spread_v3")
RANDOM, SCRIPTED = -79.0, -22.6


def mean_curve(summaries):
    """Mean over seeds of the eval return at the eval points every seed has."""
    steps = sorted(set.intersection(*[{s for s, _ in r["eval_history"]} for r in summaries]))
    curves = [dict(map(tuple, r["eval_history"])) for r in summaries]
    return np.array(steps), np.array([[c[s] for s in steps] for c in curves])  # (P,), (seeds, P)


def read_run(run_path: str) -> dict:
    """A run's summary.json with its whole evaluation curve, or, for a run still going (or cut
    short), what its TensorBoard log holds so far: algo, env, seed and the evaluation history.
    The curve comes from common.results.read_run, which also reads back the evaluations a resumed
    run made before its checkpoint (older summary.json files of resumed runs lack them)."""
    from common.results import read_run as read_record

    record = read_record(run_path)
    if record["summary"]:
        return {**record["summary"], "eval_history": [list(p) for p in record["curve"]]}
    return {"algo": record["algo"], "env": record["env"], "seed": record["seed"],
            "eval_history": [list(p) for p in record["curve"]], "unfinished": True}


def report(summaries_by_algo, out_path=None, continuous=False):
    rows, bars = [], CONTINUOUS_BARS if continuous else BARS
    print(f"\n{'algo':<7} {'seeds':>5} {'budget':>11} {'best mean eval <= budget':>25} {'final mean eval':>16} "
          f"{'bar':>6} {'met':>5}   (random {RANDOM}, scripted {SCRIPTED}, R_pz3)")
    for algo, summaries in summaries_by_algo.items():
        steps, returns = mean_curve(summaries)
        mean = returns.mean(0)
        for (bar_algo, budget), bar in sorted(bars.items()):
            if bar_algo != algo.split(" ")[0]:
                continue
            inside = steps <= budget * 1.001
            if not inside.any() or steps.max() < budget * 0.999:
                print(f"{algo:<7} {len(summaries):>5} {budget:>11,d} {'(runs too short)':>25}")
                continue
            best = float(mean[inside].max())
            final = float(mean[inside][-1])
            per_seed = returns[:, inside].max(1)
            rows.append(dict(algo=algo, seeds=len(summaries), budget=budget, best_mean_eval=best, final_mean_eval=final,
                             best_per_seed=per_seed.tolist(), bar=bar, met=best >= bar))
            print(f"{algo:<7} {len(summaries):>5} {budget:>11,d} {best:>25.2f} {final:>16.2f} {bar:>6.1f} "
                  f"{'yes' if best >= bar else 'NO':>5}   per seed best: {', '.join(f'{x:.1f}' for x in per_seed)}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "curves": {a: [r["eval_history"] for r in s] for a, s in summaries_by_algo.items()}},
                      f, indent=2)
    return rows


def plot(summaries_by_algo, path: str, continuous=False) -> None:
    """Greedy evaluation return against env steps: one line per algorithm (mean over seeds),
    thin lines per seed, the bars and the random / scripted levels as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink")
    for (algo, summaries), color in zip(summaries_by_algo.items(), colors):
        steps, returns = mean_curve(summaries)
        for seed_curve in returns:
            ax.plot(steps / 1e6, seed_curve, color=color, alpha=0.25, lw=0.8)
        ax.plot(steps / 1e6, returns.mean(0), color=color, lw=2, label=f"{algo} ({seed_count(len(summaries))})")
        for (bar_algo, budget), bar in (CONTINUOUS_BARS if continuous else BARS).items():
            if bar_algo == algo.split(" ")[0] and budget <= steps.max() * 1.001:
                ax.axhline(bar, color=color, ls="--", lw=1, label=f"{algo} bar {bar:g} at {budget / 1e6:g}M")
    random_level = RANDOM_CONTINUOUS if continuous else RANDOM
    ax.axhline(random_level, color="gray", ls=":", lw=1, label=f"random {random_level:g}")
    ax.axhline(SCRIPTED, color="black", ls=":", lw=1, label=f"scripted {SCRIPTED:g}")
    ax.set_xlabel("env steps (millions)")
    ax.set_ylabel("greedy evaluation return (R_pz3, 100 episodes)")
    ax.set_title("mpe2 simple_spread")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=None,
                        help="files to train (default: mappo ippo); with --from-runs, the runs to read (default: all)")
    parser.add_argument("--env", default="simple_spread", choices=["simple_spread", "torch:simple_spread"],
                        help="the PettingZoo env or its batched torch port")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=2_000_000, help="env steps per run")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--run-dir", default="runs/bench")
    parser.add_argument("--from-runs", default=None, help="read every run folder under this one (summary.json, or the TensorBoard log of "
                        "an unfinished run) instead of training")
    parser.add_argument("--continuous", action="store_true", help="train with --env-kwargs continuous_actions=true "
                        f"(random {RANDOM_CONTINUOUS}); with --from-runs: read the runs against the continuous bars "
                        "(those of iddpg, maddpg, facmac, matd3, masac, isac, hasac, hatd3, haddpg and MAT's -27)")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the learning curves to this PNG file")
    opts = parser.parse_args()
    if opts.from_runs:
        summaries = [read_run(os.path.dirname(p)) for p in
                     glob.glob(os.path.join(opts.from_runs, "**", "args.json"), recursive=True)]
    else:
        opts.algo = opts.algo or ["mappo", "ippo"]
        summaries = launcher.main(["--algo", *opts.algo, "--env", opts.env, "--seeds", str(opts.seeds),
                                   "--workers", str(opts.workers), "--run-dir", opts.run_dir, "--",
                                   "--total-timesteps", str(opts.total_timesteps)]
                                  + (["--env-kwargs", "continuous_actions=true"] if opts.continuous else []))
    by_algo = {}
    summaries = [s for s in summaries if s["eval_history"]]
    for s in summaries:
        if s["env"] in SPREAD_NAMES and (opts.algo is None or s["algo"] in opts.algo):
            key = s["algo"] if s["env"].startswith(("simple", "mpe2")) else f"{s['algo']} (torch)"
            by_algo.setdefault(key, []).append(s)
    report(by_algo, opts.json, opts.continuous)
    if opts.plot:
        plot(by_algo, opts.plot, opts.continuous)


if __name__ == "__main__":
    main()
