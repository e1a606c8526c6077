"""Launch grids of runs (algorithms x envs x seeds x sweep points), then plot and evaluate them.
No algorithm logic lives here: every run is `algos.<algo>.main(args)`.

    python run.py --algo mappo ippo --env simple_spread --seeds 3 -- --total-timesteps 2000000
    python run.py --algo mappo qmix --env simple_spread torch:simple_spread --seeds 5 --presets --run-dir runs/grid
    python run.py --algo mappo --env torch:simple_spread --seeds 3 --sweep learning_rate=0.001,0.002
    python run.py plot runs/grid --threshold simple_spread=-30
    python run.py evaluate runs/grid/simple_spread/mappo/mappo__simple_spread__1__1700000000 --video spread.gif

Launching (the default command): every --algo x --env x seed 1..SEEDS x sweep point is one run.
Everything after `--` goes to every run as algorithm flags; --env, --seed and --run-dir are set
per run. Each run's Args: defaults < preset (--presets, or --config after `--`) < the flags after
`--` < the sweep point; they are checked for every run before any starts, and saved in its
args.json. Runs go to RUN_DIR/<env>/<label>/<label>__<env>__<seed>__<time>/, where the label is
the algorithm (or --exp-name) followed by the sweep point, as in `mappo,learning_rate=0.001`.
Launching the same command again skips the runs that finished (summary.json) and resumes the
interrupted ones from their checkpoint.pt. The runs go through a pool of --workers processes
(in this process with one worker or one run), or through Ray with --backend ray. A progress line
shows runs done and an ETA; at the end a results table (final and best greedy evaluation return
over seeds) is printed and written to RUN_DIR/results.md, results.csv and results.json.

`run.py plot RUNS...` draws every env's learning curves and writes the same table for every
run found under RUNS; `run.py evaluate RUN...` plays greedy episodes with a run's checkpoint
and can save one as a GIF or MP4. `python run.py plot --help` and `python run.py evaluate
--help` list their options. docs/how-to.md describes it all.
"""
import argparse
import dataclasses
import glob
import importlib
import itertools
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from common.cli import ConfigError, parse_args
from common.results import (curves_on_grid, find_runs, latest_per_seed, markdown_table, mean_and_band, read_run,
                            results_table, write_tables)
from common.run_utils import args_dict, write_json_atomic
from envs import env_arguments, known_envs, parse_env_kwargs

REPO = os.path.dirname(os.path.abspath(__file__))
ALGOS = tuple(sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "algos", "*.py"))
                     if not p.endswith("__init__.py")))  # every algorithm file
PER_RUN_FLAGS = ("--env", "--seed", "--run-dir", "--resume", "--evaluate-checkpoint", "--render-gif")
NOT_SWEPT = ("env", "seed", "run_dir", "exp_name", "resume", "evaluate_checkpoint", "render_gif", "config")
# Settings that may differ between a saved run and a re-launch that skips or resumes it.
NOT_COMPARED = ("resume", "run_dir", "config", "cuda", "torch_threads", "evaluate_checkpoint", "render_gif")


# ============================================================================ the grid
@dataclasses.dataclass
class Job:
    """One run of the grid."""
    algo: str
    env: str
    seed: int
    label: str  # exp_name or algo, then the sweep point: the run's line in tables and plots
    parent: str  # <run-dir>/<env>/<label>: the run folder is made in here
    argv: List[str]  # the run's command line (without --resume)
    resolved: Dict[str, Any]  # its Args, as args.json will hold them
    status: str = "new"  # new, resume (an interrupted run's folder) or done (a finished one's)
    path: Optional[str] = None  # the existing run folder (resume, done)


def sweep_points(specs: Sequence[str], path: Optional[str]) -> List[Dict[str, Any]]:
    """Every combination of the swept values ([{}] without a sweep). `specs` are KEY=V1,V2,...;
    the YAML file maps keys to lists of values (a tuple value is a list inside the list). A key
    given both ways takes the command line's values."""
    axes: Dict[str, list] = {}
    if path:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"sweep file {path!r} must map Args fields to lists of values")
        for key, values in data.items():
            axes[str(key).replace("-", "_")] = values if isinstance(values, list) else [values]
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise ConfigError(f"--sweep {spec!r}: write KEY=VALUE1,VALUE2,... (e.g. learning_rate=0.001,0.002)")
        axes[key.replace("-", "_")] = values.split(",")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def point_flags(args_cls, point: Dict[str, Any]) -> List[str]:
    """A sweep point as command-line flags for `args_cls` (tyro then checks the values' types)."""
    fields = {f.name: f for f in dataclasses.fields(args_cls)}
    tokens = []
    for key, value in point.items():
        if key not in fields:
            raise ConfigError(f"cannot sweep {key!r}: {args_cls.__module__}.Args has no such field; "
                              f"accepted: {', '.join(k for k in fields if k not in NOT_SWEPT)}")
        if key in NOT_SWEPT:
            raise ConfigError(f"cannot sweep {key!r}: run.py sets it (use --env, --seeds, --run-dir, --presets)")
        flag, default = "--" + key.replace("_", "-"), fields[key].default
        if isinstance(default, bool):
            word = str(value).lower()
            if word not in ("true", "false", "1", "0", "yes", "no"):
                raise ConfigError(f"--sweep {key}: {value!r} is not a boolean (true or false)")
            tokens.append(flag if word in ("true", "1", "yes") else "--no-" + key.replace("_", "-"))
        elif isinstance(default, tuple):
            tokens += [flag, *(str(v) for v in (value if isinstance(value, (list, tuple)) else str(value).split()))]
        else:
            tokens += [flag, str(value)]
    return tokens


def point_label(base: str, point: Dict[str, Any]) -> str:
    """`base`, then `,key=value` for every swept key (tuple values joined with '-')."""
    def text(v):
        if isinstance(v, (list, tuple)):
            return "-".join(map(text, v))
        return str(v).lower() if isinstance(v, bool) else "-".join(str(v).split())
    return ",".join([base] + [f"{k}={text(v)}" for k, v in point.items()]).replace(os.sep, "_")


def preset_for(algo: str, env: str) -> Optional[str]:
    """configs/<algo>/<env>.yaml: the env name with ':' written '_' (a preset for one family's
    version, e.g. torch_simple_spread.yaml), else the name after the family prefix
    (torch:simple_spread falls back to simple_spread.yaml); None when neither exists."""
    for name in (env.replace(":", "_"), env.split(":")[-1]):
        path = os.path.join(REPO, "configs", algo, f"{name}.yaml")
        if os.path.isfile(path):
            return path
    return None


def existing_run(parent: str, label: str, env: str, seed: int) -> Optional[str]:
    """The folder an earlier launch made for this run: a finished one (summary.json), else the
    interrupted one with the latest checkpoint; None if there is neither."""
    prefix = f"{label}__{env}__{seed}__"
    folders = [os.path.join(parent, d) for d in (os.listdir(parent) if os.path.isdir(parent) else [])
               if d.startswith(prefix) and os.path.isdir(os.path.join(parent, d))]
    for marker in ("summary.json", "checkpoint.pt"):
        found = [f for f in folders if os.path.isfile(os.path.join(f, marker))]
        if found:
            return max(found, key=lambda f: os.path.getmtime(os.path.join(f, marker)))
    return None


def changed_settings(run_path: str, resolved: Dict[str, Any]) -> Dict[str, Tuple[Any, Any]]:
    """{field: (saved, now)} for the Args a saved run was made with that this launch sets otherwise."""
    with open(os.path.join(run_path, "args.json")) as f:
        saved = json.load(f)
    return {k: (saved[k], v) for k, v in resolved.items() if k in saved and k not in NOT_COMPARED and saved[k] != v}


def make_job(module, algo: str, env: str, seed: int, point: Dict[str, Any], flags: List[str], run_dir: str) -> Job:
    """One run: its command line and its Args, parsed and checked now (so a bad preset, flag or
    sweep value stops the launch before any run starts), and what an earlier launch left of it."""
    argv = [*flags, "--env", env, "--seed", str(seed)]
    args = parse_args(module.Args, argv + ["--run-dir", run_dir])
    label = point_label(args.exp_name or algo, point)
    if label != (args.exp_name or algo):
        argv += ["--exp-name", label]
    parent = os.path.join(run_dir, env, label)
    args = dataclasses.replace(args, exp_name=args.exp_name if label == algo else label, run_dir=parent)
    if hasattr(module, "validate"):
        module.validate(args)
    try:
        accepted = env_arguments(env)
        unknown = sorted(set(parse_env_kwargs(args.env_kwargs)) - set(accepted))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if unknown:
        raise ConfigError(f"env {env!r} takes no argument(s) {unknown}; accepted: {', '.join(accepted)}")
    job = Job(algo, env, seed, label, parent, argv + ["--run-dir", parent], args_dict(args))
    job.path = existing_run(parent, label, env, seed)
    return job


def plan(opts, extra: List[str], run_dir: str) -> List[Job]:
    """Every run of the grid and what to do with it: start it (new), resume its folder, or skip
    it (done); see check_saved."""
    points = sweep_points(opts.sweep, opts.sweep_file)
    jobs = []
    for env in opts.env:
        try:
            env_arguments(env)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        for algo, point in itertools.product(opts.algo, points):
            module = importlib.import_module(f"algos.{algo}")
            preset = preset_for(algo, env) if opts.presets else None
            flags = [*(["--config", preset] if preset else []), *extra, *point_flags(module.Args, point)]
            jobs += [make_job(module, algo, env, seed, point, flags, run_dir) for seed in range(1, opts.seeds + 1)]
    return check_saved(jobs)


def check_saved(jobs: List[Job]) -> List[Job]:
    """Mark each job whose folder an earlier launch made: done (finished, same settings) or resume.
    A saved run whose args.json differs from what this launch asks for is an error, except a
    larger --total-timesteps, which resumes it to train longer."""
    conflicts = []
    for job in (j for j in jobs if j.path):
        changed = changed_settings(job.path, job.resolved)
        finished = os.path.isfile(os.path.join(job.path, "summary.json"))
        steps = changed.get("total_timesteps")
        if changed and not (set(changed) == {"total_timesteps"} and (not finished or steps[1] > steps[0])):
            conflicts.append(f"{job.path}: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
        job.status = "done" if finished and not changed else "resume"
    if conflicts:
        raise ConfigError("these runs were made with other settings than this launch asks for:\n  "
                          + "\n  ".join(conflicts) + "\nuse another --run-dir (or --exp-name after `--`) for "
                          "the new settings, or delete those folders to redo them")
    return jobs


# ============================================================================ running
def finished_and_tasks(jobs: List[Job]) -> Tuple[Dict[int, dict], List[Tuple[int, str, List[str]]]]:
    """The summaries of the finished jobs by index, and the (index, algo, argv) tasks of the
    others (an interrupted one resumes from its folder)."""
    summaries = {}
    for i, job in enumerate(jobs):
        if job.status == "done":
            with open(os.path.join(job.path, "summary.json")) as f:
                summaries[i] = json.load(f)
    tasks = [(i, j.algo, j.argv + (["--resume", j.path] if j.status == "resume" else []))
             for i, j in enumerate(jobs) if j.status != "done"]
    return summaries, tasks


def run_job(algo: str, argv: Sequence[str]) -> dict:
    """One run in whatever process executes it: its Args from `argv`, then `main`; its summary."""
    module = importlib.import_module(f"algos.{algo}")
    return module.main(parse_args(module.Args, list(argv)))


def run_task(task: Tuple[int, str, List[str]]) -> Tuple[int, Optional[dict], Optional[str]]:
    """(index, summary, None), or (index, None, traceback) for a run that raised: one failed run
    does not stop the others."""
    index, algo, argv = task
    try:
        return index, run_job(algo, argv), None
    except Exception:
        return index, None, traceback.format_exc()


def run_local(tasks, workers: int, on_result: Callable) -> None:
    """In a pool of `workers` processes (spawned: each imports torch afresh), or in this process."""
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            on_result(*run_task(task))
        return
    with mp.get_context("spawn").Pool(min(workers, len(tasks))) as pool:
        for result in pool.imap_unordered(run_task, tasks):
            on_result(*result)


def run_ray(tasks, address: Optional[str], workers: int, cpus_per_run: float, gpus_per_run: float,
            on_result: Callable) -> None:
    """As Ray tasks: on a local Ray instance of `workers` CPUs, or on the cluster at `address`
    (the code is shipped as the job's working_dir; run folders must be on a filesystem every node
    shares with this one). An already initialised Ray is used as it is."""
    try:
        import ray
    except ImportError:
        raise SystemExit("error: --backend ray needs Ray: pip install 'ray>=2.9' (the default --backend local "
                         "needs nothing more)") from None
    started = not ray.is_initialized()
    if started and address:
        ray.init(address=address, runtime_env={"working_dir": REPO, "excludes": [
            ".git", "runs", "*.pt", "*.egg-info", "__pycache__", ".venv"]})
    elif started:
        ray.init(num_cpus=workers, include_dashboard=False)
    # By module name, so that workers import it rather than unpickle this script's __main__.
    remote = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0)(
        importlib.import_module("run").run_task)
    pending = [remote.remote(task) for task in tasks]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            on_result(*ray.get(done[0]))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


class GridProgress:
    """One line per finished run: a bar of runs done out of the grid, elapsed time and an ETA
    (time per run so far, times the runs left; runs skipped as finished count as done)."""

    def __init__(self, total: int, skipped: int):
        self.total, self.done, self.skipped, self.failed, self.start = total, skipped, skipped, 0, time.time()

    def update(self, ok: bool) -> None:
        self.done += ok
        self.failed += not ok
        self.show()

    def show(self) -> None:
        ran, left = self.done - self.skipped + self.failed, self.total - self.done - self.failed
        elapsed = time.time() - self.start
        eta = _clock(elapsed / ran * left) if ran else "?"
        filled = int(30 * (self.done + self.failed) / max(self.total, 1))
        print(f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} runs done ({self.skipped} skipped"
              f"{f', {self.failed} failed' if self.failed else ''}) | elapsed {_clock(elapsed)} | ETA {eta}",
              flush=True)


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else f"{seconds / 86400:.1f} days"


def parse_thresholds(specs: Sequence[str]) -> Callable[[Sequence[str]], Dict[str, float]]:
    """--threshold VALUE (every env) and ENV=VALUE (one env) -> a function of the envs present."""
    every, per_env = None, {}
    for spec in specs:
        env, sep, value = spec.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"--threshold {spec!r}: write VALUE or ENV=VALUE (e.g. simple_spread=-30)") from None
        if sep:
            per_env[env] = number
        else:
            every = number
    return lambda envs: {env: per_env.get(env, every) for env in envs if per_env.get(env, every) is not None}


def launch(argv: List[str]) -> List[dict]:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["mappo"], choices=ALGOS, metavar="ALGO",
                        help=f"algorithm files to run: {', '.join(ALGOS)}")
    parser.add_argument("--env", nargs="+", default=["simple_spread"],
                        help=f"env names; known: {', '.join(known_envs())}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS per (algo, env, sweep point)")
    parser.add_argument("--run-dir", default="runs", help="runs go to RUN_DIR/<env>/<label>/")
    parser.add_argument("--presets", action="store_true",
                        help="start each run from configs/<algo>/<env>.yaml where it exists (torch:simple_spread "
                             "uses simple_spread.yaml)")
    parser.add_argument("--sweep", nargs="+", default=[], metavar="KEY=V1,V2",
                        help="sweep these Args fields: every combination of the values is one grid point")
    parser.add_argument("--sweep-file", default=None, help="YAML file mapping Args fields to lists of values to sweep")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: a process pool on this machine; ray: Ray tasks (pip install ray)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count() or 1, help="runs at a time (processes; with --backend ray and no "
                        "--address, the CPUs of the local Ray instance); default: the CPU cores this process may use")
    parser.add_argument("--address", default=None,
                        help="with --backend ray: the cluster to join (e.g. auto, or ray://HEAD:10001); none starts "
                             "a local Ray instance")
    parser.add_argument("--cpus-per-run", type=float, default=1.0, help="with --backend ray: CPUs Ray reserves per run")
    parser.add_argument("--gpus-per-run", type=float, default=0.0, help="with --backend ray: GPUs Ray reserves per run")
    parser.add_argument("--threshold", nargs="+", default=[], metavar="[ENV=]VALUE",
                        help="return that the table's 'steps to threshold' column looks for")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and what would happen to each; run none")
    opts = parser.parse_args(own)
    for flag in PER_RUN_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in extra):
            parser.error(f"{flag} is set by the launcher per run; give --env, --seeds and --run-dir before '--' "
                         f"(runs resume by themselves when the same command is launched again)")
    if opts.presets and any(a == "--config" or a.startswith("--config=") for a in extra):
        parser.error("give either --presets or --config after '--', not both")
    if opts.seeds < 1:
        parser.error("--seeds must be at least 1")
    run_dir = os.path.abspath(opts.run_dir) if opts.backend == "ray" and opts.address else opts.run_dir
    try:
        jobs = plan(opts, extra, run_dir)
        thresholds = parse_thresholds(opts.threshold)(opts.env)
    except (ConfigError, OSError) as err:
        raise SystemExit(f"error: {err}") from None
    counts = {s: sum(j.status == s for j in jobs) for s in ("new", "resume", "done")}
    print(f"{len(jobs)} runs: {counts['new']} new, {counts['resume']} to resume, {counts['done']} finished (skipped); "
          f"in {run_dir}", flush=True)
    if opts.dry_run:
        for j in jobs:
            print(f"  {j.status:<6} {j.env} {j.label} seed {j.seed}" + (f"  ({j.path})" if j.path else ""))
        return []

    summaries, tasks = finished_and_tasks(jobs)
    failures: Dict[int, str] = {}
    progress = GridProgress(len(jobs), counts["done"])
    progress.show()

    def on_result(index: int, summary: Optional[dict], error: Optional[str]) -> None:
        if summary is not None:
            summaries[index] = summary
        else:
            failures[index] = error
            print(f"run failed: {jobs[index].env} {jobs[index].label} seed {jobs[index].seed}\n{error}", flush=True)
        progress.update(summary is not None)

    try:
        if opts.backend == "ray":
            run_ray(tasks, opts.address, opts.workers, opts.cpus_per_run, opts.gpus_per_run, on_result)
        else:
            run_local(tasks, opts.workers, on_result)
    except KeyboardInterrupt:
        print("\ninterrupted: launch the same command again to resume (finished runs are skipped)", flush=True)
        raise

    results = [summaries[i] for i in range(len(jobs)) if i in summaries]
    rows = results_table([read_run(s["run_dir"]) for s in results], thresholds)
    print("\n" + markdown_table(rows))
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(os.path.join(run_dir, "results.json"), {"runs": results})
    md, csv_path = write_tables(rows, run_dir)
    print(f"wrote {md}, {csv_path} and {os.path.join(run_dir, 'results.json')}; "
          f"curves: python run.py plot {run_dir}")
    if failures:
        raise SystemExit(f"error: {len(failures)} of {len(jobs)} runs failed (tracebacks above); launch the same "
                         f"command again to retry them")
    return results


# ============================================================================ plot
def plot(argv: List[str]) -> dict:
    parser = argparse.ArgumentParser(
        prog="run.py plot", description="Learning curves (greedy evaluation return against env steps: mean over "
        "seeds and its 95%% bootstrap confidence band), one PNG per env with one line per algorithm (or sweep "
        "point), and results.md / results.csv: final and best evaluation return over seeds (mean, IQM, 95%% CI), "
        "env steps to a threshold, SPS. Reads every run folder under RUNS (args.json, summary.json, TensorBoard "
        "events), finished or not.")
    parser.add_argument("runs", nargs="+", help="folders holding runs, at any depth")
    parser.add_argument("--out", default=None, help="folder for the PNGs and tables (default: the first RUNS folder)")
    parser.add_argument("--threshold", nargs="+", default=[], metavar="[ENV=]VALUE",
                        help="return for the 'steps to threshold' column (and a dotted line): VALUE for every env, "
                             "or ENV=VALUE")
    opts = parser.parse_args(argv)
    records = latest_per_seed([read_run(p) for root in opts.runs for p in find_runs(root)])
    if not records:
        raise SystemExit(f"error: no runs (folders holding args.json) under {', '.join(opts.runs)}")
    out = opts.out or opts.runs[0]
    envs = sorted({r["env"] for r in records})
    try:
        thresholds = parse_thresholds(opts.threshold)(envs)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    os.makedirs(out, exist_ok=True)
    pngs = [plot_env(env, [r for r in records if r["env"] == env], out, thresholds.get(env)) for env in envs]
    rows = results_table(records, thresholds)
    md, csv_path = write_tables(rows, out)
    print(markdown_table(rows))
    print("wrote " + ", ".join(pngs + [md, csv_path]))
    return {"pngs": pngs, "table": md, "csv": csv_path, "rows": rows}


def plot_env(env: str, records: Sequence[dict], out: str, threshold: Optional[float]) -> str:
    """One env's curves: per label, the mean over seeds where they overlap and a 95% bootstrap
    band (seeds of different lengths are averaged over those present at each step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in sorted({r["label"] for r in records}):
        runs = [r for r in records if r["label"] == label and r["curve"]]
        if not runs:
            continue
        steps, values = curves_on_grid([r["curve"] for r in runs])  # (P,), (S, P)
        mean, low, high, _ = mean_and_band(values)
        line, = ax.plot(steps, mean, lw=2, marker="o" if len(steps) <= 20 else None, ms=3,
                        label=f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls=":", lw=1, label=f"threshold {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation return")
    ax.set_title(f"{env}: mean over seeds, 95% bootstrap CI")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, re.sub(r"[^\w.-]+", "_", env) + ".png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ============================================================================ evaluate
def evaluate(argv: List[str]) -> List[dict]:
    parser = argparse.ArgumentParser(
        prog="run.py evaluate", description="Load runs' checkpoints (any algorithm: the checkpoint says which), "
        "play greedy episodes, print the returns; optionally save one episode as a GIF or MP4 (envs that render).")
    parser.add_argument("runs", nargs="+", help="run folders or checkpoint.pt files; a folder of runs means every "
                                                "run under it that has a checkpoint")
    parser.add_argument("--episodes", type=int, default=10, help="greedy episodes per run")
    parser.add_argument("--seed", type=int, default=1, help="evaluation env copy i is seeded SEED + 10000 + i")
    parser.add_argument("--video", default=None, help="save one greedy episode to this .gif or .mp4 file (one run "
                                                      "only; MP4 needs ffmpeg)")
    parser.add_argument("--no-cuda", action="store_true", help="evaluate on the CPU even when a GPU is present")
    opts = parser.parse_args(argv)
    paths = []
    for given in opts.runs:
        if os.path.isfile(given) or os.path.isfile(os.path.join(given, "checkpoint.pt")):
            paths.append(given)
        else:
            paths += [p for p in find_runs(given) if os.path.isfile(os.path.join(p, "checkpoint.pt"))]
    if not paths:
        raise SystemExit(f"error: no checkpoint (checkpoint.pt) in or under {', '.join(opts.runs)}")
    if opts.video and len(paths) > 1:
        raise SystemExit(f"error: --video saves one episode of one run; {len(paths)} runs were given")
    if opts.video and not opts.video.endswith((".gif", ".mp4")):
        raise SystemExit("error: --video must end in .gif or .mp4")
    ffmpeg = _ffmpeg() if opts.video and opts.video.endswith(".mp4") else None
    results = []
    for path in paths:
        algo = checkpoint_algo(path)
        module = importlib.import_module(f"algos.{algo}")
        base = ["--evaluate-checkpoint", path, "--eval-episodes", str(opts.episodes), "--eval-num-envs",
                str(min(opts.episodes, 10)), "--seed", str(opts.seed), *(["--no-cuda"] if opts.no_cuda else [])]
        print(f"{path} ({algo}):")
        result = {"run": path, "algo": algo, **module.main(parse_args(module.Args, base))}
        if opts.video:
            gif = opts.video if opts.video.endswith(".gif") else os.path.join(tempfile.mkdtemp(), "episode.gif")
            try:
                module.main(parse_args(module.Args, base + ["--render-gif", gif]))
            except (NotImplementedError, ImportError, ValueError) as err:
                raise SystemExit(f"error: cannot render this run's env: {err}") from None
            if ffmpeg:
                os.makedirs(os.path.dirname(os.path.abspath(opts.video)), exist_ok=True)
                subprocess.run([ffmpeg, "-y", "-loglevel", "error", "-i", gif, "-movflags", "faststart", "-pix_fmt",
                                "yuv420p", "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", opts.video], check=True)
                shutil.rmtree(os.path.dirname(gif))
                print(f"saved {opts.video}")
            result["video"] = opts.video
        results.append(result)
    return results


def checkpoint_algo(path: str) -> str:
    """Which algorithm wrote a run: its summary.json says, else the checkpoint itself."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    summary = os.path.join(folder, "summary.json")
    if os.path.isfile(summary):
        with open(summary) as f:
            return json.load(f)["algo"]
    from common.run_utils import load_checkpoint

    return load_checkpoint(path)["algo"]


def _ffmpeg() -> str:
    """The ffmpeg executable (on PATH, or from the imageio-ffmpeg package), or exit saying how to get one."""
    found = shutil.which("ffmpeg")
    if found:
        return found
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except ImportError:
        raise SystemExit("error: an MP4 needs ffmpeg (apt-get install ffmpeg, or pip install imageio-ffmpeg); "
                         "a .gif needs nothing more") from None


# ============================================================================ entry
def main(argv: Optional[Sequence[str]] = None):
    """`run.py [launch options] [-- algorithm flags]`, `run.py plot ...` or `run.py evaluate ...`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plot"]:
        return plot(argv[1:])
    if argv[:1] == ["evaluate"]:
        return evaluate(argv[1:])
    return launch(argv)


if __name__ == "__main__":
    main()
