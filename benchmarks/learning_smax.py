"""Learning bars on SMAX (`torch:smax_<map>`, the batched torch port): greedy-evaluation win rates
of MAPPO, IPPO and QMIX on 3m, 2s3z, 3s5z and 5m_vs_6m, 3 seeds each, and of any other file given
with --algo (MAT and MAT-Dec against MAPPO at the same budget: --versus mappo).

Trains every (algorithm, map) for several seeds through run.py (presets `configs/<algo>/<env>.yaml`
where they exist; runs go to <run-dir>/<env>/<algo>/, and launching the same command again reads
finished runs back and resumes interrupted ones), or reads runs already made (`--from-runs`, any
depth, finished or not). Then prints, per algorithm and map, the mean over seeds of the greedy
evaluation win rate (`eval_win_history` in summary.json, else the `eval/win_rate` TensorBoard
scalar of a run still going): its best point within the budget and its last one, beside the bars:

    floor       MAPPO >= 0.9 on 3m and on 2s3z within 10M env steps (the issue's minimum)
    published   JaxMARL's published win rate for the same algorithm, map and budget: none found as
                a number (its paper and repository show SMAX results as learning curves only; 3m is
                in none of its result sweeps). PUBLISHED below stays empty until one is found, with
                its source.
    reference   otherwise, JaxMARL's own baseline run here side by side on the same budget (a run
                outside the repository): --reference takes its runs' results files
                (benchmarks/results/learning_smax/jaxmarl-baseline_<algo>_smax-<map>_*.json, each
                with its greedy evaluation curve; the bar is the best point of their mean within
                the budget) or a table {"source": ..., "mappo/2s3z": 0.97, "qmix/5m_vs_6m": 0.41}
    versus      --versus LABEL: every other label on a map must reach that label's best mean win rate
                within the same budget (MAT's bar: at least MAPPO's; MAPPO's stored 10M runs join
                with --with-json and are cut at the budget like every run)

The budget is --total-timesteps (10M, JaxMARL's; give it with --from-runs to judge shorter runs). A
run stops at the first whole iteration past it, so points up to 0.5% past it count as within.

A bar is met when the best point of the mean curve within its budget reaches it; a run short of
the budget that has not reached it yet is "open", not failed. Runs that evaluate by sampling
(`--eval-policy sampled`) are listed but not judged: the bars are on greedy evaluation.

    python benchmarks/learning_smax.py --seeds 3 --workers 2                  # every algorithm and map, 10M steps
    python benchmarks/learning_smax.py --algo mappo --maps 3m 2s3z --total-timesteps 2000000
    python benchmarks/learning_smax.py --from-runs runs/bench_smax --json smax.json --plot smax.png
    python benchmarks/learning_smax.py --from-runs runs/later --with-json smax_seed1.json --json smax.json  # join seeds
    python benchmarks/learning_smax.py --from-runs runs/bench_smax --reference benchmarks/results/learning_smax/jaxmarl-baseline_*.json
    python benchmarks/learning_smax.py --algo mat --maps 2s3z --total-timesteps 2000000 --run-dir runs/smax_mat
    python benchmarks/learning_smax.py --from-runs runs/smax_mat --algo mat mappo --maps 2s3z --total-timesteps 2000000 \
        --versus mappo --with-json benchmarks/results/learning_smax/mappo_smax-2s3z-torch_10m.json  # MAPPO's stored runs
"""
import argparse
import json
import os
import shlex
from typing import Dict, List, Optional, Tuple

import numpy as np

import run as launcher
from common.results import (curves_on_grid, find_runs, latest_per_seed, mean_and_band, read_run, scalar_history,
                            seed_count)

ALGOS = ("mappo", "ippo", "qmix")
MAPS = ("3m", "2s3z", "3s5z", "5m_vs_6m")
# Env steps summed over copies: TOTAL_TIMESTEPS 1e7 of every JaxMARL SMAX baseline config (FLAIROx/JaxMARL
# baselines/MAPPO/config/mappo_homogenous_rnn_smax.yaml @ ea4733c, baselines/IPPO/config/ippo_rnn_smax.yaml
# @ a9b91a7, baselines/QLearning/config/alg/ql_rnn_smax.yaml @ edebe10), which count env steps the same way.
BUDGET = 10_000_000
SLACK = 0.005  # a point up to this fraction past the budget is within it (runs end on a whole iteration)
WIN_TAG = "eval/win_rate"
# (algo, map) -> greedy win rate JaxMARL publishes within BUDGET, each with its source. None found: the JaxMARL
# paper (Rutherford et al., arXiv 2311.10090) and FLAIROx/JaxMARL#77 give SMAX results as curves only, and its
# READMEs and docs give none (BENCHMARKS.md lists what was searched).
PUBLISHED: Dict[Tuple[str, str], Tuple[float, str]] = {}
FLOOR = {("mappo", "3m"): 0.9, ("mappo", "2s3z"): 0.9}  # the minimum, within 10M env steps
SMAX_PREFIXES = ("torch:smax_", "jaxmarl:smax_")


def smax_map(env: str) -> Optional[str]:
    """'torch:smax_2s3z' -> '2s3z'; None for an env that is not SMAX."""
    for prefix in SMAX_PREFIXES:
        if env.startswith(prefix):
            return env[len(prefix):]
    return None


def win_curve(record: dict) -> List[Tuple[int, float]]:
    """[(env step, greedy win rate)] of every evaluation a run made: summary.json's `eval_win_history`
    (full precision), with the TensorBoard scalar `eval/win_rate` for a run without one (still going,
    or made before win rates were recorded) and for the steps of a resumed run before its resume."""
    summary = record["summary"]
    points: Dict[int, float] = {}
    if summary is None or record["args"].get("resume") or "eval_win_history" not in summary:
        points.update(scalar_history(record["path"], (WIN_TAG,))[WIN_TAG])
    if summary:
        points.update({int(s): float(v) for s, v in summary.get("eval_win_history") or [] if v is not None})
    return sorted(points.items())


def within(curve: List[Tuple[int, float]], budget: int) -> List[Tuple[int, float]]:
    """The points of a curve within the budget (a run ends on the first whole iteration past it)."""
    return [(step, value) for step, value in curve if step <= budget * (1 + SLACK)]


def read_runs(root: str, algos: Optional[List[str]] = None, maps: Optional[List[str]] = None) -> List[dict]:
    """The SMAX runs under `root` (one per env, label and seed: the furthest along), each record of
    common.results.read_run with `map`, `family`, `eval_policy` and `win_curve` added."""
    records = []
    for record in latest_per_seed([read_run(p) for p in find_runs(root)]):
        map_name = smax_map(record["env"])
        if map_name is None or (maps and map_name not in maps) or (algos and record["algo"] not in algos):
            continue
        records.append({**record, "map": map_name, "family": record["env"].split(":")[0],
                        "eval_policy": record["args"].get("eval_policy", "greedy"), "win_curve": win_curve(record)})
    return records


def stored_runs(path: str, algos: Optional[List[str]] = None, maps: Optional[List[str]] = None) -> List[dict]:
    """The runs of a results file this script wrote (`--json`), as records `report` and `plot` take: each
    one's win-rate curve as far as it went (seeds whose run folders are gone, from an earlier session)."""
    try:
        with open(path) as f:
            stored = json.load(f)
        policy = {row["algo"]: row["eval_policy"] for row in stored["rows"]}
        stored_args = {(row["algo"], row["map"]): row.get("args") for row in stored["rows"]}
        curves = stored["curves"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: {path} is not a results file of this script ({type(e).__name__}: {e})")
    records = []
    for key, curve in curves.items():
        label, env, _, seed = key.rsplit(" ", 3)  # "<label> <env> seed <n>"
        map_name, algo = smax_map(env), label.split(",")[0]
        if not curve or map_name is None or (maps and map_name not in maps) or (algos and algo not in algos):
            continue
        win_curve = [(int(s), float(v)) for s, v in curve]
        records.append(dict(label=label, algo=algo, env=env, seed=int(seed), map=map_name, family=env.split(":")[0],
                            eval_policy=policy.get(label, "greedy"), win_curve=win_curve,
                            global_step=win_curve[-1][0], path=path, args=stored_args.get((label, map_name))))
    return records


def load_reference(paths: Optional[List[str]], budget: int = BUDGET) -> Tuple[Dict[Tuple[str, str], float], str, dict]:
    """({(algo, map): win rate}, source, {(algo, map): {"curve": [[env steps, mean win rate]], "runs": n}})
    from --reference JSON files. Each is either a table ("algo/map": rate, and "source") or one baseline run's
    results (`algo`, `map`, `greedy_eval_curve` [[env steps, win rate]], as
    benchmarks/results/learning_smax/jaxmarl-baseline_*.json): the runs of one (algo, map) are averaged point by
    point (that mean curve and how many runs it averages are the third item), and the bar is the best point of
    that mean within the budget, as for our own runs."""
    rates, sources, curves = {}, [], {}
    for path in paths or []:
        with open(path) as f:
            data = json.load(f)
        if "greedy_eval_curve" in data:
            curves.setdefault((data["algo"], data["map"]), []).append(
                within([tuple(point) for point in data["greedy_eval_curve"]], budget))
            source = data.get("source", {})
            sources.append(f"{source.get('baseline_file', path)} @ {source.get('baseline_file_commit', '?')[:7]}, "
                           f"{data['map']}, seed {data.get('seed')}, {data.get('env_steps', 0):,} env steps")
            continue
        table = {tuple(key.split("/", 1)): float(value) for key, value in data.items() if key != "source"}
        bad = [key for key in table if len(key) != 2]
        if bad:
            raise SystemExit(f"error: {path}: keys are 'algo/map' (e.g. 'mappo/2s3z'); got {bad}")
        rates.update(table)
        sources.append(data.get("source", path))
    mean_curves = {}
    for key, runs in curves.items():
        points = min(len(run) for run in runs)
        curve = [[runs[0][i][0], float(np.mean([run[i][1] for run in runs]))] for i in range(points)]
        mean_curves[key] = {"curve": curve, "runs": len(runs)}
        rates[key] = max(rate for _, rate in curve)
    return rates, "; ".join(sources), mean_curves


def bars_of(algo: str, map_name: str, reference: Dict[Tuple[str, str], float]) -> List[Tuple[str, float]]:
    """[(kind, win rate)] every bar of an algorithm on a map, all within BUDGET env steps."""
    bars = []
    if (algo, map_name) in FLOOR:
        bars.append(("floor", FLOOR[(algo, map_name)]))
    if (algo, map_name) in PUBLISHED:
        bars.append(("published", PUBLISHED[(algo, map_name)][0]))
    if (algo, map_name) in reference:
        bars.append(("reference", reference[(algo, map_name)]))
    return bars


def verdict(best: float, reached: int, bar: float, budget: int) -> Optional[bool]:
    """True if the best mean win rate within the budget reaches the bar; None (open) while the runs are
    short of the budget and below it; False at the budget and below it."""
    if best >= bar:
        return True
    return None if reached < budget * 0.999 else False


def mean_within(runs: List[dict], budget: int) -> tuple:
    """(steps, per-run values, mean, low, high, full) of the runs' win-rate curves within the budget on
    one grid, `full` marking the points every run has reached (all empty when no run has a point)."""
    steps, values = curves_on_grid([within(r["win_curve"], budget) for r in runs])
    mean, low, high, count = mean_and_band(values) if values.size else (np.array([]),) * 4
    return steps, values, mean, low, high, count == len(runs)


def best_within(runs: List[dict], budget: int) -> Optional[float]:
    """The best point of the runs' mean greedy win-rate curve within the budget (points every run has
    reached); None when there is none."""
    _, _, mean, _, _, full = mean_within(runs, budget)
    return float(np.max(mean[full])) if full.any() else None


RUN_LOCAL_ARGS = launcher.NOT_COMPARED + ("seed", "exp_name")  # where and how a run ran, not what it learned


def shared_args(runs: List[dict]) -> Optional[dict]:
    """The arguments every seed of a row ran with (args.json; for runs from a results file, the row's stored
    `args`), leaving out those that say where and how a run ran rather than what it learned, so a results file
    says what it measured; None when a run has none (a claim for every seed or none)."""
    per_run = [r.get("args") for r in runs]
    if not per_run or not all(per_run):
        return None
    keys = set.intersection(*(set(a) for a in per_run)) - set(RUN_LOCAL_ARGS)
    return {k: per_run[0][k] for k in sorted(keys) if all(a[k] == per_run[0][k] for a in per_run)}


def report(records: List[dict], reference: Dict[Tuple[str, str], float], budget: int = BUDGET,
           out_path: Optional[str] = None, versus: Optional[str] = None) -> List[dict]:
    """One row per (algorithm, map, family, eval policy): the mean over seeds of the win-rate curves
    within the budget (at points every seed has reached), its best and last point, and its bars; with
    `versus` (a label), every other greedy label on a map is also judged against that label's best."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault((r["label"], r["map"], r["family"], r["eval_policy"]), []).append(r)
    versus_best = {m: best_within(runs, budget) for (label, m, _, policy), runs in groups.items()
                   if label == versus and policy == "greedy"}
    rows = []
    print(f"\n{'algo':<13} {'map':<9} {'env':<8} {'seeds':>5} {'steps':>11} {'best mean':>10} {'last mean':>10}  bars "
          f"(greedy win rate within {budget:,d} env steps)")
    for (label, map_name, family, policy), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        steps, values, mean, low, high, full = mean_within(runs, budget)  # full: points every seed has reached
        name = label if policy == "greedy" else f"{label},{policy}"
        if not full.any():
            print(f"{name:<13} {map_name:<9} {family:<8} {len(runs):>5}   (no win-rate evaluation every seed has)")
            continue
        best_i = int(np.nanargmax(np.where(full, mean, np.nan)))
        last_i = int(np.flatnonzero(full)[-1])
        reached = min(r["global_step"] for r in runs)  # env steps every seed has trained (past the budget too)
        bars = bars_of(label.split(",")[0], map_name, reference) if policy == "greedy" else []
        if policy == "greedy" and label != versus and versus_best.get(map_name) is not None:
            bars.append((versus, versus_best[map_name]))
        judged = [{"kind": kind, "bar": bar, "met": verdict(float(mean[best_i]), reached, bar, budget)}
                  for kind, bar in bars]
        rows.append(dict(algo=label, map=map_name, env_family=family, eval_policy=policy, seeds=len(runs),
                         budget=budget, steps_reached=reached, best_mean_win_rate=float(mean[best_i]),
                         best_at=int(steps[best_i]), best_ci=[float(low[best_i]), float(high[best_i])],
                         last_mean_win_rate=float(mean[last_i]),
                         best_per_seed=[float(np.nanmax(v[full])) for v in values],
                         last_per_seed=[float(v[last_i]) for v in values], bars=judged, args=shared_args(runs)))
        shown = "; ".join(f"{b['kind']} {b['bar']:.2f} "
                          + {True: "met", False: "NOT met", None: "open"}[b["met"]] for b in judged) or "-"
        print(f"{name:<13} {map_name:<9} {family:<8} {len(runs):>5} {reached:>11,d} {mean[best_i]:>10.3f} "
              f"{mean[last_i]:>10.3f}  {shown}   per seed best: "
              + ", ".join(f"{x:.2f}" for x in rows[-1]["best_per_seed"]))
    maps_here = {r["map"] for r in records}
    unbarred = sorted({(a, m) for a, m in set(PUBLISHED) | set(reference) | set(FLOOR) if m in maps_here}
                      - {(r["algo"].split(",")[0], r["map"]) for r in rows if r["eval_policy"] == "greedy"})
    if unbarred:
        print("bars without runs yet: " + ", ".join(f"{a} on {m}" for a, m in unbarred))
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"budget": budget, "floor": {f"{a}/{m}": v for (a, m), v in FLOOR.items()},
                       "published": {f"{a}/{m}": {"win_rate": v, "source": s} for (a, m), (v, s) in PUBLISHED.items()},
                       "reference": {f"{a}/{m}": v for (a, m), v in reference.items()}, "rows": rows,
                       "curves": {f"{r['label']} {r['env']} seed {r['seed']}": r["win_curve"] for r in records}},
                      f, indent=2)
    return rows


def plot(records: List[dict], path: str, reference: Dict[Tuple[str, str], float], budget: int = BUDGET,
         baselines: Optional[dict] = None) -> None:
    """Greedy win rate against env steps, one panel per map: the mean over seeds of each algorithm
    (95% bootstrap band), its bars as dashed lines, the curve of JaxMARL's baseline runs as a dotted one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maps = sorted({r["map"] for r in records}, key=lambda m: MAPS.index(m) if m in MAPS else len(MAPS))
    fig, axes = plt.subplots(1, len(maps), figsize=(4.5 * len(maps), 3.8), squeeze=False)
    for ax, map_name in zip(axes[0], maps):
        by_label: Dict[str, List[dict]] = {}
        for r in records:
            if r["map"] == map_name:
                by_label.setdefault(f"{r['label']} ({r['family']}, {r['eval_policy']})", []).append(r)
        for label, runs in sorted(by_label.items()):
            steps, values = curves_on_grid([within(r["win_curve"], budget) for r in runs])
            if not values.size:
                continue
            mean, low, high, _ = mean_and_band(values)
            line, = ax.plot(steps / 1e6, mean, "o-", ms=3, lw=2, label=f"{label}, {seed_count(len(runs))}")
            ax.fill_between(steps / 1e6, low, high, color=line.get_color(), alpha=0.2)
            algo = label.split(" ")[0]
            bars = bars_of(algo, map_name, reference) if label.endswith("greedy)") else []
            for kind, bar in bars:
                ax.axhline(bar, color=line.get_color(), ls="--", lw=1, label=f"{kind} {bar:g} by {budget / 1e6:g}M")
            baseline = (baselines or {}).get((algo, map_name))
            if baseline:
                ax.plot([s / 1e6 for s, _ in baseline["curve"]], [w for _, w in baseline["curve"]], "s:", ms=3, lw=1.5,
                        color="gray", label=f"JaxMARL's {algo} run here, {seed_count(baseline['runs'])} (reference)")
        ax.set_title(f"SMAX {map_name}")
        ax.set_xlabel("env steps (millions)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("greedy evaluation win rate")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> List[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=list(ALGOS), help="algorithm files to train (or read)")
    parser.add_argument("--maps", nargs="+", default=list(MAPS), help="SMAX maps, trained as torch:smax_<map>")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=BUDGET,
                        help="env steps per run, and the budget the table judges within (also with --from-runs)")
    parser.add_argument("--eval-every", type=int, default=500_000, help="env steps between greedy evaluations")
    parser.add_argument("--flags", default="", help="extra algorithm flags for every run, one quoted string")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--run-dir", default="runs/bench_smax")
    parser.add_argument("--from-runs", default=None, help="read every SMAX run under this folder instead of training")
    parser.add_argument("--reference", nargs="+", default=None,
                        help="JaxMARL's own baseline runs here: results files of its runs (jaxmarl-baseline_*.json) "
                             "or a table ({'algo/map': rate, 'source': ...})")
    parser.add_argument("--with-json", nargs="+", default=[], metavar="FILE",
                        help="results files this script wrote earlier: their runs join the table (seeds whose run "
                        "folders are gone); a run here replaces a stored one of the same label, map and seed")
    parser.add_argument("--versus", default=None, metavar="LABEL",
                        help="judge every other label on a map against this one's best within the same budget")
    parser.add_argument("--json", default=None, help="write the table and curves to this JSON file")
    parser.add_argument("--plot", default=None, help="write the win-rate curves to this PNG file")
    opts = parser.parse_args(argv)
    reference, source, baselines = load_reference(opts.reference, opts.total_timesteps)
    root = opts.from_runs or opts.run_dir
    if not opts.from_runs:
        launcher.main(["--algo", *opts.algo, "--env", *[f"torch:smax_{m}" for m in opts.maps], "--seeds",
                       str(opts.seeds), "--presets", "--workers", str(opts.workers), "--run-dir", root, "--",
                       "--total-timesteps", str(opts.total_timesteps), "--eval-every", str(opts.eval_every),
                       *shlex.split(opts.flags)])
    records = read_runs(root, opts.algo, opts.maps) if os.path.isdir(root) else []
    here = {(r["label"], r["map"], r["seed"]) for r in records}
    records += [r for path in opts.with_json for r in stored_runs(path, opts.algo, opts.maps)
                if (r["label"], r["map"], r["seed"]) not in here]
    if not records:
        raise SystemExit(f"error: no SMAX run ({', '.join(p + '<map>' for p in SMAX_PREFIXES)}) under {root}")
    if opts.versus and opts.versus not in {r["label"] for r in records}:
        raise SystemExit(f"error: --versus {opts.versus}: no run has that label; the runs' labels are "
                         f"{sorted({r['label'] for r in records})} (a stored label joins with --with-json and --algo)")
    if source:
        print(f"reference: {source}")
    rows = report(records, reference, opts.total_timesteps, opts.json, opts.versus)
    if opts.plot:
        plot(records, opts.plot, reference, opts.total_timesteps, baselines=baselines)
    return rows


if __name__ == "__main__":
    main()
