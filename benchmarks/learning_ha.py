"""Learning bars of the trust-region and heterogeneous-agent family (greedy evaluation, R_pz3).

Trains each algorithm with its file's defaults for several seeds (or reads runs already made
with --from-runs), then prints, per task and algorithm, the best point of the mean greedy
evaluation curve over seeds within the budget and its final point, beside the bars:

    simple_spread:            HAPPO, HATRPO, MATRPO >= -30 within 5M env steps; ITRPO, HAA2C >= -33
                              (random -79, scripted optimal assignment -22.6)
    simple_speaker_listener:  HAPPO >= -20 within 5M env steps (random -82.4)

    python benchmarks/learning_ha.py --seeds 3 --workers 2                  # every bar, PettingZoo mpe2
    python benchmarks/learning_ha.py --torch --algo happo hatrpo --seeds 1  # the batched torch port, faster
    python benchmarks/learning_ha.py --from-runs runs/bench_ha --json ha.json --plot ha.png

`--torch` trains on `torch:simple_spread` / `torch:simple_speaker_listener`, the torch port of
the same tasks (mpe2's dynamics step for step; initial states drawn by torch), several times
faster on the CPU. Runs go to <run-dir>/<env>/<algo>/ through run.py's pool, seed by seed
(every algorithm's seed 1 first); launching the same command again reads finished runs back
and resumes interrupted ones from their checkpoints. Each run's learning rate decays over
--total-timesteps, so a shorter budget is a different schedule, not a prefix of the 5M run.
"""
import argparse
import glob
import importlib
import json
import os

import run as launcher
from common.results import seed_count
from learning_mpe import mean_curve, read_run  # the same curve arithmetic and run reader as the MPE bars

BUDGET = 5_000_000
BARS = {("simple_spread", "happo"): -30.0, ("simple_spread", "hatrpo"): -30.0, ("simple_spread", "matrpo"): -30.0,
        ("simple_spread", "itrpo"): -33.0, ("simple_spread", "haa2c"): -33.0,
        ("simple_speaker_listener", "happo"): -20.0}
RANDOM = {"simple_spread": -79.0, "simple_speaker_listener": -82.4}
ALGOS = ("itrpo", "matrpo", "hatrpo", "happo", "haa2c")


def task_of(env: str) -> str:
    """'torch:simple_spread', 'mpe2:simple_spread_v3', ... -> 'simple_spread'."""
    name = env.split(":")[-1]
    return name.rsplit("_v", 1)[0] if name.rsplit("_v", 1)[-1].isdigit() else name


def train(opts) -> list:
    """Every (task, algo) with a bar x seeds 1..SEEDS, seed by seed (every algorithm's seed 1 first),
    with the file's defaults, through run.py's pool: a finished run is read back, an interrupted one
    resumes from its checkpoint when the same command is launched again. Returns the summaries."""
    extra = [] if opts.total_timesteps is None else ["--total-timesteps", str(opts.total_timesteps)]
    jobs = []
    for seed in range(1, opts.seeds + 1):
        for task, algo in BARS:
            if task in opts.task and algo in opts.algo:
                env = f"torch:{task}" if opts.torch else task
                jobs.append(launcher.make_job(importlib.import_module(f"algos.{algo}"), algo, env, seed, {}, extra,
                                              opts.run_dir))
    jobs = launcher.check_saved(jobs)
    summaries, tasks = launcher.finished_and_tasks(jobs)
    print(f"{len(jobs)} runs: {len(tasks)} to train or resume, {len(summaries)} finished; in {opts.run_dir}", flush=True)

    def on_result(index, summary, error):
        if error:
            print(f"run failed: {jobs[index].env} {jobs[index].algo} seed {jobs[index].seed}\n{error}", flush=True)
        else:
            summaries[index] = summary
            print(f"done: {jobs[index].env} {jobs[index].algo} seed {jobs[index].seed}", flush=True)

    launcher.run_local(tasks, opts.workers, on_result)
    return [summaries[i] for i in sorted(summaries)]


def report(by_key, budget: int, out_path=None) -> list:
    """Print and return one row per (task, algo) with a bar: best and final mean evaluation within the budget."""
    rows = []
    print(f"\n{'task':<24} {'algo':<7} {'seeds':>5} {'best mean eval':>15} {'final mean eval':>16} {'bar':>6} "
          f"{'met':>4}   (R_pz3, greedy, within {budget:,d} env steps)")
    for (task, algo), summaries in sorted(by_key.items()):
        steps, returns = mean_curve(summaries)
        inside = steps <= budget * 1.001
        bar = BARS.get((task, algo))
        if not inside.any():
            continue
        mean = returns[:, inside].mean(0)
        best, final, per_seed = float(mean.max()), float(mean[-1]), returns[:, inside].max(1)
        short = steps.max() < budget * 0.999
        # a bar is judged only on runs that reach its budget (a probe's shorter schedule is not judged)
        met = None if bar is None else "n/a" if short or budget < BUDGET else "yes" if best >= bar else "no"
        rows.append(dict(task=task, algo=algo, envs=sorted({s["env"] for s in summaries}), seeds=len(summaries),
                         last_step=int(steps[inside][-1]), best_mean_eval=best, final_mean_eval=final,
                         best_per_seed=per_seed.tolist(), bar=bar, met=met, random=RANDOM.get(task)))
        print(f"{task:<24} {algo:<7} {len(summaries):>5} {best:>15.2f} {final:>16.2f} "
              f"{'' if bar is None else f'{bar:.1f}':>6} {met or '':>4}   per seed best: "
              f"{', '.join(f'{x:.1f}' for x in per_seed)}{f' (runs end at {steps.max():,d})' if short else ''}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"rows": rows, "curves": {f"{t}/{a}": [s["eval_history"] for s in v]
                                                for (t, a), v in by_key.items()}}, f, indent=2)
    return rows


def plot(by_key, path: str) -> None:
    """One panel per task: the mean evaluation curve of each algorithm, thin lines per seed, its bar dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for t, _ in by_key})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for (t, algo), color in zip(sorted(by_key), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
            if t != task:
                continue
            steps, returns = mean_curve(by_key[(t, algo)])
            ax.plot(steps / 1e6, returns.T, color=color, alpha=0.25, lw=0.8)
            ax.plot(steps / 1e6, returns.mean(0), color=color, lw=2, label=f"{algo} ({seed_count(len(returns))})")
            if (t, algo) in BARS:
                ax.axhline(BARS[(t, algo)], color=color, ls="--", lw=1)
        ax.axhline(RANDOM[task], color="gray", ls=":", lw=1, label=f"random {RANDOM[task]:g}")
        ax.set(title=task, xlabel="env steps (millions)", ylabel="greedy evaluation return (R_pz3)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--task", nargs="+", default=sorted(RANDOM), choices=sorted(RANDOM),
                        help="tasks to train; each algorithm runs on the tasks where it has a bar")
    parser.add_argument("--torch", action="store_true", help="train on the torch port (torch:<task>)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS")
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help="env steps per run (default: each file's own: 5M, HAA2C 10M; every bar is judged within 5M)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at the same time")
    parser.add_argument("--run-dir", default="runs/bench_ha")
    parser.add_argument("--from-runs", default=None, help="read every run folder under this one (summary.json, or the "
                        "TensorBoard log of an unfinished run) instead of training")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the learning curves to this PNG file")
    opts = parser.parse_args()
    if opts.from_runs:
        summaries = [read_run(os.path.dirname(p)) for p in
                     glob.glob(os.path.join(opts.from_runs, "**", "args.json"), recursive=True)]
    else:
        summaries = train(opts)
    by_key = {}
    for s in summaries:
        if s["eval_history"] and s["algo"] in opts.algo and task_of(s["env"]) in opts.task:
            by_key.setdefault((task_of(s["env"]), s["algo"]), []).append(s)
    report(by_key, min(opts.total_timesteps or BUDGET, BUDGET), opts.json)
    if opts.plot and by_key:
        plot(by_key, opts.plot)


if __name__ == "__main__":
    main()
