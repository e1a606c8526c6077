"""Reading runs back from their folders, and the statistics over seeds that `run.py` reports.

Everything comes from the files a run writes itself (`args.json`, `summary.json`, the
TensorBoard event files): no web service, no TensorFlow. `summary.json`'s "status" says how a run
ended (`run_status`): finished, interrupted (Ctrl-C or SIGTERM; it resumes from its checkpoint) or
diverged; a run that is still going, or was killed, has no `summary.json` and its evaluation
curve and SPS are read from its event files. So is the curve of a resumed run, whose older
`summary.json` files cover only the part since the resume. Tables leave diverged runs out
(`diverged_note` names them) and show unfinished ones as far as they got (`unfinished_note`).

    records = [read_run(p) for p in find_runs("runs/grid")]
    rows = results_table(latest_per_seed(records), thresholds={"simple_spread": -30.0})
"""
import csv
import json
import os
import struct
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

EVAL_TAG = "eval/episodic_return"
WIN_TAG = "eval/win_rate"  # envs with a winner (SMAX) only
SPS_TAG = "charts/SPS"


# ----------------------------------------------------------------------------- one run
def read_summary(run_path: str) -> Optional[dict]:
    """A run folder's summary.json, or None when it has none (or one cut short by a crash)."""
    try:
        with open(os.path.join(run_path, "summary.json")) as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def status_of(summary: Optional[dict]) -> str:
    """"finished", "interrupted" or "diverged" as a summary says (older summaries, written before
    runs could stop early, have no status: finished); "unfinished" for no summary."""
    return "unfinished" if summary is None else summary.get("status", "finished")


def run_status(run_path: str) -> str:
    """How the run in `run_path` ended (`status_of` its summary.json): "unfinished" means still
    running or killed; "interrupted" and "unfinished" runs resume from their checkpoint.pt."""
    return status_of(read_summary(run_path))


def _number(x) -> float:
    """A summary's number, NaN where it wrote null (a NaN or infinity)."""
    return float("nan") if x is None else float(x)


def find_runs(root: str) -> List[str]:
    """Every run folder (a folder holding `args.json`) under `root`, `root` itself included, sorted."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        if "args.json" in files:
            found.append(folder)
    return sorted(found)


def tfevent_records(path: str) -> Iterable[bytes]:
    """The serialized records of one TensorBoard event file (TFRecord framing: length, CRC of the
    length, data, CRC of the data; the CRCs are not checked). A record cut off by a killed
    process ends the file."""
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, i)
        start = i + 12
        if start + length + 4 > len(data):
            return
        yield data[start:start + length]
        i = start + length + 4


SCALARS_CSV = "scalars.csv"  # every scalar of a run, beside its event files: step, tag, value, wall_time
EVAL_EPISODES = "eval_episodes.jsonl"  # every evaluation's episode returns: {"step": s, "returns": [...]} per line


def eval_episodes(run_path: str) -> List[Tuple[int, List[float]]]:
    """[(env step, every episode's return)] of a run's evaluations, steps ascending; an evaluation
    logged again at a step (a resumed run) replaces the later ones, as in `scalar_history`."""
    points: List[Tuple[int, List[float]]] = []
    path = os.path.join(run_path, EVAL_EPISODES)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    _append(points, int(entry["step"]), entry["returns"])
    return points


def scalar_history(run_path: str, tags: Sequence[str]) -> Dict[str, List[Tuple[int, float]]]:
    """{tag: [(step, value), ...]} from every event file of a run folder, steps ascending; from
    its `scalars.csv` where the folder has no event files (results kept without TensorBoard).

    Event files are read oldest first. A resumed run writes a new file into the same folder and
    logs again from its checkpoint's step; as TensorBoard itself does, a value at a step not
    after the last one seen for that tag drops the older values from that step on, so the steps
    trained twice count once (as the resumed process logged them). The CSV, appended to by the
    resumed process, is read the same way.
    """
    from tensorboard.compat.proto import event_pb2  # protobuf only; no TensorFlow

    files = sorted((f for f in os.listdir(run_path) if f.startswith("events.out.tfevents")), key=_event_file_order)
    history: Dict[str, List[Tuple[int, float]]] = {tag: [] for tag in tags}
    if not files and os.path.exists(os.path.join(run_path, SCALARS_CSV)):
        with open(os.path.join(run_path, SCALARS_CSV), newline="") as f:
            for row in csv.DictReader(f):
                if row["tag"] in history:
                    _append(history[row["tag"]], int(row["step"]), float(row["value"]))
        return history
    needles = [tag.encode() for tag in tags]
    for name in files:
        for raw in tfevent_records(os.path.join(run_path, name)):
            if not any(needle in raw for needle in needles):
                continue
            event = event_pb2.Event.FromString(raw)
            for value in event.summary.value:
                if value.tag not in history:
                    continue
                number = value.simple_value if value.HasField("simple_value") else _tensor_value(value.tensor)
                _append(history[value.tag], int(event.step), float(number))
    return history


def _append(points: list, step: int, value) -> None:
    """Add a point; one at a step not after the last drops the older points from that step on."""
    while points and points[-1][0] >= step:
        points.pop()
    points.append((step, value))


def _event_file_order(name: str) -> tuple:
    """events.out.tfevents.<unix time>.<host>.<pid>.<n>: by time, then by the writer's counter."""
    parts = name.split(".")
    return tuple(int(p) if p.isdigit() else 0 for p in (parts[3:4] or ["0"]) + parts[-1:]) + (name,)


def _tensor_value(tensor) -> float:
    if tensor.float_val:
        return tensor.float_val[0]
    if tensor.double_val:
        return tensor.double_val[0]
    return float(np.frombuffer(tensor.tensor_content, dtype=np.float32)[0])


def read_run(run_path: str) -> dict:
    """One run as a record:

    `path`, `env`, `seed`, `algo`, `label` (the run's `exp_name` or its algorithm: one line per
    label in plots), `args` (args.json), `status` (`run_status`), `finished` (status finished),
    `summary` (or None), `curve` ([(env step, mean greedy evaluation return)], every evaluation the
    run made, resumed parts included), `global_step`, `final_return` (the final evaluation of a
    finished run, else the last evaluation so far; NaN if none), `best_return` (the best point of
    the curve) and `sps` (from summary.json; without one, the last `charts/SPS` logged). On an env
    with a winner, `win_curve`, `final_win_rate` and `best_win_rate` are the same for the
    evaluation's win rate (`eval/win_rate`); elsewhere the curve is empty and both rates NaN.

    An unfinished run's algorithm is taken from its `exp_name` up to the first comma (run.py
    names sweep points `<algo>,<key>=<value>...`) or, without one, from its folder name.
    """
    with open(os.path.join(run_path, "args.json")) as f:
        args = json.load(f)
    summary = read_summary(run_path)
    status = status_of(summary)
    label = args.get("exp_name") or (summary["algo"] if summary else os.path.basename(run_path).split("__")[0])
    algo = summary["algo"] if summary else label.split(",")[0]
    points: Dict[int, float] = {}
    win_points: Dict[int, float] = {}
    sps = _number(summary.get("sps")) if summary else float("nan")
    global_step = summary["global_step"] if summary else 0
    if summary is None or args.get("resume"):  # summary.json's eval_history would miss steps
        history = scalar_history(run_path, (EVAL_TAG, WIN_TAG, SPS_TAG))
        points.update(history[EVAL_TAG])
        win_points.update(history[WIN_TAG])
        if summary is None and history[SPS_TAG]:
            global_step, sps = history[SPS_TAG][-1]
    if summary:  # exact values (float64) for the steps summary.json covers
        points.update({int(s): float(v) for s, v in summary["eval_history"] if v is not None})
        win_points.update({int(s): float(v) for s, v in summary.get("eval_win_history", []) if v is not None})
    curve, win_curve = sorted(points.items()), sorted(win_points.items())
    if status == "finished":
        final, final_win = _number(summary["eval_return_mean"]), _number(summary.get("eval_win_rate"))
    else:
        final = curve[-1][1] if curve else float("nan")
        final_win = win_curve[-1][1] if win_curve else float("nan")
        global_step = max(global_step, curve[-1][0] if curve else 0)
    return {"path": run_path, "env": args["env"], "seed": args["seed"], "algo": algo, "label": label, "args": args,
            "status": status, "finished": status == "finished", "summary": summary, "curve": curve,
            "global_step": int(global_step), "final_return": final,
            "best_return": max((v for _, v in curve), default=float("nan")), "sps": float(sps),
            "win_curve": win_curve, "final_win_rate": final_win,
            "best_win_rate": max((v for _, v in win_curve), default=float("nan"))}


def latest_per_seed(records: Sequence[dict]) -> List[dict]:
    """One record per (env, label, seed): a finished run before an unfinished one, then the one
    that got furthest (several folders for one seed come from launches stopped before their
    first checkpoint)."""
    best: Dict[tuple, dict] = {}
    for r in records:
        key = (r["env"], r["label"], r["seed"])
        rank = (r["finished"], r["global_step"], r["path"])
        if key not in best or rank > (best[key]["finished"], best[key]["global_step"], best[key]["path"]):
            best[key] = r
    return sorted(best.values(), key=lambda r: (r["env"], r["label"], r["seed"]))


def diverged_note(records: Sequence[dict]) -> str:
    """'left out 2 diverged runs: <folders>' for the records (`read_run`) of runs that diverged;
    '' when none did."""
    paths = [r["path"] for r in records if r.get("status") == "diverged"]
    return f"left out {len(paths)} diverged run{'s' * (len(paths) != 1)}: {', '.join(paths)}" if paths else ""


def unfinished_note(records: Sequence[dict]) -> str:
    """How many of the records (`read_run`) are of unfinished runs, which tables and curves show as
    far as they got; '' when every run finished."""
    interrupted = sum(r.get("status") == "interrupted" for r in records)
    other = sum(r.get("status") == "unfinished" for r in records)
    if not interrupted + other:
        return ""
    kinds = [f"{interrupted} interrupted (the run.py command that started them resumes them)"] * bool(interrupted)
    kinds += [f"{other} without summary.json (still running, or killed)"] * bool(other)
    return (f"{interrupted + other} unfinished run{'s' * (interrupted + other != 1)} shown as partial curves and "
            f"marked unfinished in the table, their final return the last evaluation so far: {'; '.join(kinds)}")


# ----------------------------------------------------------------------------- statistics over seeds
def iqm(x: Sequence[float]) -> float:
    """Interquartile mean: the mean of the middle half of the values, after cutting
    floor(n / 4) from each end (as scipy.stats.trim_mean(x, 0.25) and rliable do); the plain
    mean for fewer than 4 values."""
    x = np.sort(np.asarray(x, dtype=float))
    cut = int(0.25 * len(x))
    return float(x[cut:len(x) - cut].mean()) if len(x) else float("nan")


def bootstrap_ci(x: Sequence[float], level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean over seeds (resampling seeds with
    replacement, `n_boot` times, with a fixed generator so tables are reproducible). One value
    gives a zero-width interval; none gives NaNs."""
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    means = x[np.random.default_rng(seed).integers(0, len(x), (n_boot, len(x)))].mean(1)  # (n_boot,)
    alpha = (1.0 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha))


def curves_on_grid(curves: Sequence[Sequence[Tuple[int, float]]]) -> Tuple[np.ndarray, np.ndarray]:
    """Put seeds' curves on one step axis: the union of their evaluation steps, each curve
    linearly interpolated between its own points and NaN outside its first and last ones (so
    runs of different lengths, or evaluated at other steps, can be averaged where they overlap).
    Returns steps (P,) and values (S, P)."""
    steps = np.array(sorted({s for c in curves for s, _ in c}), dtype=float)  # (P,)
    values = np.full((len(curves), len(steps)), np.nan)  # (S, P)
    for i, curve in enumerate(curves):
        if not curve:
            continue
        xs, ys = np.array([s for s, _ in curve], dtype=float), np.array([v for _, v in curve])
        inside = (steps >= xs[0]) & (steps <= xs[-1])
        values[i, inside] = np.interp(steps[inside], xs, ys)
    return steps, values


def seed_count(n: int) -> str:
    """"1 seed", "3 seeds": how many seeds a plotted curve averages, for its legend."""
    return f"{n} seed{'s' * (n != 1)}"


def mean_and_band(values: np.ndarray, level: float = 0.95, n_boot: int = 1000) -> Tuple[np.ndarray, ...]:
    """Per column of (S, P) values (NaN where a seed has no value): mean over the seeds present,
    the bootstrap interval of that mean, and how many seeds are present."""
    count = (~np.isnan(values)).sum(0)  # (P,)
    mean, low, high = (np.full(values.shape[1], np.nan) for _ in range(3))
    for p in np.flatnonzero(count):
        column = values[~np.isnan(values[:, p]), p]
        mean[p] = column.mean()
        low[p], high[p] = bootstrap_ci(column, level, n_boot, seed=p)
    return mean, low, high, count


def steps_to_threshold(curve: Sequence[Tuple[int, float]], threshold: float) -> Optional[int]:
    """The first evaluation step at which the return reached `threshold` (None if never)."""
    return next((s for s, v in curve if v >= threshold), None)


# ----------------------------------------------------------------------------- tables
TABLE_COLUMNS = ("env", "algo", "seeds", "unfinished", "env_steps_min", "env_steps_max", "final_mean", "final_iqm",
                 "final_ci_low", "final_ci_high", "best_mean", "best_iqm", "best_ci_low", "best_ci_high", "threshold",
                 "steps_to_threshold", "reached", "sps")
WIN_COLUMNS = ("final_win_rate", "best_win_rate")  # in the tables only when some run's env has a winner


def has_win_rates(rows: Sequence[dict]) -> bool:
    """Whether any row of `results_table` has a win rate (its runs' env has a winner: SMAX)."""
    return any(np.isfinite(row.get(column, np.nan)) for row in rows for column in WIN_COLUMNS)


def table_columns(rows: Sequence[dict]) -> Tuple[str, ...]:
    """The CSV columns of `results_table`'s rows: `TABLE_COLUMNS`, and the win rates when there are any."""
    return TABLE_COLUMNS + WIN_COLUMNS if has_win_rates(rows) else TABLE_COLUMNS


def results_table(records: Sequence[dict], thresholds: Optional[Dict[str, float]] = None) -> List[dict]:
    """One row per (env, label) over its seeds' records (see `read_run`; pass one record per seed),
    leaving out the runs that diverged (`diverged_note` says which):

    `final_*` is the final evaluation of each seed (the last so far for an unfinished run),
    `best_*` the best point of each seed's curve; for both, the mean over seeds, the IQM and a
    95% bootstrap CI of the mean. `steps_to_threshold` is the mean over the seeds that reached
    `thresholds[env]` of the first evaluation step at or above it; `reached` says how many did
    ("k/n"). `sps` is the mean over seeds. `final_win_rate` and `best_win_rate` are the means over
    the seeds that have one (envs with a winner) of the final and the best evaluation win rate;
    NaN for other envs."""
    thresholds = thresholds or {}
    groups: Dict[tuple, List[dict]] = {}
    for r in (r for r in records if r.get("status") != "diverged"):
        groups.setdefault((r["env"], r["label"]), []).append(r)
    rows = []
    for (env, label), runs in groups.items():
        final = [r["final_return"] for r in runs if np.isfinite(r["final_return"])]
        best = [r["best_return"] for r in runs if np.isfinite(r["best_return"])]
        threshold = thresholds.get(env)
        reach = [steps_to_threshold(r["curve"], threshold) for r in runs] if threshold is not None else []
        reached = [s for s in reach if s is not None]
        sps = [r["sps"] for r in runs if np.isfinite(r["sps"])]
        final_win, best_win = ([r[key] for r in runs if np.isfinite(r.get(key, np.nan))]
                               for key in ("final_win_rate", "best_win_rate"))
        rows.append({
            "env": env, "algo": label, "seeds": len(runs), "unfinished": sum(not r["finished"] for r in runs),
            "env_steps_min": min(r["global_step"] for r in runs), "env_steps_max": max(r["global_step"] for r in runs),
            "final_mean": float(np.mean(final)) if final else float("nan"), "final_iqm": iqm(final),
            **dict(zip(("final_ci_low", "final_ci_high"), bootstrap_ci(final))),
            "best_mean": float(np.mean(best)) if best else float("nan"), "best_iqm": iqm(best),
            **dict(zip(("best_ci_low", "best_ci_high"), bootstrap_ci(best))),
            "threshold": threshold, "steps_to_threshold": float(np.mean(reached)) if reached else None,
            "reached": f"{len(reached)}/{len(runs)}" if threshold is not None else "",
            "sps": float(np.mean(sps)) if sps else float("nan"),
            "final_win_rate": float(np.mean(final_win)) if final_win else float("nan"),
            "best_win_rate": float(np.mean(best_win)) if best_win else float("nan")})
    return sorted(rows, key=lambda row: (row["env"], row["algo"]))


def write_csv(rows: Sequence[dict], path: str, columns: Sequence[str] = TABLE_COLUMNS) -> None:
    """The rows under a header of `columns` (None written as an empty field)."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows({k: ("" if row[k] is None else row[k]) for k in columns} for row in rows)


def markdown_table(rows: Sequence[dict]) -> str:
    """The rows as a Markdown table (returns rounded to 2 decimals), with the mean final and best
    win rates after the returns when some rows have them."""
    wins = has_win_rates(rows)
    win_header = "final: win rate | best: win rate | " if wins else ""
    lines = ["| env | algo | seeds | env steps | final: mean | final: IQM | final: 95% CI | best: mean | best: IQM "
             "| best: 95% CI | " + win_header + "steps to threshold (reached) | SPS |", "|" + "---|" * (12 + 2 * wins)]
    for r in rows:
        steps = f"{r['env_steps_min']:,d}" + (f"-{r['env_steps_max']:,d}" if r["env_steps_max"] != r["env_steps_min"]
                                               else "")
        if r["unfinished"]:
            steps += f" ({r['unfinished']} unfinished)"
        if r["threshold"] is None:
            reach = "-"
        elif r["steps_to_threshold"] is None:
            reach = f">= {r['threshold']:g}: never ({r['reached']})"
        else:
            reach = f">= {r['threshold']:g}: {r['steps_to_threshold']:,.0f} ({r['reached']})"
        win_rates = "".join(f"{r[k]:.2f} | " if np.isfinite(r[k]) else "- | " for k in WIN_COLUMNS) if wins else ""
        lines.append(f"| {r['env']} | {r['algo']} | {r['seeds']} | {steps} | {r['final_mean']:.2f} | "
                     f"{r['final_iqm']:.2f} | [{r['final_ci_low']:.2f}, {r['final_ci_high']:.2f}] | "
                     f"{r['best_mean']:.2f} | {r['best_iqm']:.2f} | "
                     f"[{r['best_ci_low']:.2f}, {r['best_ci_high']:.2f}] | {win_rates}{reach} | {r['sps']:,.0f} |")
    return "\n".join(lines) + "\n"


def write_tables(rows: Sequence[dict], folder: str, name: str = "results") -> Tuple[str, str]:
    """Write `<folder>/<name>.md` and `<folder>/<name>.csv`; return both paths."""
    os.makedirs(folder, exist_ok=True)
    md, csv_path = os.path.join(folder, f"{name}.md"), os.path.join(folder, f"{name}.csv")
    wins = (" Win rate (envs with a winner): of the final and the best evaluation, mean over seeds."
            if has_win_rates(rows) else "")
    with open(md, "w") as f:
        f.write("Greedy evaluation return over seeds: final and best evaluation of each seed; mean, interquartile "
                "mean and 95% bootstrap confidence interval of the mean." + wins + "\n\n" + markdown_table(rows))
    write_csv(rows, csv_path, table_columns(rows))
    return md, csv_path


# ----------------------------------------------------------------------------- comparing labels over envs
# Performance profiles and the probability of improvement, as defined by rliable (Agarwal et al. 2021, "Deep RL at
# the edge of the statistical precipice") and used by marl-eval (Gorsane et al. 2022). Scores are nested dicts
# {label: {env: (S,) one score per seed}}: the seeds of one (label, env) form one stratum of the bootstrap.
Scores = Dict[str, Dict[str, np.ndarray]]
Bounds = Dict[str, Tuple[float, float]]  # {env: (low, high)} that normalise to 0 and 1


def final_scores(records: Sequence[dict]) -> Scores:
    """{label: {env: (S,) final greedy evaluation returns}} of the records (`read_run`), one per seed;
    diverged runs and runs without an evaluation are left out."""
    scores: Dict[str, Dict[str, list]] = {}
    for r in records:
        if r.get("status") != "diverged" and np.isfinite(r["final_return"]):
            scores.setdefault(r["label"], {}).setdefault(r["env"], []).append(r["final_return"])
    return {label: {env: np.array(x, dtype=float) for env, x in envs.items()} for label, envs in scores.items()}


def score_bounds(scores: Scores, given: Optional[Bounds] = None) -> Bounds:
    """{env: (low, high)} for normalising: `given[env]` (e.g. a random and an expert policy's returns) where
    there is one, else the lowest and highest score of every run of that env, every label's (min-max, as
    marl-eval does)."""
    given = given or {}
    envs = sorted({env for per_env in scores.values() for env in per_env})
    bounds = {}
    for env in envs:
        every = np.concatenate([per_env[env] for per_env in scores.values() if env in per_env])  # (all seeds,)
        bounds[env] = given.get(env, (float(every.min()), float(every.max())))
    return bounds


def normalize(scores: Scores, bounds: Bounds) -> Scores:
    """(score - low) / (high - low) per env: 0 at `low`, 1 at `high`. An env where low == high (every run
    scored the same) maps to 0."""
    span = {env: (high - low) or 1.0 for env, (low, high) in bounds.items()}
    return {label: {env: (x - bounds[env][0]) / span[env] for env, x in per_env.items()}
            for label, per_env in scores.items()}


def performance_profile(per_env: Dict[str, np.ndarray], taus: np.ndarray) -> np.ndarray:
    """The score distribution of one label: for each threshold tau (K,), the fraction of runs that score
    above tau, each env weighted equally (the mean over envs of the fraction of that env's seeds). (K,)"""
    return np.mean([(x[:, None] > taus[None, :]).mean(0) for x in per_env.values()], axis=0)  # (K,)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) on one env from the seeds' scores x (Sx,) and y (Sy,): the Mann-Whitney U statistic over
    Sx * Sy, the fraction of pairs (x_i, y_j) with x_i > y_j, a tie counting one half."""
    greater = x[:, None] > y[None, :]  # (Sx, Sy)
    ties = x[:, None] == y[None, :]  # (Sx, Sy)
    return float((greater.sum() + 0.5 * ties.sum()) / greater.size)


def mean_probability_of_improvement(x: Dict[str, np.ndarray], y: Dict[str, np.ndarray]) -> float:
    """P(X > Y) averaged over the envs that both labels ran ({env: (S,)} each); NaN if none."""
    shared = sorted(set(x) & set(y))
    return float(np.mean([probability_of_improvement(x[env], y[env]) for env in shared])) if shared else float("nan")


def stratified_resample(scores: Scores, rng: np.random.Generator) -> Scores:
    """One bootstrap sample: each (label, env)'s seeds drawn with replacement, as many as it has."""
    return {label: {env: x[rng.integers(0, len(x), len(x))] for env, x in per_env.items()}
            for label, per_env in scores.items()}


def stratified_bootstrap_ci(statistic: Callable[[Scores], np.ndarray], scores: Scores, level: float = 0.95,
                            n_boot: int = 2000, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Percentile interval of `statistic(scores)` (an array of any shape) over `n_boot` stratified
    resamples (`stratified_resample`, fixed generator so plots are reproducible): (low, high), each of
    the statistic's shape. A stratum with one seed does not vary, so with one seed everywhere the
    interval has zero width."""
    rng = np.random.default_rng(seed)
    samples = np.stack([statistic(stratified_resample(scores, rng)) for _ in range(n_boot)])  # (n_boot, ...)
    alpha = (1.0 - level) / 2
    return np.quantile(samples, alpha, axis=0), np.quantile(samples, 1.0 - alpha, axis=0)


def profile_thresholds(scores: Scores, k: int = 201) -> np.ndarray:
    """K thresholds evenly over [0, 1] for normalised scores, widened to the lowest and highest score where
    given bounds leave some outside. (K,)"""
    every = np.concatenate([x for per_env in scores.values() for x in per_env.values()])  # (all runs,)
    return np.linspace(min(0.0, every.min()), max(1.0, every.max()), k)


def performance_profiles(scores: Scores, taus: np.ndarray, n_boot: int = 2000) -> Dict[str, Tuple[np.ndarray, ...]]:
    """{label: (profile, ci_low, ci_high)}, each (K,) over the thresholds `taus` (K,), with a 95% stratified
    bootstrap interval; `scores` normalised."""
    labels = sorted(scores)

    def statistic(sample: Scores) -> np.ndarray:  # (L, K)
        return np.stack([performance_profile(sample[label], taus) for label in labels])

    low, high = stratified_bootstrap_ci(statistic, scores, n_boot=n_boot)  # (L, K) each
    point = statistic(scores)  # (L, K)
    return {label: (point[i], low[i], high[i]) for i, label in enumerate(labels)}


IMPROVEMENT_COLUMNS = ("x", "y", "envs", "p_improvement", "ci_low", "ci_high")


def improvement_table(scores: Scores, n_boot: int = 2000) -> List[dict]:
    """One row per ordered pair of labels (X, Y) that ran a common env: P(X > Y) averaged over their
    shared envs, with a 95% stratified bootstrap interval; `envs` names the shared envs."""
    pairs = [(x, y) for x in sorted(scores) for y in sorted(scores) if x != y and set(scores[x]) & set(scores[y])]
    if not pairs:
        return []

    def statistic(sample: Scores) -> np.ndarray:  # (pairs,)
        return np.array([mean_probability_of_improvement(sample[x], sample[y]) for x, y in pairs])

    low, high = stratified_bootstrap_ci(statistic, scores, n_boot=n_boot)  # (pairs,) each
    return [{"x": x, "y": y, "envs": " ".join(sorted(set(scores[x]) & set(scores[y]))), "p_improvement": float(p),
             "ci_low": float(lo), "ci_high": float(hi)}
            for (x, y), p, lo, hi in zip(pairs, statistic(scores), low, high)]


def write_improvement_tables(rows: Sequence[dict], folder: str, note: str = "") -> Tuple[str, str]:
    """Write `<folder>/improvement.md` (`note` above the table) and `<folder>/improvement.csv`; return both."""
    md, csv_path = os.path.join(folder, "improvement.md"), os.path.join(folder, "improvement.csv")
    with open(md, "w") as f:
        f.write((note + "\n\n" if note else "") + improvement_markdown(rows))
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=IMPROVEMENT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return md, csv_path


def improvement_markdown(rows: Sequence[dict]) -> str:
    """The rows of `improvement_table` as a Markdown table (3 decimals)."""
    lines = ["| X | Y | envs | P(X > Y) | 95% CI |", "|" + "---|" * 5]
    lines += [f"| {r['x']} | {r['y']} | {r['envs']} | {r['p_improvement']:.3f} | "
              f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |" for r in rows]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- marl-eval's layout
def env_task(env: str) -> Tuple[str, str]:
    """An env name as marl-eval's (environment, task): "torch:simple_spread" -> ("torch", "simple_spread"),
    "lbf:Foraging-8x8-2p-3f-v3" -> ("lbf", ...), a bare mpe2 name -> ("mpe2", name)."""
    family, sep, task = env.partition(":")
    return (family, task) if sep else ("mpe2" if env.startswith("simple") else env, env)


def marl_eval_layout(records: Sequence[dict]) -> Dict[str, Any]:
    """Runs (`read_run` records) in the JSON layout marl-eval reads (Gorsane et al. 2022; BenchMARL
    and Mava write it): environment -> task -> algorithm (the run's label) -> run_<seed> ->
    step_<k>: {"step_count": env steps, "return": [every evaluation episode's return]}, and
    "absolute_metrics": {"return": the final evaluation's episodes}. Returns are R_pz3 (summed
    over agents). A run made before `eval_episodes.jsonl` existed gives each evaluation's mean."""
    out: Dict[str, Any] = {}
    for r in records:
        environment, task = env_task(r["env"])
        points = eval_episodes(r["path"]) or [(step, [value]) for step, value in r["curve"]]
        run = {f"step_{k}": {"step_count": int(step), "return": [float(v) for v in returns]}
               for k, (step, returns) in enumerate(points)}
        if points:
            run["absolute_metrics"] = {"return": [float(v) for v in points[-1][1]]}
        out.setdefault(environment, {}).setdefault(task, {}).setdefault(r["label"], {})[f"run_{r['seed']}"] = run
    return out
