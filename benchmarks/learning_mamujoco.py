"""Learning bar on MaMuJoCo: MATD3 on `mamujoco:HalfCheetah-2x3` (two agents of three joints,
1000-step episodes) reaches an evaluation return of at least 2000 within 1M env steps, 3 seeds
(the best point of the 3-seed mean greedy evaluation curve within the budget).

Units. MaMuJoCo gives every agent the robot's reward, so the logged `eval/episodic_return`
(the sum over agents, as for every env here) is N times the robot's return. The bar, HARL's
figures and single-agent MuJoCo numbers are in the robot's own units (the return one agent
gets), so this script divides by N and reports that. Uniformly random actions score about
-280 per episode in those units on HalfCheetah (`--random` measures it).

Trains with the preset `configs/<algo>/mamujoco_<scenario>.yaml` through `run.py` (runs go to
<run-dir>/<env>/<algo>/, a second launch resumes or skips them), or reads runs already made
(`--from-runs`, finished or not):

    python benchmarks/learning_mamujoco.py --seeds 3 --workers 3   # about 30 min of one core per seed
    python benchmarks/learning_mamujoco.py --from-runs runs/bench_hc --json hc.json --plot hc.png
    python benchmarks/learning_mamujoco.py --random                 # uniformly random actions
"""
import argparse
import json
import os

import numpy as np

import run as launcher
from common.results import curves_on_grid, find_runs, latest_per_seed, mean_and_band, read_run, seed_count

BARS = {("matd3", "mamujoco:HalfCheetah-2x3"): (2000.0, 1_000_000),
        ("hasac", "mamujoco:HalfCheetah-2x3"): (6968.0, 1_000_000)}  # HASAC: at least MATD3's recorded 6,968  # (return in the robot's units, env steps)


def n_agents(env: str) -> int:
    from envs import make_env

    vec = make_env(env, 1, seed=0)
    n = vec.n_agents
    vec.close()
    return n


def report(records, n: int, out_path=None) -> list:
    """One row per (algorithm, env): best and final point of the 3-seed mean curve within the budget."""
    rows = []
    by_key = {}
    for r in records:
        by_key.setdefault((r["label"], r["env"]), []).append(r)
    print(f"\n{'algo':<8} {'env':<26} {'seeds':>5} {'best mean eval (at)':>22} {'final':>8} {'bar':>6} {'met':>5}"
          "   (evaluation return in the robot's units: eval/episodic_return / N)")
    for (label, env), runs in sorted(by_key.items()):
        bar, budget = BARS.get((label.split(",")[0], env), (None, max(r["global_step"] for r in runs)))
        steps, values = curves_on_grid([[(s, v / n) for s, v in r["curve"] if s <= budget * 1.001] for r in runs])
        mean, low, high, count = mean_and_band(values)
        full = count == len(runs)  # points every seed has reached
        if not full.any():
            print(f"{label:<8} {env:<26} {len(runs):>5}   (no evaluation point shared by every seed yet)")
            continue
        best_i = int(np.nanargmax(np.where(full, mean, np.nan)))
        final_i = int(np.flatnonzero(full)[-1])
        reached = int(steps[final_i])
        met = None if bar is None or (reached < budget * 0.999 and mean[best_i] < bar) else bool(mean[best_i] >= bar)
        first = next((int(s) for s, m, f in zip(steps, mean, full) if f and bar is not None and m >= bar), None)
        rows.append(dict(algo=label, env=env, seeds=len(runs), steps_reached=reached,
                         best_mean_eval=float(mean[best_i]), best_at=int(steps[best_i]),
                         best_ci=[float(low[best_i]), float(high[best_i])],
                         final_mean_eval=float(mean[final_i]), first_step_at_bar=first, bar=bar, budget=budget, met=met,
                         best_per_seed=[float(np.nanmax(v[full])) for v in values],
                         sps_per_run=[r["sps"] for r in runs]))
        verdict = "-" if bar is None else ("yes" if met else "open" if met is None else "NO")
        print(f"{label:<8} {env:<26} {len(runs):>5} {mean[best_i]:>13.0f} ({int(steps[best_i]):>7,d}) "
              f"{mean[final_i]:>8.0f} {bar if bar is not None else '-':>6} {verdict:>5}   per seed best: "
              + ", ".join(f"{x:.0f}" for x in rows[-1]["best_per_seed"])
              + (f"; mean first at the bar at {first:,d} steps" if first else ""))
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"units": "robot's return (eval/episodic_return / N agents)", "n_agents": n, "rows": rows,
                       "curves": {f"{r['label']} {r['env']} seed {r['seed']}": [(s, v / n) for s, v in r["curve"]]
                                  for r in records}}, f, indent=2)
    return rows


def plot(records, n: int, path: str) -> None:
    """Evaluation return (robot's units) against env steps: mean over seeds, 95% bootstrap band, thin seeds, the bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_key = {}
    for r in records:
        by_key.setdefault((r["label"], r["env"]), []).append(r)
    for (label, env), runs in sorted(by_key.items()):
        steps, values = curves_on_grid([[(s, v / n) for s, v in r["curve"]] for r in runs])
        mean, low, high, _ = mean_and_band(values)
        line, = ax.plot(steps / 1e6, mean, lw=2, label=f"{label} ({seed_count(len(runs))})")
        ax.fill_between(steps / 1e6, low, high, color=line.get_color(), alpha=0.2)
        for seed_curve in values:
            ax.plot(steps / 1e6, seed_curve, color=line.get_color(), alpha=0.3, lw=0.8)
        bar = BARS.get((label.split(",")[0], env))
        if bar is not None:
            ax.axhline(bar[0], color=line.get_color(), ls="--", lw=1, label=f"bar {bar[0]:g} by {bar[1] / 1e6:g}M")
    ax.set_xlabel("env steps (millions)")
    ax.set_ylabel("greedy evaluation return (robot's units)")
    ax.set_title(", ".join(sorted({r["env"] for r in records})))
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def random_score(env: str, episodes: int = 10, seed: int = 0) -> float:
    """Mean return (robot's units) of uniformly random actions in the action box."""
    from envs import make_env

    vec = make_env(env, episodes, seed=seed)
    vec.reset()
    rng = np.random.default_rng(seed)
    returns = []
    while len(returns) < episodes:
        step = vec.step(vec.sample_actions(rng))
        returns += (np.asarray(step.episode_return)[step.done].sum(-1) / vec.n_agents).tolist()
    vec.close()
    return float(np.mean(returns[:episodes]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["matd3"])
    parser.add_argument("--env", default="mamujoco:HalfCheetah-2x3")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=None, help="env steps per run (default: the preset's)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--run-dir", default="runs/bench_mamujoco")
    parser.add_argument("--from-runs", default=None, help="read every run under this folder instead of training")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the learning curves to this PNG file")
    parser.add_argument("--random", action="store_true", help="print uniformly random actions' return and stop")
    opts = parser.parse_args()
    n = n_agents(opts.env)
    if opts.random:
        print(f"{opts.env}, uniformly random actions, 10 episodes: return {random_score(opts.env):.1f} (robot's units)")
        return
    root = opts.from_runs or opts.run_dir
    if not opts.from_runs:
        extra = ["--total-timesteps", str(opts.total_timesteps)] if opts.total_timesteps else []
        launcher.main(["--algo", *opts.algo, "--env", opts.env, "--seeds", str(opts.seeds), "--presets",
                       "--workers", str(opts.workers), "--run-dir", root, *(["--", *extra] if extra else [])])
    records = latest_per_seed([read_run(p) for p in find_runs(root)])
    records = [r for r in records if r["env"] == opts.env and r["curve"]]
    report(records, n, opts.json)
    if opts.plot:
        plot(records, n, opts.plot)


if __name__ == "__main__":
    main()
