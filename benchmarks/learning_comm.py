"""Learning bars on the MPE communication tasks (issue 32): `simple_reference` and
`simple_speaker_listener` (greedy evaluation, R_pz3: the sum over agents and steps of mpe2's rewards).

Trains every (algorithm, task) for several seeds through run.py on the torch port (presets
`configs/<algo>/<task>.yaml` where they exist, run.py's `--presets`; `--defaults` leaves them
out; runs go to <run-dir>/<env>/<algo>/, and launching the same command again reads finished
runs back), or reads runs already made
(`--from-runs`, any depth, finished or not). Then prints, per algorithm (run label) and task, the
mean over seeds of the greedy evaluation curve: its best point within each bar's budget and its
last point there, beside the bars and the published levels they come from:

    MAPPO simple_reference        >= -20 within 10M env steps (stretch: HARL's -13)
    IPPO  simple_reference        >= -25 within 10M
    MAPPO simple_speaker_listener >= -15 within 5M
    QMIX  simple_speaker_listener >= -25.7, simple_reference >= -31.5 within 2M (MARLlib's published QMIX);
          VDN and IQL reported beside it at 2M, against the same levels
    random: simple_speaker_listener -82.4, simple_reference -56.8 (REFERENCE.md, measured on mpe2)

Published levels, as REFERENCE.md and the issue give them (these tasks have no collision term, so
PettingZoo-era units equal R_pz3 up to physics details): HARL (10M, read off its figure) MAPPO about
-12 on simple_reference and -14 on simple_speaker_listener, HAPPO about -12 / -11; MARLlib reference
MAPPO -18.9 (20M), MAA2C -17.5, IPPO -24.5, QMIX -31.5 (2M); speaker-listener QMIX -25.7.

A bar is met when the best point of the mean curve within its budget reaches it; runs short of the
budget that have not reached it yet are "open", not failed.

    python benchmarks/learning_comm.py --algo mappo --tasks simple_reference --seeds 3 --total-timesteps 10000000
    python benchmarks/learning_comm.py --from-runs runs/comm_bench --json benchmarks/results/learning_comm/x.json
    python benchmarks/learning_comm.py --from-runs runs/comm_bench --plot docs/img/comm_learning.png
    # seeds 2 and 3 now, seed 1's curve from a results file an earlier session wrote
    python benchmarks/learning_comm.py --algo iql --tasks simple_reference --seeds 2 --first-seed 2 \
        --total-timesteps 2000000 --with-json benchmarks/results/learning_comm/x_seed1.json
"""
import argparse
import json
import os
import shlex
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import run as launcher  # noqa: E402
from common.results import (curves_on_grid, find_runs, latest_per_seed, mean_and_band, read_run,  # noqa: E402
                            seed_count)

TASKS = ("simple_reference", "simple_speaker_listener")
# (algo, task) -> (bar R_pz3, budget in env steps, where the bar comes from)
BARS: Dict[Tuple[str, str], Tuple[float, int, str]] = {
    ("mappo", "simple_reference"): (-20.0, 10_000_000, "issue 32 (MARLlib MAPPO -18.9 at 20M; HARL about -12)"),
    ("ippo", "simple_reference"): (-25.0, 10_000_000, "issue 32 (MARLlib IPPO -24.5)"),
    ("mappo", "simple_speaker_listener"): (-15.0, 5_000_000, "issue 32 (HARL MAPPO about -14)"),
    ("qmix", "simple_speaker_listener"): (-25.7, 2_000_000, "MARLlib QMIX"),
    ("qmix", "simple_reference"): (-31.5, 2_000_000, "MARLlib QMIX"),
}
# reported beside QMIX at its budget, against MARLlib's QMIX level (no bar of their own)
BESIDE = {("vdn", t): BARS[("qmix", t)] for t in TASKS} | {("iql", t): BARS[("qmix", t)] for t in TASKS}
RANDOM = {"simple_speaker_listener": -82.4, "simple_reference": -56.8}  # REFERENCE.md, mpe2
HARL = {"simple_reference": -12.0, "simple_speaker_listener": -14.0}  # MAPPO at 10M, read off HARL's figure


def task_of(env: str) -> Optional[str]:
    """'torch:simple_reference' / 'simple_reference_v3' -> 'simple_reference'; None for other envs."""
    name = env.split(":")[-1].split("_v")[0]
    return name if name in TASKS else None


def verdict(best: float, reached: int, bar: float, budget: int) -> Optional[bool]:
    """True if the best mean return within the budget reaches the bar; None (open) while the runs are
    short of the budget and below it; False at the budget and below it."""
    if best >= bar:
        return True
    return None if reached < budget * 0.999 else False


def read_runs(root: str, algos: Optional[List[str]] = None, tasks: Optional[List[str]] = None) -> List[dict]:
    """The communication-task runs under `root` (one per env, label and seed: the furthest along),
    each a record of common.results.read_run with `task` added."""
    records = []
    for record in latest_per_seed([read_run(p) for p in find_runs(root)]):
        task = task_of(record["env"])
        if task is None or (tasks and task not in tasks) or (algos and record["algo"] not in algos):
            continue
        records.append({**record, "task": task})
    return records


def stored_runs(path: str, algos: Optional[List[str]] = None, tasks: Optional[List[str]] = None) -> List[dict]:
    """The runs of a results file this script wrote (`--json`) as records `report` and `plot` take:
    their curves, as far as each went (a run's end is its last evaluation)."""
    try:
        with open(path) as f:
            stored = json.load(f)
        runs, rows = stored["runs"], stored["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a results file of this script ({type(e).__name__}: {e})")
    algo_of = {row["label"]: row["algo"] for row in rows}
    finished = {(row["label"], row["task"]): row["finished"] for row in rows}
    records = []
    for run in runs:
        task, curve = task_of(run["env"]), [(int(s), float(v)) for s, v in run["curve"]]
        algo = algo_of.get(run["label"], run["label"].split(",")[0])
        if task is None or not curve or (tasks and task not in tasks) or (algos and algo not in algos):
            continue
        records.append(dict(label=run["label"], algo=algo, task=task, env=run["env"], seed=run["seed"],
                            path=run["path"], args={"config": run.get("config")}, curve=curve,
                            global_step=curve[-1][0], finished=finished.get((run["label"], task), True)))
    return records


def report(records: List[dict], out_path: Optional[str] = None) -> List[dict]:
    """One row per (run label, task): the mean over seeds of the greedy evaluation curves within the
    budget of the algorithm's bar (or the whole run where it has none), its best and last points."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault((r["label"], r["task"]), []).append(r)
    rows = []
    print(f"\n{'label':<26} {'task':<24} {'seeds':>5} {'steps':>11} {'budget':>11} {'best mean':>10} {'last mean':>10}"
          f"  bar (greedy R_pz3)")
    for (label, task), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        algo = runs[0]["algo"]
        bar = BARS.get((algo, task)) or BESIDE.get((algo, task))
        budget = bar[1] if bar else max(r["global_step"] for r in runs)
        steps, values = curves_on_grid([[(s, v) for s, v in r["curve"] if s <= budget * 1.001] for r in runs])
        if not values.size:
            print(f"{label:<26} {task:<24} {len(runs):>5}   (no evaluation yet)")
            continue
        mean, low, high, count = mean_and_band(values)
        full = count == len(runs)  # points every seed has reached
        if not full.any():
            print(f"{label:<26} {task:<24} {len(runs):>5}   (no evaluation every seed has)")
            continue
        best_i = int(np.nanargmax(np.where(full, mean, np.nan)))
        last_i = int(np.flatnonzero(full)[-1])
        reached = min(r["global_step"] for r in runs)
        met = verdict(float(mean[best_i]), reached, bar[0], budget) if bar else None
        rows.append(dict(label=label, algo=algo, task=task, seeds=len(runs), steps_reached=reached, budget=budget,
                         best_mean=float(mean[best_i]), best_at=int(steps[best_i]),
                         best_ci=[float(low[best_i]), float(high[best_i])], last_mean=float(mean[last_i]),
                         last_at=int(steps[last_i]), best_per_seed=[float(np.nanmax(v[full])) for v in values],
                         last_per_seed=[float(v[last_i]) for v in values], bar=bar[0] if bar else None,
                         bar_source=bar[2] if bar else None, met=met, own_bar=(algo, task) in BARS,
                         random=RANDOM[task], harl_mappo=HARL[task], finished=all(r["finished"] for r in runs)))
        shown = (f"{bar[0]:g} ({bar[2]}{'' if (algo, task) in BARS else ', beside QMIX'}): "
                 + {True: "met", False: "NOT met", None: "open"}[met]) if bar else "-"
        print(f"{label:<26} {task:<24} {len(runs):>5} {reached:>11,d} {budget:>11,d} {mean[best_i]:>10.2f} "
              f"{mean[last_i]:>10.2f}  {shown}   per seed best: " + ", ".join(f"{x:.1f}" for x in rows[-1]["best_per_seed"]))
    print(f"random: {', '.join(f'{t} {v}' for t, v in RANDOM.items())}; HARL MAPPO (10M, its figure): "
          f"{', '.join(f'{t} about {v:g}' for t, v in HARL.items())}")
    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump({"bars": {f"{a}/{t}": {"bar": b, "budget": n, "source": s} for (a, t), (b, n, s) in BARS.items()},
                       "random": RANDOM, "harl_mappo": HARL, "rows": rows,
                       "runs": [{"label": r["label"], "env": r["env"], "seed": r["seed"], "path": r["path"],
                                 "config": r["args"].get("config"), "curve": r["curve"]} for r in records]},
                      f, indent=2)
    return rows


def plot(records: List[dict], path: str) -> None:
    """Greedy evaluation return against env steps, one panel per task: the mean over seeds of each
    run label (95% bootstrap band), the bars as dashed lines, random as a dotted one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in records)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        by_label: Dict[str, List[dict]] = {}
        drawn = set()  # each bar once, whichever run label reaches it first
        for r in records:
            if r["task"] == task:
                by_label.setdefault(r["label"], []).append(r)
        for label, runs in sorted(by_label.items()):
            steps, values = curves_on_grid([r["curve"] for r in runs])
            if not values.size:
                continue
            mean, low, high, _ = mean_and_band(values)
            line, = ax.plot(steps / 1e6, mean, lw=2, label=f"{label}, {seed_count(len(runs))}")
            ax.fill_between(steps / 1e6, low, high, color=line.get_color(), alpha=0.2)
            bar = BARS.get((runs[0]["algo"], task))
            if bar and bar not in drawn:
                drawn.add(bar)
                ax.axhline(bar[0], color="black", ls="--", lw=1, label=f"{runs[0]['algo']} bar {bar[0]:g} "
                           f"by {bar[1] / 1e6:g}M")
        ax.axhline(RANDOM[task], color="gray", ls=":", lw=1, label=f"random {RANDOM[task]:g}")
        ax.set_title(f"torch:{task}")
        ax.set_xlabel("env steps (millions)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("greedy evaluation return (R_pz3)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> List[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=None,
                        help="algorithm files to train (default: mappo) or, with --from-runs, to read (default: all)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="trained as torch:<task>")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=1, help="seeds FIRST..FIRST+SEEDS-1 (e.g. the seeds an "
                        "earlier session did not reach)")
    parser.add_argument("--total-timesteps", type=int, default=10_000_000, help="env steps per run")
    parser.add_argument("--eval-every", type=int, default=250_000, help="env steps between greedy evaluations")
    parser.add_argument("--flags", default="", help="extra algorithm flags for every run, one quoted string")
    parser.add_argument("--defaults", action="store_true", help="train with each file's defaults, not the presets "
                        "configs/<algo>/<task>.yaml")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--run-dir", default="runs/comm_bench")
    parser.add_argument("--from-runs", default=None, help="read every run of these tasks under this folder instead of "
                        "training")
    parser.add_argument("--with-json", nargs="+", default=[], metavar="FILE",
                        help="results files this script wrote earlier: their runs join the table (seeds whose run "
                        "folders are gone, e.g. from an earlier session); a run here replaces a stored one of the "
                        "same label, task and seed")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the learning curves to this PNG file")
    opts = parser.parse_args(argv)
    root = opts.from_runs or opts.run_dir
    if not opts.from_runs:
        launcher.main(["--algo", *(opts.algo or ["mappo"]), "--env", *[f"torch:{t}" for t in opts.tasks], "--seeds", str(opts.seeds),
                       "--first-seed", str(opts.first_seed),
                       *([] if opts.defaults else ["--presets"]), "--workers", str(opts.workers), "--run-dir", root, "--",
                       "--total-timesteps", str(opts.total_timesteps), "--eval-every", str(opts.eval_every),
                       *shlex.split(opts.flags)])
    algos = opts.algo or (None if opts.from_runs else ["mappo"])
    records = read_runs(root, algos, opts.tasks) if os.path.isdir(root) else []
    here = {(r["label"], r["task"], r["seed"]) for r in records}
    records += [r for path in opts.with_json for r in stored_runs(path, algos, opts.tasks)
                if (r["label"], r["task"], r["seed"]) not in here]
    if not records:
        raise SystemExit(f"error: no run of {' or '.join(opts.tasks)} under {root}")
    rows = report(records, opts.json)
    if opts.plot:
        plot(records, opts.plot)
    return rows


if __name__ == "__main__":
    main()
