"""Learning bars of the foundation issue on mpe2 simple_spread (greedy evaluation, R_pz3).

Trains each algorithm with its file's defaults for several seeds (or reads runs already made
with --from-runs), then prints, per algorithm, the 3-seed mean greedy evaluation curve's best
point within each budget and its final point, beside the bars and reference numbers:

    MAPPO >= -30 within 2M env steps, >= -25 within 10M;  IPPO >= -32 within 2M
    random -79, scripted (optimal assignment) -22.6 (REFERENCE.md)

    python benchmarks/learning_mpe.py --algo mappo ippo --seeds 3 --total-timesteps 2000000
    python benchmarks/learning_mpe.py --from-runs runs/bench   # re-read finished runs
"""
import argparse
import glob
import json
import os

import numpy as np

import run as launcher

BARS = {("mappo", 2_000_000): -30.0, ("mappo", 10_000_000): -25.0, ("ippo", 2_000_000): -32.0}
RANDOM, SCRIPTED = -79.0, -22.6


def mean_curve(summaries):
    """Mean over seeds of the eval return at the eval points every seed has."""
    steps = sorted(set.intersection(*[{s for s, _ in r["eval_history"]} for r in summaries]))
    curves = [dict(map(tuple, r["eval_history"])) for r in summaries]
    return np.array(steps), np.array([[c[s] for s in steps] for c in curves])  # (P,), (seeds, P)


def report(summaries_by_algo, out_path=None):
    rows = []
    print(f"\n{'algo':<7} {'seeds':>5} {'budget':>11} {'best mean eval <= budget':>25} {'final mean eval':>16} "
          f"{'bar':>6} {'met':>5}   (random {RANDOM}, scripted {SCRIPTED}, R_pz3)")
    for algo, summaries in summaries_by_algo.items():
        steps, returns = mean_curve(summaries)
        mean = returns.mean(0)
        for (bar_algo, budget), bar in sorted(BARS.items()):
            if bar_algo != algo:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=2_000_000, help="env steps per run")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--run-dir", default="runs/bench")
    parser.add_argument("--from-runs", default=None, help="read summary.json files under this folder instead of training")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    opts = parser.parse_args()
    if opts.from_runs:
        summaries = [json.load(open(p)) for p in glob.glob(os.path.join(opts.from_runs, "**", "summary.json"),
                                                             recursive=True)]
    else:
        summaries = launcher.main(["--algo", *opts.algo, "--env", "simple_spread", "--seeds", str(opts.seeds),
                                   "--workers", str(opts.workers), "--run-dir", opts.run_dir, "--",
                                   "--total-timesteps", str(opts.total_timesteps)])
    by_algo = {}
    for s in summaries:
        if s["env"] in ("simple_spread", "simple_spread_v3") and s["algo"] in opts.algo:
            by_algo.setdefault(s["algo"], []).append(s)
    report(by_algo, opts.json)


if __name__ == "__main__":
    main()
