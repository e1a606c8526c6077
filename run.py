"""Launch grids of runs (algorithms x envs x seeds x sweep points), then plot and evaluate them.
No algorithm logic lives here: every run is `algos.<algo>.main(args)`.

    python run.py --algo mappo ippo --env simple_spread --seeds 3 -- --total-timesteps 2000000
    python run.py --algo mappo qmix --env simple_spread torch:simple_spread --seeds 5 --presets --run-dir runs/grid
    python run.py --algo mappo --env torch:simple_spread --seeds 3 --sweep learning_rate=0.001,0.002
    python run.py plot runs/grid --threshold simple_spread=-30
    python run.py evaluate runs/grid/simple_spread/mappo/mappo__simple_spread__1__1700000000 --video spread.gif
    python run.py tune --algo mappo --env torch:simple_speaker_listener --space learning_rate=2e-4:5e-3:log ent_coef=0:0.05
    python run.py export runs/grid --out results.json --format marl-eval
    python run.py crossplay runs/ttt --random --games 200
    python run.py league --env classic:tictactoe --side player_1=ippo --side player_2=ippo --phases 8 --phase-steps 200000

Launching (the default command): every --algo x --env x seed 1..SEEDS x sweep point is one run.
Everything after `--` goes to every run as algorithm flags; --env, --seed and --run-dir are set
per run. Each run's Args: defaults < preset (--presets, or --config after `--`) < the flags after
`--` < the sweep point; they are checked for every run before any starts, and saved in its
args.json. Runs go to RUN_DIR/<env>/<label>/<label>__<env>__<seed>__<time>/, where the label is
the algorithm (or --exp-name) followed by the sweep point, as in `mappo,learning_rate=0.001`
(characters that some file systems refuse, like the ':' of torch:simple_spread, are written '-').
Launching the same command again skips the runs that finished (summary.json, "status": "finished"),
resumes the interrupted ones from their checkpoint.pt, and leaves out the ones that diverged
(delete a diverged run's folder to redo it). Runs go through --workers processes at a time, one
per run (in this process with one worker or one run), or through Ray with --backend ray. A
progress line shows runs done and an ETA; at the end a results table (final and best greedy
evaluation return over seeds) is printed and written to RUN_DIR/results.md, results.csv and
results.json.

Failing well: the first Ctrl-C or SIGTERM lets every running run save its checkpoint, lists them
with the command that resumes them all, and exits 130 / 143; a second one stops at once (the last
checkpoints are kept). A run that diverges or fails is reported in one line (--debug, or
MARL_DEBUG=1, shows tracebacks) and the launch exits 1 once the other runs are done; a usage
error exits 2 with one `error: ...` line.

`run.py plot RUNS...` draws every env's learning curves and writes the same table for every
run found under RUNS (with two labels or more, also performance profiles and the probability of
improvement); `run.py evaluate RUN...` plays greedy episodes with a run's checkpoint and can save
one as a GIF or MP4; `run.py tune` searches an algorithm's settings with Optuna, each trial a grid
point of seeds, and writes the best as a preset; `run.py export` writes runs in marl-eval's JSON
layout; `run.py crossplay` plays runs against each other in an env of two sides (a cross-play table
and Elo ratings); `run.py league` trains both sides by alternation against pools of frozen snapshots. `--track` sends every run to Weights & Biases. `python run.py <command> --help` lists each
command's options. docs/how-to.md describes it all.
"""
import argparse
import dataclasses
import glob
import importlib
import itertools
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from common.cli import (DEBUG_FLAG, ConfigError, RunInterrupted, RunStopped, debugging, did_you_mean, parse_args,
                        report_errors, where_raised)
from common.results import (curves_on_grid, diverged_note, final_scores, find_runs, improvement_markdown,
                            improvement_table, latest_per_seed, markdown_table, marl_eval_layout, mean_and_band,
                            normalize, performance_profiles, profile_thresholds, read_run, read_summary,
                            results_table, run_status, score_bounds, unfinished_note, write_csv,
                            write_improvement_tables, write_tables)
from common.run_utils import args_dict, safe_name, set_console_label, write_json_atomic
from common import tune as tuning
from envs import check_env_kwargs, env_arguments, known_envs, parse_env_kwargs

REPO = os.path.dirname(os.path.abspath(__file__))
ALGOS = tuple(sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "algos", "*.py"))
                     if not p.endswith("__init__.py")))  # every algorithm file
PER_RUN_FLAGS = ("--env", "--seed", "--run-dir", "--resume", "--evaluate-checkpoint", "--render-gif")
NOT_SWEPT = ("env", "seed", "run_dir", "exp_name", "resume", "evaluate_checkpoint", "render_gif", "config", "track",
             "wandb_project_name", "wandb_entity")
# Settings that may differ between a saved run and a re-launch that skips or resumes it.
NOT_COMPARED = ("resume", "run_dir", "config", "cuda", "torch_threads", "checkpoint_every", "evaluate_checkpoint",
                "render_gif", "track", "wandb_project_name", "wandb_entity")


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
    status: str = "new"  # new, resume (an interrupted run's folder), done (a finished one's) or diverged (left out)
    path: Optional[str] = None  # the existing run folder (resume, done, diverged)

    def where(self) -> str:
        """'torch:simple_spread mappo seed 1': the run in messages."""
        return f"{self.env} {self.label} seed {self.seed}"


def sweep_points(specs: Sequence[str], path: Optional[str]) -> List[Dict[str, Any]]:
    """Every combination of the swept values ([{}] without a sweep). `specs` are KEY=V1,V2,...;
    the YAML file maps keys to lists of values (a tuple value is a list inside the list). A key
    given both ways takes the command line's values."""
    axes: Dict[str, list] = {}
    if path:
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"sweep file {path} is not valid YAML: {err}") from None
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


def run_parents(run_dir: str, env: str, label: str) -> List[str]:
    """Where a run's folder is made, RUN_DIR/<env>/<label> through `safe_name`, then where older
    launches made it (the names as given, e.g. runs/torch:simple_spread/mappo), if that differs."""
    parents = [os.path.join(run_dir, safe_name(env), safe_name(label)), os.path.join(run_dir, env, label)]
    return parents[:1] if parents[1] == parents[0] else parents


def existing_run(parents: Sequence[str], label: str, env: str, seed: int) -> Optional[str]:
    """The folder an earlier launch made for this run in `parents` (see `run_parents`), by what
    its summary.json says (`run_status`): the latest finished one, else a diverged one (left out),
    else the one with the latest checkpoint.pt (interrupted, or killed: resumed); None if none."""
    prefixes = (safe_name(f"{label}__{env}__{seed}__"), f"{label}__{env}__{seed}__")
    folders = [os.path.join(p, d) for p in parents if os.path.isdir(p) for d in os.listdir(p)
               if d.startswith(prefixes) and os.path.isdir(os.path.join(p, d))]
    status = {f: run_status(f) for f in folders}
    for wanted, marker in (("finished", "summary.json"), ("diverged", "summary.json"), (None, "checkpoint.pt")):
        found = [f for f in folders if status[f] in (wanted or ("interrupted", "unfinished"))
                 and os.path.isfile(os.path.join(f, marker))]
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
    parents = run_parents(run_dir, env, label)
    parent = parents[0]
    args = dataclasses.replace(args, exp_name=args.exp_name if label == algo else label, run_dir=parent)
    if hasattr(module, "validate"):
        module.validate(args)
    check_env_kwargs(env, parse_env_kwargs(args.env_kwargs))  # names, types and ranges; builds nothing
    job = Job(algo, env, seed, label, parent, argv + ["--run-dir", parent], args_dict(args))
    job.path = existing_run(parents, label, env, seed)
    return job


def plan(opts, extra: List[str], run_dir: str) -> List[Job]:
    """Every run of the grid and what to do with it: start it (new), resume its folder, or skip
    it (done), or leave it out (diverged); see check_saved."""
    for algo in opts.algo:
        if algo not in ALGOS:
            raise ConfigError(f"unknown --algo {algo!r}{did_you_mean(algo, ALGOS)}; accepted: {', '.join(ALGOS)}")
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
            jobs += [make_job(module, algo, env, seed, point, flags, run_dir)
                     for seed in range(opts.first_seed, opts.first_seed + opts.seeds)]
    return check_saved(jobs)


def check_saved(jobs: List[Job]) -> List[Job]:
    """Mark each job whose folder an earlier launch made (`existing_run`), by its `run_status`:
    done (finished, same settings), diverged (left out: the launch reports it), or resume
    (interrupted or killed; a finished run asked for a larger --total-timesteps trains on).
    A saved run whose args.json differs from what this launch asks for is an error, except a
    changed --total-timesteps of an unfinished run or a larger one of a finished run."""
    conflicts = []
    for job in (j for j in jobs if j.path):
        changed = changed_settings(job.path, job.resolved)
        status = run_status(job.path)
        steps = changed.get("total_timesteps")
        if changed and not (set(changed) == {"total_timesteps"} and (status != "finished" or steps[1] > steps[0])):
            conflicts.append(f"{job.path}: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
        job.status = ("diverged" if status == "diverged" else "done" if status == "finished" and not changed
                      else "resume")
    if conflicts:
        raise ConfigError("these runs were made with other settings than this launch asks for:\n  "
                          + "\n  ".join(conflicts) + "\nuse another --run-dir (or --exp-name after `--`) for "
                          "the new settings, or delete those folders to redo them")
    return jobs


# ============================================================================ running
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOPPED_BY: Optional[int] = None  # the first Ctrl-C (SIGINT) or SIGTERM this process got: no run starts after it
IN_RUN = False  # run_task is under way here (while a run trains, its RunRecorder takes the signals instead)
CHILD = "import sys; sys.path.insert(0, sys.argv[1]); import run; run.child_main()"


class StoppedEarly(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while a run was set up (before its training took the signals): nothing to save."""


def finished_and_tasks(jobs: List[Job]) -> Tuple[Dict[int, dict], List[Tuple[int, str, List[str], str]]]:
    """The summaries of the finished jobs by index, and the (index, algo, argv, console label)
    tasks of the new and interrupted ones (an interrupted one resumes from its folder). Diverged
    jobs are in neither: they are left out."""
    summaries = {i: read_summary(j.path) for i, j in enumerate(jobs) if j.status == "done"}
    tasks = [(i, j.algo, j.argv + (["--resume", j.path] if j.status == "resume" else []),
              f"{j.label} {j.env} s{j.seed}") for i, j in enumerate(jobs) if j.status in ("new", "resume")]
    return summaries, tasks


def result_recorder(summaries: Dict[int, dict], ended: Dict[int, tuple]) -> Callable[..., str]:
    """An `on_result` for `run_local` / `run_ray` that files each result by its run's index: a
    finished run's summary in `summaries`, (status, summary, message) of any other in `ended`; it
    returns the status (finished, interrupted, diverged, failed or not started)."""
    def record(index: int, summary: Optional[dict], error: Optional[str]) -> str:
        status = "failed" if summary is None else summary.get("status", "finished")
        if status == "finished":
            summaries[index] = summary
        else:
            ended[index] = (status, summary or {}, error)
        return status
    return record


def run_job(algo: str, argv: Sequence[str]) -> dict:
    """One run in whatever process executes it: its Args from `argv`, then `main`; its summary."""
    module = importlib.import_module(f"algos.{algo}")
    return module.main(parse_args(module.Args, list(argv)))


def run_task(task: Tuple[int, str, List[str], str]) -> Tuple[int, Optional[dict], Optional[str]]:
    """Run one task here and say how it ended, never raising (one run does not stop the others):
    (index, summary, None) when it finished; (index, its summary.json, message) when it was
    interrupted or diverged (the summary's "status" says which); (index, {"status": "not started"},
    message) when a signal came before training started; (index, {"status": "interrupted"},
    message) when a second signal stopped it at once; (index, None, "Type: message (at
    file:line in function)\ntraceback") when it failed."""
    global IN_RUN
    index, algo, argv, _ = task
    try:
        IN_RUN = True
        if STOPPED_BY is not None:  # a signal came before IN_RUN was set
            raise StoppedEarly
        return index, run_job(algo, argv), None
    except RunStopped as err:
        if isinstance(err, RunInterrupted):
            _note_stop(err.exit_code - 128)
        status = "interrupted" if isinstance(err, RunInterrupted) else "diverged"
        return index, read_summary(err.run_path) or {"status": status, "run_dir": err.run_path}, str(err).strip()
    except StoppedEarly:
        return index, {"status": "not started"}, "stopped before training started"
    except KeyboardInterrupt:
        _note_stop(signal.SIGINT)
        return index, {"status": "interrupted"}, "stopped at once, before it could save (its last checkpoint is kept)"
    except Exception as err:
        return index, None, (f"{type(err).__name__}: {' '.join(str(err).split())} (at {where_raised(err)})\n"
                             f"{traceback.format_exc()}")
    finally:
        IN_RUN = False


def run_labelled(task) -> Tuple[int, Optional[dict], Optional[str]]:
    """`run_task` with every console line of the run starting with its label (several runs share
    the console)."""
    set_console_label(task[3])
    return run_task(task)


def _note_stop(signum: int) -> None:
    global STOPPED_BY
    STOPPED_BY = signum if STOPPED_BY is None else STOPPED_BY


def _on_stop_signal(signum, frame) -> None:
    """Ctrl-C or SIGTERM while no run trains here: start no more runs; a run being set up stops now."""
    _note_stop(signum)
    if IN_RUN:
        raise StoppedEarly


def _stop_now(signum, frame) -> None:
    """Ctrl-C or SIGTERM while games are played (nothing to save): stop at once, exit 130 / 143."""
    err = KeyboardInterrupt()
    err.signum = signum
    raise err


class signals_to:
    """SIGINT and SIGTERM go to `handler` inside the block, to what they went to before after it
    (only the main thread can take signals: elsewhere this does nothing)."""

    def __init__(self, handler: Callable):
        self.handler, self.old = handler, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = {sig: signal.signal(sig, self.handler) for sig in STOP_SIGNALS}

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)


def run_local(tasks, workers: int, on_result: Callable, poll: Optional[Callable[[], bool]] = None) -> None:
    """Run the tasks of `finished_and_tasks` and pass each `run_task` result to `on_result` as it
    comes: in this process, one after another (one worker, or one task), or as up to `workers`
    child processes at a time, one per run (each imports torch afresh; labelled console lines).
    With `poll` (run.py tune's pruning), every run is a child process and `poll()` is asked about
    once a second: True stops the runs as a SIGTERM would (they save), and starts no more.

    The first Ctrl-C or SIGTERM starts no more runs (`STOPPED_BY` says which signal came) and lets
    the running ones save their checkpoint; this returns once they have. A child has its own
    session, so that a terminal's Ctrl-C reaches this process only, which passes every signal on
    to every child that is ready for it (a second one then stops them at once). A child that ends
    without a result (killed, out of memory) is a failed run."""
    if poll is None and (workers <= 1 or len(tasks) <= 1):
        with signals_to(_on_stop_signal):
            for task in tasks:
                if STOPPED_BY is not None:
                    break
                on_result(*run_task(task))
        return
    queue, running, selector = list(tasks), {}, selectors.DefaultSelector()  # running: pipe -> [child, task, ready]
    halted: List[int] = []  # the signal that poll() stopped the runs with

    def forward(signum, frame):
        _note_stop(signum)
        for child, _, ready in list(running.values()):
            if ready:
                child.send_signal(signum)

    def stop_signal() -> Optional[int]:
        return STOPPED_BY if STOPPED_BY is not None else halted[0] if halted else None

    try:
        with signals_to(forward):
            while running or (queue and stop_signal() is None):
                if poll is not None and not halted and poll():
                    halted.append(signal.SIGTERM)
                    for child, _, ready in running.values():
                        if ready:
                            child.send_signal(signal.SIGTERM)
                while queue and len(running) < workers and stop_signal() is None:
                    task, (read, write) = queue.pop(0), os.pipe()
                    child = subprocess.Popen([sys.executable, "-c", CHILD, REPO, json.dumps(task), str(write)],
                                             pass_fds=(write,), start_new_session=True)
                    os.close(write)
                    pipe = os.fdopen(read, "rb", buffering=0)  # unbuffered: readline takes one line only
                    running[pipe] = [child, task, False]
                    selector.register(pipe, selectors.EVENT_READ)
                if not running:
                    break
                for key, _ in selector.select(timeout=None if poll is None else 1.0):
                    child, task, _ = running[key.fileobj]
                    line = key.fileobj.readline().decode()
                    if line == "ready\n":
                        running[key.fileobj][2] = True
                        if stop_signal() is not None:
                            child.send_signal(stop_signal())
                        continue
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    del running[key.fileobj]
                    lost = f"its process ended with exit code {child.wait()} and no result (killed? out of memory?)"
                    on_result(*(json.loads(line) if line else (task[0], None, lost)))
    finally:  # only if this process failed: the children that took signals save, the others end now
        for child, _, ready in running.values():
            child.send_signal(signal.SIGTERM) if ready else child.kill()
        for child, _, _ in running.values():
            child.wait()


def child_main() -> None:
    """A child process of `run_local` (python -c CHILD REPO TASK FD): it takes Ctrl-C and SIGTERM
    (`_on_stop_signal`), says "ready", then writes the task's `run_task` result to file
    descriptor FD as one JSON line."""
    task, out = json.loads(sys.argv[2]), os.fdopen(int(sys.argv[3]), "w")
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)
    out.write("ready\n")
    out.flush()
    out.write(json.dumps(run_labelled(task), default=str) + "\n")
    out.flush()


def run_ray(tasks, address: Optional[str], workers: int, cpus_per_run: float, gpus_per_run: float,
            on_result: Callable, poll: Optional[Callable[[], bool]] = None) -> None:
    """As Ray tasks: on a local Ray instance of `workers` CPUs, or on the cluster at `address`
    (the code is shipped as the job's working_dir; run folders must be on a filesystem every node
    shares with this one). An already initialised Ray is used as it is. `poll()` (run.py tune's
    pruning), asked every half second, cancels every task when it says True, as a Ctrl-C does.

    The first Ctrl-C or SIGTERM cancels every task: queued ones never start, and Ray interrupts
    the running ones as a Ctrl-C would, so they save their checkpoint (one interrupted before it
    could resumes from its last periodic checkpoint); a second one stops them all at once."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'ray>=2.9' (the default --backend local needs "
                          "nothing more)") from None
    started = not ray.is_initialized()
    if started and address:
        ray.init(address=address, runtime_env={"working_dir": REPO, "excludes": [
            ".git", "runs", "*.pt", "*.egg-info", "__pycache__", ".venv"]})
    elif started:
        ray.init(num_cpus=workers, include_dashboard=False)
    # By module name, so that workers import it rather than unpickle this script's __main__.
    remote = ray.remote(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=0)(
        importlib.import_module("run").run_labelled)
    pending, cancelled = {remote.remote(task): task for task in tasks}, False

    def note(signum, frame):
        if STOPPED_BY is not None:
            raise KeyboardInterrupt
        _note_stop(signum)

    try:
        with signals_to(note):
            while pending:
                if not cancelled and (STOPPED_BY is not None or (poll is not None and poll())):
                    for ref in pending:
                        ray.cancel(ref)
                    cancelled = True
                for ref in ray.wait(list(pending), num_returns=1, timeout=0.5)[0]:
                    task = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.TaskCancelledError:
                        result = (task[0], {"status": "not started"}, "cancelled before it started")
                    except ray.exceptions.RayError as err:
                        result = (task[0], None, f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")
                    on_result(*result)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


class GridProgress:
    """One line each time a run ends: a bar of the runs ended out of the grid, how they ended,
    elapsed time and an ETA (time per run so far, times the runs left; runs skipped as finished or
    left out as diverged count as ended)."""

    def __init__(self, total: int, skipped: int, left_out: int = 0):
        self.total, self.skipped, self.left_out, self.start = total, skipped, left_out, time.time()
        self.counts = {"finished": skipped, "failed": 0, "diverged": left_out, "interrupted": 0}

    def update(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        self.show()

    def show(self) -> None:
        ended = sum(self.counts.values())
        ran, left = ended - self.skipped - self.left_out, self.total - ended
        elapsed = time.time() - self.start
        eta = _clock(elapsed / ran * left) if ran > 0 else "?"
        filled = int(30 * ended / max(self.total, 1))
        others = "".join(f", {n} {status}" for status, n in self.counts.items() if status != "finished" and n)
        print(f"[{'#' * filled}{'.' * (30 - filled)}] {self.counts['finished']}/{self.total} runs done ({self.skipped} "
              f"skipped{others}) | elapsed {_clock(elapsed)} | ETA {eta}", flush=True)


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


def outcome_line(job: Job, status: str, summary: Optional[dict], error: Optional[str]) -> str:
    """One line on a run that did not finish: a diverged one's reason (summary.json) and folder,
    a failed one's error and where it was raised."""
    if status == "diverged":
        summary = summary or {}
        return f"diverged: {job.where()}: {summary.get('diverged') or error} ({summary.get('run_dir') or job.path})"
    return f"failed: {job.where()}: {(error or '').splitlines()[0] if error else 'no result'}"


def relaunch_command(argv: Sequence[str]) -> str:
    """`python run.py ARGV`, run.py as this process was started with it."""
    script = sys.argv[0] if os.path.basename(sys.argv[0]) == "run.py" else os.path.relpath(os.path.join(REPO, "run.py"))
    return f"python {script} {shlex.join(argv)}".strip()


def stopped(jobs: List[Job], finished: Dict[int, dict], ended: Dict[int, tuple], argv: Sequence[str], run_dir: str,
            ray: bool) -> RunInterrupted:
    """Print what a Ctrl-C or SIGTERM left of the grid (`finished`: summaries by index; `ended`:
    (status, summary, message) by index); the RunInterrupted that exits 130 / 143 with the
    command that resumes it."""
    name = signal.Signals(STOPPED_BY).name
    lines, count = [], {"finished": 0, "not started": 0}
    for i, job in enumerate(jobs):
        status, summary, message = ended.get(i, ("finished" if i in finished else "not started", {}, None))
        if status == "interrupted" and summary.get("run_dir"):
            lines.append(f"  interrupted: {job.where()} at env step {summary.get('global_step', 0):,}: checkpoint "
                         f"saved in {summary['run_dir']}")
        elif status == "interrupted":
            lines.append(f"  interrupted: {job.where()}: {message}")
        elif status in ("diverged", "failed"):
            lines.append("  " + outcome_line(job, status, summary, message))
        count[status] = count.get(status, 0) + 1
    print(f"\nstopped by {name}: {count['finished']} of {len(jobs)} runs finished, {count['not started']} not started" +
          ("\n" + "\n".join(lines) if lines else ""), flush=True)
    note = ("\n(Ray runs stopped before they could save resume from their last periodic checkpoint, "
            "--checkpoint-every)" if ray else "")
    return RunInterrupted(f"stopped by {name}. The same command resumes every interrupted run, starts the others and "
                          f"skips the finished ones:\n  {relaunch_command(argv)}{note}", run_dir, STOPPED_BY)


def backend_options(parser: argparse.ArgumentParser) -> None:
    """--backend, --workers, --address, --cpus-per-run, --gpus-per-run: how runs are executed."""
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: processes on this machine; ray: Ray tasks (pip install ray)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                        else os.cpu_count() or 1, help="runs at a time (processes; with --backend ray and no "
                        "--address, the CPUs of the local Ray instance); default: the CPU cores this process may use")
    parser.add_argument("--address", default=None,
                        help="with --backend ray: the cluster to join (e.g. auto, or ray://HEAD:10001); none starts "
                             "a local Ray instance")
    parser.add_argument("--cpus-per-run", type=float, default=1.0, help="with --backend ray: CPUs Ray reserves per run")
    parser.add_argument("--gpus-per-run", type=float, default=0.0, help="with --backend ray: GPUs Ray reserves per run")


def launch(argv: List[str]) -> List[dict]:
    """`run.py [options] [-- algorithm flags]`: plan the grid, run what is left of it, report;
    returns the summaries of its finished runs. Raises RunInterrupted after Ctrl-C or SIGTERM
    (the runs saved), RunStopped when runs failed or diverged (after the table of the others)."""
    global STOPPED_BY
    STOPPED_BY = None
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["mappo"], metavar="ALGO",
                        help=f"algorithm files to run: {', '.join(ALGOS)}")
    parser.add_argument("--env", nargs="+", default=["simple_spread"],
                        help=f"env names; known: {', '.join(known_envs())}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS per (algo, env, sweep point)")
    parser.add_argument("--first-seed", type=int, default=1, help="seeds FIRST..FIRST+SEEDS-1 instead (e.g. fresh "
                                                                  "seeds to check what a search chose on its seeds)")
    parser.add_argument("--run-dir", default="runs", help="runs go to RUN_DIR/<env>/<label>/")
    parser.add_argument("--presets", action="store_true",
                        help="start each run from configs/<algo>/<env>.yaml where it exists (torch:simple_spread "
                             "uses simple_spread.yaml)")
    parser.add_argument("--sweep", nargs="+", default=[], metavar="KEY=V1,V2",
                        help="sweep these Args fields: every combination of the values is one grid point")
    parser.add_argument("--sweep-file", default=None, help="YAML file mapping Args fields to lists of values to sweep")
    backend_options(parser)
    parser.add_argument("--threshold", nargs="+", default=[], metavar="[ENV=]VALUE",
                        help="return that the table's 'steps to threshold' column looks for")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and what would happen to each; run none")
    parser.add_argument("--track", action="store_true",
                        help="log every run to Weights & Biases (the algorithm files' --track; pip install -e "
                             "'.[track]'): one W&B run per run folder, the seeds of a label and env in one group")
    parser.add_argument("--wandb-project-name", default=None, help="the W&B project of --track (default: marl-clean)")
    parser.add_argument("--wandb-entity", default=None, help="the W&B team or user of --track")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print tracebacks (of run.py and of failed runs); "
                                                              "MARL_DEBUG=1 does the same")
    opts = parser.parse_args(own)
    extra += [*(["--track"] if opts.track else []),  # to every run, as its own flags
              *(["--wandb-project-name", opts.wandb_project_name] if opts.wandb_project_name else []),
              *(["--wandb-entity", opts.wandb_entity] if opts.wandb_entity else [])]
    for flag in PER_RUN_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in extra):
            parser.error(f"{flag} is set by the launcher per run; give --env, --seeds and --run-dir before '--' "
                         f"(runs resume by themselves when the same command is launched again)")
    if opts.presets and any(a == "--config" or a.startswith("--config=") for a in extra):
        parser.error("give either --presets or --config after '--', not both")
    if opts.seeds < 1:
        parser.error("--seeds must be at least 1")
    run_dir = os.path.abspath(opts.run_dir) if opts.backend == "ray" and opts.address else opts.run_dir
    thresholds = parse_thresholds(opts.threshold)(opts.env)
    jobs = plan(opts, extra, run_dir)
    counts = {s: sum(j.status == s for j in jobs) for s in ("new", "resume", "done", "diverged")}
    n = counts["diverged"]
    left_out = (f", {n} diverged (left out; delete {'its folder' if n == 1 else 'their folders'} to redo "
                f"{'it' if n == 1 else 'them'})") if n else ""
    print(f"{len(jobs)} runs: {counts['new']} new, {counts['resume']} to resume, {counts['done']} finished (skipped)"
          f"{left_out}; in {run_dir}", flush=True)
    if opts.dry_run:
        for j in jobs:
            print(f"  {j.status:<8} {j.env} {j.label} seed {j.seed}" + (f"  ({j.path})" if j.path else ""))
        return []

    summaries, tasks = finished_and_tasks(jobs)
    # index -> (status, summary, message) of every run that did not finish: diverged, failed, interrupted, not started
    ended = {i: ("diverged", read_summary(j.path), None) for i, j in enumerate(jobs) if j.status == "diverged"}
    for i in ended:
        print(outcome_line(jobs[i], *ended[i]), flush=True)
    progress = GridProgress(len(jobs), counts["done"], counts["diverged"])
    progress.show()

    record = result_recorder(summaries, ended)

    def on_result(index: int, summary: Optional[dict], error: Optional[str]) -> None:
        status = record(index, summary, error)
        if status in ("diverged", "failed"):
            print(outcome_line(jobs[index], status, summary, error), flush=True)
            if status == "failed" and debugging(opts.debug):
                print(error.split("\n", 1)[-1], flush=True)
        if status != "not started":
            progress.update(status)

    if opts.backend == "ray":
        run_ray(tasks, opts.address, opts.workers, opts.cpus_per_run, opts.gpus_per_run, on_result)
    else:
        run_local(tasks, opts.workers, on_result)
    if STOPPED_BY is not None:
        raise stopped(jobs, summaries, ended, argv, run_dir, opts.backend == "ray")

    results = [summaries[i] for i in range(len(jobs)) if i in summaries]
    rows = results_table([read_run(s["run_dir"]) for s in results], thresholds)
    print("\n" + markdown_table(rows))
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(os.path.join(run_dir, "results.json"), {"runs": results})
    md, csv_path = write_tables(rows, run_dir)
    print(f"wrote {md}, {csv_path} and {os.path.join(run_dir, 'results.json')}; "
          f"curves: python run.py plot {run_dir}", flush=True)
    bad = {i: e for i, e in ended.items() if e[0] in ("diverged", "failed")}
    if bad:
        count = {s: sum(e[0] == s for e in bad.values()) for s in ("failed", "diverged")}
        hints = {"failed": "launching the same command again retries the failed runs (from their checkpoint, if any)",
                 "diverged": "delete a diverged run's folder to redo it"}
        raise RunStopped(f"error: {len(bad)} of {len(jobs)} runs did not finish ("
                         + ", ".join(f"{n} {s}" for s, n in count.items() if n) + "; the table leaves them out):\n"
                         + "\n".join("  " + outcome_line(jobs[i], *bad[i]) for i in sorted(bad)) + "\n"
                         + "; ".join(hints[s] for s, n in count.items() if n), run_dir)
    return results


# ============================================================================ plot
def plot(argv: List[str]) -> dict:
    parser = argparse.ArgumentParser(
        prog="run.py plot", description="Learning curves (greedy evaluation return against env steps: mean over "
        "seeds and its 95%% bootstrap confidence band), one PNG per env with one line per algorithm (or sweep "
        "point), and results.md / results.csv: final and best evaluation return over seeds (mean, IQM, 95%% CI), "
        "env steps to a threshold, SPS; for envs with a winner (SMAX) also the win rate: <env>_win_rate.png and the "
        "final and best win rates (mean over seeds). With two labels or more, it compares them on each run's final "
        "greedy evaluation return, normalised per env, as rliable does: profiles.png (performance profiles) and "
        "improvement.png, .md and .csv (probability of improvement), with 95%% stratified bootstrap intervals. "
        "Reads every run folder under RUNS (args.json, summary.json, TensorBoard events): a run that diverged is "
        "left out, an unfinished one (interrupted, still running or killed) is shown as far as it got; the output "
        "says how many of each.")
    parser.add_argument("runs", nargs="+", help="folders holding runs, at any depth")
    parser.add_argument("--out", default=None, help="folder for the PNGs and tables (default: the first RUNS folder)")
    parser.add_argument("--threshold", nargs="+", default=[], metavar="[ENV=]VALUE",
                        help="return for the 'steps to threshold' column (and a dotted line): VALUE for every env, "
                             "or ENV=VALUE")
    parser.add_argument("--normalize", nargs="+", default=[], metavar="ENV=LOW:HIGH",
                        help="returns that the performance profiles normalise to 0 and 1 for an env (e.g. a random "
                             "and an expert policy's); default: the lowest and highest final return of its runs")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print the traceback of an error (or MARL_DEBUG=1)")
    opts = parser.parse_args(argv)
    missing = [root for root in opts.runs if not os.path.isdir(root)]
    if missing:
        raise ConfigError(f"no such folder: {', '.join(missing)} (run.py plot reads the run folders under RUNS)")
    threshold_of = parse_thresholds(opts.threshold)
    given_bounds = parse_bounds(opts.normalize)
    everything = latest_per_seed([read_run(p) for root in opts.runs for p in find_runs(root)])
    records = [r for r in everything if r["status"] != "diverged"]
    notes = [note for note in (diverged_note(everything), unfinished_note(records)) if note]
    if not records:
        raise ConfigError(f"no runs (folders holding args.json) under {', '.join(opts.runs)}"
                          + "".join(f"; {note}" for note in notes))
    out = opts.out or opts.runs[0]
    envs = sorted({r["env"] for r in records})
    unknown = sorted(set(given_bounds) - set(envs))
    if unknown:
        raise ConfigError(f"--normalize {unknown[0]}=...: no runs of that env here{did_you_mean(unknown[0], envs)}")
    thresholds = threshold_of(envs)
    os.makedirs(out, exist_ok=True)
    pngs = [plot_env(env, [r for r in records if r["env"] == env], out, thresholds.get(env)) for env in envs]
    pngs += [plot_env(env, [r for r in records if r["env"] == env], out, None, win_rate=True) for env in envs
             if any(r["win_curve"] for r in records if r["env"] == env)]  # envs with a winner (SMAX)
    rows = results_table(records, thresholds)
    md, csv_path = write_tables(rows, out)
    comparison = compare_labels(records, out, given_bounds)
    print(markdown_table(rows))
    if comparison["improvement"]:
        print(improvement_markdown(comparison["improvement"]))
    print("\n".join(notes + comparison["notes"] + ["wrote " + ", ".join(pngs + [md, csv_path] + comparison["files"])]))
    return {"pngs": pngs, "table": md, "csv": csv_path, "rows": rows, **comparison}


def new_figure(width: float, height: float):
    """A matplotlib figure and its axes, drawn without a display (the Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def save_figure(fig, path: str) -> str:
    """Lay out, write (120 dpi) and close `fig`; return `path`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_env(env: str, records: Sequence[dict], out: str, threshold: Optional[float], win_rate: bool = False) -> str:
    """One env's curves: per label, the mean over seeds where they overlap and a 95% bootstrap
    band (seeds of different lengths are averaged over those present at each step). Of the
    evaluation return in <env>.png; with `win_rate`, of the evaluation win rate in <env>_win_rate.png."""
    curve = "win_curve" if win_rate else "curve"
    fig, ax = new_figure(7, 4.5)
    for label in sorted({r["label"] for r in records}):
        runs = [r for r in records if r["label"] == label and r[curve]]
        if not runs:
            continue
        steps, values = curves_on_grid([r[curve] for r in runs])  # (P,), (S, P)
        mean, low, high, _ = mean_and_band(values)
        line, = ax.plot(steps, mean, lw=2, marker="o" if len(steps) <= 20 else None, ms=3,
                        label=f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, lw=0)
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls=":", lw=1, label=f"threshold {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("greedy evaluation win rate" if win_rate else "greedy evaluation return")
    ax.set_title(f"{env}: mean over seeds, 95% bootstrap CI")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    name = re.sub(r"[^\w.-]+", "_", env) + ("_win_rate" if win_rate else "")
    return save_figure(fig, os.path.join(out, name + ".png"))


def parse_bounds(specs: Sequence[str]) -> Dict[str, Tuple[float, float]]:
    """--normalize ENV=LOW:HIGH ... -> {env: (low, high)}, the returns that normalise to 0 and 1."""
    bounds = {}
    for spec in specs:
        env, _, value = spec.rpartition("=")
        low, _, high = value.partition(":")
        try:
            low, high = float(low), float(high)
        except ValueError:
            low = high = float("nan")
        if not env or not low < high:  # NaN fails too
            raise ConfigError(f"--normalize {spec!r}: write ENV=LOW:HIGH with LOW < HIGH, the returns that map to 0 "
                              "and 1 (e.g. simple_spread=-79:-22.6)")
        bounds[env] = (low, high)
    return bounds


def compare_labels(records: Sequence[dict], out: str, given_bounds: Dict[str, Tuple[float, float]]) -> dict:
    """With two labels or more: performance profiles and the probability of improvement on every run's final
    greedy evaluation return (results.md's "final"), as rliable defines them (Agarwal et al. 2021), with 95%
    stratified bootstrap intervals. Writes profiles.png, and where two labels ran a common env improvement.png,
    improvement.md and improvement.csv. Returns {"profiles": its PNG or None, "improvement_png": PNG or None,
    "improvement": common.results.improvement_table's rows, "bounds": {env: (low, high)} used to normalise,
    "files": what it wrote, "notes": lines for the console}."""
    scores = final_scores(records)  # {label: {env: (S,)}}
    if len(scores) < 2:
        return {"profiles": None, "improvement_png": None, "improvement": [], "bounds": {}, "files": [], "notes": []}
    bounds = score_bounds(scores, given_bounds)
    how = "; ".join(f"{env}: {'given' if env in given_bounds else 'min-max over its runs'} [{low:g}, {high:g}]"
                    for env, (low, high) in bounds.items())
    notes = [f"profiles: final greedy evaluation return normalised per env, (return - low) / (high - low) with {how}"]
    one_seed = [f"{label} on {env}" for label, per_env in sorted(scores.items()) for env, x in sorted(per_env.items())
                if len(x) < 2]
    if one_seed:
        notes.append("one seed only, which the bootstrap cannot vary (with one seed everywhere the intervals have "
                     f"zero width): {', '.join(one_seed)}")
    given = sorted(set(given_bounds) & set(bounds))
    scale = "min-max over each env's runs" if not given else f"given bounds for {', '.join(given)}" + (
        ", min-max for the other envs" if len(given) < len(bounds) else "")
    profiles = plot_profiles(scores, normalize(scores, bounds), out, scale)
    rows = improvement_table(scores)  # P(X > Y) compares runs of one env: normalising cannot change it
    improvement_png, files = None, [profiles]
    if rows:
        improvement_png = plot_improvement(rows, out)
        files += [improvement_png, *write_improvement_tables(rows, out, IMPROVEMENT_NOTE)]
    return {"profiles": profiles, "improvement_png": improvement_png, "improvement": rows, "bounds": bounds,
            "files": files, "notes": notes}


IMPROVEMENT_NOTE = ("P(X > Y): the probability that a run of X ends with a higher final greedy evaluation return than "
                    "a run of Y on the same env (the Mann-Whitney statistic over pairs of seeds, a tie counting 1/2), "
                    "averaged over the envs both ran; 95% stratified bootstrap CI (seeds resampled within each label "
                    "and env). Normalising the returns does not change it.")


def plot_profiles(scores: dict, normalized: dict, out: str, scale: str) -> str:
    """Performance profiles (score distributions, Agarwal et al. 2021): per label, the fraction of runs whose
    normalised final return is above tau, each env weighted equally, with a 95% stratified bootstrap band.
    `scores` and `normalized` are {label: {env: (S,) final returns}}, before and after normalising."""
    taus = profile_thresholds(normalized)  # (K,)
    fig, ax = new_figure(7, 4.5)
    for label, (profile, low, high) in performance_profiles(normalized, taus).items():
        runs = sum(len(x) for x in scores[label].values())
        envs = len(scores[label])
        line, = ax.plot(taus, profile, lw=2, label=f"{label} ({envs} env{'s' * (envs > 1)}, {runs} runs)")
        ax.fill_between(taus, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel(f"normalised final return tau ({scale})")
    ax.set_ylabel("fraction of runs with return > tau")
    ax.set_title("Performance profiles of the final greedy evaluation return, 95% stratified bootstrap CI", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, os.path.join(out, "profiles.png"))


def plot_improvement(rows: Sequence[dict], out: str) -> str:
    """The probability of improvement of every ordered pair of labels (`improvement_table`'s rows): one row
    "X vs Y" each, the point estimate and its 95% stratified bootstrap interval; 0.5 (no difference) dotted."""
    fig, ax = new_figure(7, 1.5 + 0.4 * len(rows))
    ys = list(range(len(rows)))[::-1]  # the first pair on top
    points = [r["p_improvement"] for r in rows]
    errors = [[max(0.0, r["p_improvement"] - r["ci_low"]) for r in rows],  # a percentile interval may
              [max(0.0, r["ci_high"] - r["p_improvement"]) for r in rows]]  # leave out its estimate, at the edges
    ax.errorbar(points, ys, xerr=errors, fmt="o", capsize=4, lw=2)
    ax.axvline(0.5, color="gray", ls=":", lw=1)
    ax.set_yticks(ys, [f"{r['x']} vs {r['y']}" for r in rows])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("P(X > Y): a run of X ends above a run of Y on the same env, averaged over envs")
    ax.set_title("Probability of improvement (final greedy evaluation return), 95% stratified bootstrap CI",
                 fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, os.path.join(out, "improvement.png"))


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
    parser.add_argument("--track", action="store_true",
                        help="log each run's mean return (and the --video) into its W&B run (pip install -e "
                             "'.[track]'): the one it was tracked in, else a new one of the same id")
    parser.add_argument("--wandb-project-name", default=None,
                        help="with --track, for a run that was not tracked: the W&B project (default: marl-clean)")
    parser.add_argument("--wandb-entity", default=None,
                        help="with --track, for a run that was not tracked: the W&B team or user")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print the traceback of an error (or MARL_DEBUG=1)")
    opts = parser.parse_args(argv)
    tracking = [*(["--track"] if opts.track else []),
                *(["--wandb-project-name", opts.wandb_project_name] if opts.wandb_project_name else []),
                *(["--wandb-entity", opts.wandb_entity] if opts.wandb_entity else [])]
    if opts.track:
        from common.cli import require_wandb

        require_wandb()  # before any evaluation runs
    paths = runs_with_checkpoints(opts.runs)
    if opts.video and len(paths) > 1:
        raise ConfigError(f"--video saves one episode of one run; {len(paths)} runs were given")
    if opts.video and not opts.video.endswith((".gif", ".mp4")):
        raise ConfigError("--video must end in .gif or .mp4")
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
                raise ConfigError(f"cannot render this run's env: {err}") from None
            if ffmpeg:
                os.makedirs(os.path.dirname(os.path.abspath(opts.video)), exist_ok=True)
                subprocess.run([ffmpeg, "-y", "-loglevel", "error", "-i", gif, "-movflags", "faststart", "-pix_fmt",
                                "yuv420p", "-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", opts.video], check=True)
                shutil.rmtree(os.path.dirname(gif))
                print(f"saved {opts.video}")
            result["video"] = opts.video
        if opts.track:  # once the video is made (an MP4 is made here): the return and the video in one W&B step
            from common.run_utils import track_evaluation

            track_evaluation(parse_args(module.Args, base + tracking), path if os.path.isdir(path)
                             else os.path.dirname(os.path.abspath(path)), result, opts.video)
        results.append(result)
    return results


def runs_with_checkpoints(given: Sequence[str]) -> List[str]:
    """Run folders or checkpoint files, a folder of runs standing for every run under it that has a
    checkpoint; a path that does not exist, or no checkpoint at all, fails saying so."""
    paths = []
    for root in given:
        if not os.path.exists(root):
            raise ConfigError(f"no such run folder or checkpoint: {root}")
        if os.path.isfile(root) or os.path.isfile(os.path.join(root, "checkpoint.pt")):
            paths.append(root)
        else:
            paths += [p for p in find_runs(root) if os.path.isfile(os.path.join(p, "checkpoint.pt"))]
    if not paths:
        raise ConfigError(f"no checkpoint (checkpoint.pt) in or under {', '.join(given)}")
    return paths


def checkpoint_algo(path: str) -> str:
    """Which algorithm wrote a run (a folder or its checkpoint.pt): its summary.json says, else the
    checkpoint itself (any other file must be a checkpoint: load_checkpoint says what it is if not)."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    summary = read_summary(folder) if os.path.isdir(path) or os.path.basename(path) == "checkpoint.pt" else None
    if summary and "algo" in summary:
        return summary["algo"]
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
        raise ConfigError("an MP4 needs ffmpeg (apt-get install ffmpeg, or pip install imageio-ffmpeg); "
                          "a .gif needs nothing more") from None


# ============================================================================ crossplay
def crossplay_command(argv: List[str]) -> dict:
    """`run.py crossplay RUNS`: every run against every other in an env of two sides; the table,
    Elo ratings with bootstrap intervals, a heatmap."""
    from common import league

    parser = argparse.ArgumentParser(
        prog="run.py crossplay", description="Play every run (any algorithm) against every other in an env of two "
        "sides (the seats of a turn-based game, or two teams like simple_tag's predators and prey): each run plays the "
        "sides it learned, every pairing for --games episodes (in both seat orders where runs play both sides). "
        "Writes OUT/crossplay.json and .csv (side 0's wins, draws and losses and both sides' mean returns per "
        "pairing), OUT/elo.csv (Elo ratings of every run in every side, 95%% bootstrap intervals), and "
        "crossplay.png and elo.png. A game's outcome: the sign of side 0's return in a zero-sum game, else side 0's "
        "return against the median of side 0's returns over the table.")
    parser.add_argument("runs", nargs="+", help="run folders (or folders of runs), all on one env")
    parser.add_argument("--random", action="store_true", help="add a player of uniformly random legal actions")
    parser.add_argument("--scripted", nargs="+", default=[], metavar="NAME",
                        help="add scripted players of the game (connect four: win_or_block; tic-tac-toe: perfect)")
    parser.add_argument("--games", type=int, default=200, help="episodes per pairing")
    parser.add_argument("--seed", type=int, default=0, help="env copy i of every pairing is seeded SEED + i")
    parser.add_argument("--bootstrap", type=int, default=200, help="resamples for the Elo intervals")
    parser.add_argument("--out", default=None, help="output folder (default: crossplay/ beside the first run)")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print the traceback of an error (or MARL_DEBUG=1)")
    opts = parser.parse_args(argv)
    if opts.games < 1:
        raise ConfigError(f"--games must be at least 1, got {opts.games}")
    members, taken = {}, set()
    for path in runs_with_checkpoints(opts.runs):
        name = league.member_name(path, taken)
        taken.add(name)
        members[name] = path
    if opts.random:
        members[league.RANDOM] = league.RANDOM
    for name in opts.scripted:
        members[name] = league.SCRIPTED + name
    with signals_to(_stop_now):
        table = league.crossplay(members, opts.games, opts.seed)  # checks the runs before it plays
    out = opts.out or os.path.join(os.path.dirname(os.path.abspath(runs_with_checkpoints(opts.runs)[0])), "crossplay")
    return write_crossplay(table, out, opts.bootstrap, opts.seed)


def write_crossplay(table: dict, out: str, bootstrap: int, seed: int) -> dict:
    """Fit the Elo ratings of a cross-play table, write it to `out` (JSON, CSV, plots), print the ratings."""
    from common import league

    ratings = league.elo(table, bootstrap, seed)
    rows = league.summary_rows(table)
    os.makedirs(out, exist_ok=True)
    result = {**table, "pairings": rows, "elo": {k: dict(zip(("rating", "low", "high"), v)) for k, v in ratings.items()}}
    write_json_atomic(os.path.join(out, "crossplay.json"), result)
    write_csv(rows, os.path.join(out, "crossplay.csv"), list(rows[0]))
    write_csv([{"player": k, **v} for k, v in result["elo"].items()], os.path.join(out, "elo.csv"),
              ["player", "rating", "low", "high"])
    plot_crossplay(rows, table["sides"], ratings, out)
    print("\n".join(f"{k:32s} Elo {v[0]:7.1f}  [{v[1]:.1f}, {v[2]:.1f}]"
                    for k, v in sorted(ratings.items(), key=lambda kv: -kv[1][0])))
    print(f"wrote {out}/crossplay.json, crossplay.csv, elo.csv, crossplay.png, elo.png", flush=True)
    return result


def plot_crossplay(rows: Sequence[dict], sides: Sequence[str], ratings: Dict[str, tuple], out: str) -> None:
    """crossplay.png: side 0's score (wins + draws / 2) per pairing; elo.png: ratings and intervals."""
    first = list(dict.fromkeys(r["side_0"] for r in rows))
    second = list(dict.fromkeys(r["side_1"] for r in rows))
    score = {(r["side_0"], r["side_1"]): r["win"] + r["draw"] / 2 for r in rows}
    fig, ax = new_figure(max(5.0, 2.5 + 0.8 * len(second)), max(4.0, 2.0 + 0.6 * len(first)))
    grid = [[score[(a, b)] for b in second] for a in first]
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdBu")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(second)), second, rotation=45, ha="right")
    ax.set_yticks(range(len(first)), first)
    ax.set_xlabel(f"playing {sides[1]}")
    ax.set_ylabel(f"playing {sides[0]}")
    ax.set_title(f"{sides[0]}'s score: wins + draws / 2", fontsize=10)
    fig.colorbar(image, ax=ax)
    save_figure(fig, os.path.join(out, "crossplay.png"))
    names = sorted(ratings, key=lambda k: ratings[k][0])
    fig, ax = new_figure(6, 0.8 + 0.35 * len(names))
    values = [ratings[k] for k in names]
    ax.errorbar([v[0] for v in values], range(len(names)), fmt="o",
                xerr=[[v[0] - v[1] for v in values], [v[2] - v[0] for v in values]])
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("Elo (mean 1000), 95% bootstrap interval")
    save_figure(fig, os.path.join(out, "elo.png"))


# ============================================================================ league
LEAGUE_FLAGS = ("--total-timesteps", "--share-params", "--train-groups", "--load-group", "--exp-name")


def league_command(argv: List[str]) -> dict:
    """`run.py league`: both sides of an env trained by alternation against frozen snapshots."""
    global STOPPED_BY
    from common import league
    import numpy as np

    STOPPED_BY = None
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="run.py league", description="Train both sides of an env of two (the seats of a turn-based game, or "
        "predators and prey) by alternation: phase k trains the learners of one side (phase 1 the first --side, phase "
        "2 the other, ...), each learner an algorithm file's run of --phase-steps env steps with --share-params group "
        "--train-groups SIDE, starting from its own last run (--load-group SIDE=that run: its weights) and facing an "
        "opponent drawn from the other side's pool of frozen snapshots (--load-group OTHER=that snapshot, any "
        "algorithm's run; or random legal actions). After a phase every learner's run joins its side's pool "
        "(--snapshot-every). The league lives in LEAGUE_DIR/league.json: the same command resumes it after a kill "
        "(a phase's runs resume from their checkpoints, and its opponents are the ones drawn before). At the end "
        "every snapshot plays every snapshot of the other side (run.py crossplay: LEAGUE_DIR/crossplay).",
        epilog="example: python run.py league --env torch:simple_tag --side adversary=mappo,maddpg,qmix "
               "--side agent=mappo,maddpg,qmix --phases 6 --phase-steps 500000 -- --env-kwargs "
               "continuous_actions=false")
    parser.add_argument("--env", required=True)
    parser.add_argument("--side", nargs="+", action="extend", required=True, metavar="SIDE=ALGO[,ALGO...]",
                        help="the learners of each side, e.g. adversary=mappo,qmix agent=maddpg")
    parser.add_argument("--phases", type=int, default=4)
    parser.add_argument("--phase-steps", type=int, default=500_000, help="env steps of each learner in a phase")
    parser.add_argument("--opponents", choices=("uniform", "latest", "prioritised"), default="uniform",
                        help="how a learner's opponent is drawn from the other side's pool: uniformly, the newest "
                             "snapshot, or prioritised by the learner's losses against each (--games episodes each)")
    parser.add_argument("--mix", type=int, default=1, metavar="M",
                        help="opponents each learner faces at once in a phase: M members drawn from the pool (without "
                             "repeats, as --opponents weighs them), the env copies split among them (--load-group "
                             "OTHER=RUN,RUN,...: copy e plays member e mod M). 1: one opponent a phase")
    parser.add_argument("--snapshot-every", type=int, default=1, help="a learner's run joins its side's pool every "
                                                                      "this many of its phases")
    parser.add_argument("--pool", nargs="+", action="extend", default=[], metavar="SIDE=RUN",
                        help="runs (any algorithm) in a side's pool from the start, beside random; RUN may also be "
                             "a scripted player of the game, scripted:NAME (connect four: scripted:win_or_block; "
                             "tic-tac-toe: scripted:perfect)")
    parser.add_argument("--games", type=int, default=100, help="episodes per pairing for --opponents prioritised "
                                                               "and for the final cross-play table")
    parser.add_argument("--bootstrap", type=int, default=200, help="resamples for the Elo intervals")
    parser.add_argument("--seed", type=int, default=1, help="phase k's runs have seed SEED + 100 (k - 1)")
    parser.add_argument("--league-dir", default=None, help="default: runs/league/<env>")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="runs at a time (the learners of a phase train side by side)")
    parser.add_argument("--algo-flags", nargs="+", action="extend", default=[], metavar="ALGO=FLAGS",
                        help="flags for one algorithm's learners only, after those after '--' (which go to every "
                             "learner), e.g. iql='--hidden-dim 32' mappo='--hidden-sizes 32 32'")
    parser.add_argument("--dry-run", action="store_true", help="check the sides, the pool and every learner's flags, "
                                                                 "say what phase 1 would run; run and write nothing")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print tracebacks (or MARL_DEBUG=1)")
    opts = parser.parse_args(own)
    for name in ("phases", "phase_steps", "snapshot_every", "games", "mix"):
        if getattr(opts, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for algo in (a for entry in opts.side for a in entry.partition("=")[2].split(",") if a):
        if algo not in ALGOS:
            raise ConfigError(f"unknown algorithm {algo!r} in --side{did_you_mean(algo, ALGOS)}; accepted: "
                              f"{', '.join(ALGOS)}")
    sides = league.league_sides(opts.side, opts.env)  # the env's two sides, each given its learners
    own_flags: Dict[str, List[str]] = {}
    for pair in opts.algo_flags:
        algo, sep, flags = pair.partition("=")
        if not sep or algo not in {a for algos in sides.values() for a in algos}:
            raise ConfigError(f"--algo-flags takes ALGO=FLAGS for a learner of the league "
                              f"({', '.join(dict.fromkeys(a for algos in sides.values() for a in algos))}), got {pair!r}")
        own_flags[algo] = own_flags.get(algo, []) + shlex.split(flags)
    for flag in (*PER_RUN_FLAGS, *LEAGUE_FLAGS):
        if any(a == flag or a.startswith(flag + "=") for a in [*extra, *itertools.chain(*own_flags.values())]):
            parser.error(f"{flag} is set by the league for every run; give the league's options before '--'")
    folder = opts.league_dir or os.path.join("runs", "league", safe_name(opts.env))
    names = list(sides)
    settings = {"env": opts.env, "sides": sides, "phase_steps": opts.phase_steps, "opponents": opts.opponents,
                "snapshot_every": opts.snapshot_every, "seed": opts.seed, "extra": extra, "algo_flags": own_flags,
                **({"mix": opts.mix} if opts.mix > 1 else {})}
    played = {}  # every learner's Args, checked now; all of them must play one env
    for algo in dict.fromkeys(a for algos in sides.values() for a in algos):
        module = importlib.import_module(f"algos.{algo}")
        job = make_job(module, algo, opts.env, opts.seed, {}, [*extra, *own_flags.get(algo, []), "--total-timesteps",
                                                               str(opts.phase_steps), "--share-params", "group"], folder)
        switch = getattr(module, "with_continuous_actions", lambda env, pairs: tuple(pairs))  # continuous-control files
        played[algo] = tuple(sorted(switch(opts.env, job.resolved["env_kwargs"])))
    if len(set(played.values())) > 1:
        raise ConfigError("the learners would play different envs: " + "; ".join(
            f"{a} with --env-kwargs {' '.join(k) or '(none)'}" for a, k in played.items()) + " (continuous-control "
            "files switch continuous_actions on by default); give the env's arguments after '--' for all of them, "
            "e.g. -- --env-kwargs continuous_actions=false")
    env_kwargs = next(iter(played.values()))  # what every learner plays, and so every match of the league
    seeded: Dict[str, List[str]] = {}
    for pair in opts.pool:
        side, _, path = pair.partition("=")
        if side not in sides or not path:
            raise ConfigError(f"--pool takes SIDE=RUN with SIDE one of {', '.join(sides)}, got {pair!r}")
        if path.startswith(league.SCRIPTED):  # a scripted player of the game: any side, no run to check
            league.scripted_player(path, opts.env)
            seeded.setdefault(side, []).append(path)
            continue
        learned = league.run_sides(path)
        if (learned["env"], learned["env_kwargs"]) != (opts.env, env_kwargs) or side not in learned["sides"]:
            raise ConfigError(f"--pool {pair}: that run played {learned['env']} with --env-kwargs "
                              f"{' '.join(learned['env_kwargs']) or '(none)'} and learned {learned['sides']}; the "
                              f"league plays {opts.env} with {' '.join(env_kwargs) or '(none)'}")
        seeded.setdefault(side, []).append(path)
    state_path = os.path.join(folder, "league.json")
    state = league.open_league(state_path, settings, seeded)
    if opts.dry_run:
        done = sum(p["done"] for p in state["phases"])
        print(f"league in {folder}: {done} of {opts.phases} phases done; sides "
              + "; ".join(f"{side}: {', '.join(algos)}" for side, algos in sides.items())
              + f"; phase {done + 1} would train {names[done % 2]} against the {names[(done + 1) % 2]} pool ("
              + ", ".join(m["name"] for m in state["pool"][names[(done + 1) % 2]]) + ")")
        return {}
    for k in range(1, opts.phases + 1):
        if k <= len(state["phases"]) and state["phases"][k - 1]["done"]:
            continue
        side = names[(k - 1) % 2]
        other = names[k % 2]
        if k > len(state["phases"]):  # draw this phase's opponents once, so a resumed phase faces the same
            plan = []
            for j, algo in enumerate(sides[side]):
                start, pool = state["last"].get(f"{side}/{algo}"), state["pool"][other]
                with signals_to(_stop_now):
                    scores = (league.learner_scores(opts.env, env_kwargs, names, side, start, pool, opts.games,
                                                    opts.seed) if opts.opponents == "prioritised" and start
                              else [0.5] * len(pool))
                weights = league.opponent_weights(scores, opts.opponents)
                picks = np.random.default_rng([opts.seed, k, j]).choice(
                    len(pool), size=min(opts.mix, int(np.count_nonzero(weights))), replace=False, p=weights)
                plan.append({"algo": algo, "start": start, "opponent": "+".join(pool[i]["name"] for i in picks),
                             "opponent_path": ",".join(pool[i]["path"] for i in picks)})
            state["phases"].append({"phase": k, "side": side, "plan": plan, "done": False})
            write_json_atomic(state_path, state)
        phase = state["phases"][k - 1]
        print(f"phase {k}/{opts.phases}: {side} learns: " + ", ".join(
            f"{p['algo']} (from {'scratch' if not p['start'] else 'its last run'}) against {p['opponent']}"
            for p in phase["plan"]), flush=True)
        jobs = []
        for p in phase["plan"]:
            loads = [*([f"{side}={p['start']}"] if p["start"] else []), f"{other}={p['opponent_path']}"]
            flags = [*extra, *own_flags.get(p["algo"], []), "--total-timesteps", str(opts.phase_steps), "--share-params",
                     "group", "--train-groups", side, "--exp-name", p["algo"], "--load-group", *loads]
            module = importlib.import_module(f"algos.{p['algo']}")
            jobs.append(make_job(module, p["algo"], opts.env, opts.seed + 100 * (k - 1), {}, flags,
                                 os.path.join(folder, f"phase_{k:02d}")))
        jobs = check_saved(jobs)
        summaries, tasks = finished_and_tasks(jobs)
        ended = {i: ("diverged", read_summary(j.path), None) for i, j in enumerate(jobs) if j.status == "diverged"}
        run_local(tasks, opts.workers, result_recorder(summaries, ended))
        if STOPPED_BY is not None:
            raise stopped(jobs, summaries, ended, ["league", *argv], folder, False)
        if ended:
            raise RunStopped(f"error: phase {k} of the league did not finish:\n" + "\n".join(
                "  " + outcome_line(jobs[i], *e) for i, e in ended.items()) + f"\nthe same command retries phase {k} "
                "(delete a diverged run's folder first, or change its settings with --algo-flags)", folder)
        for i, p in enumerate(phase["plan"]):
            p["run"] = summaries[i]["run_dir"]
            state["last"][f"{side}/{p['algo']}"] = p["run"]
            if (k + 1) // 2 % opts.snapshot_every == 0:  # the learner's (k + 1) // 2-th phase
                state["pool"][side].append({"name": f"{p['algo']}@{k}", "path": p["run"], "phase": k})
        phase["done"] = True
        write_json_atomic(state_path, state)
    members = {m["name"]: m["path"] for side in names for m in state["pool"][side]}
    for phase in state["phases"]:  # every learner's last run plays too, snapshot or not (--snapshot-every)
        for p in phase["plan"]:
            if p.get("run") == state["last"].get(f"{phase['side']}/{p['algo']}") and p["run"] not in members.values():
                members[f"{p['algo']}@{phase['phase']}"] = p["run"]
    with signals_to(_stop_now):
        table = league.crossplay(members, opts.games, opts.seed)
    result = write_crossplay(table, os.path.join(folder, "crossplay"), opts.bootstrap, opts.seed)
    plot_league_elo(result["elo"], names, os.path.join(folder, "crossplay", "league_elo.png"))
    return {"league": state, "crossplay": result}


def plot_league_elo(elo: Dict[str, dict], sides: Sequence[str], path: str) -> str:
    """Elo of every learner's snapshots against the phase that made them (`algo@phase/side`), with
    intervals; random as a grey line per side."""
    import numpy as np

    fig, ax = new_figure(7, 4)
    for side, style in zip(sides, ("-", "--")):
        lines: Dict[str, list] = {}
        for player, r in elo.items():
            name, _, played = player.rpartition("/")
            if played == side and "@" in name:
                algo, _, phase = name.rpartition("@")
                lines.setdefault(algo, []).append((int(phase), r["rating"], r["low"], r["high"]))
        for algo, points in sorted(lines.items()):
            points.sort()
            x, y, low, high = zip(*points)
            ax.errorbar(x, y, yerr=[np.subtract(y, low), np.subtract(high, y)], linestyle=style, marker="o",
                        capsize=3, label=f"{algo} ({side})")
        if f"random/{side}" in elo:
            ax.axhline(elo[f"random/{side}"]["rating"], color="grey", linestyle=style, linewidth=0.8,
                       label=f"random ({side})")
    ax.set_xlabel("phase that made the snapshot")
    ax.set_ylabel("Elo (mean 1000), 95% interval")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


# ============================================================================ export
def export(argv: List[str]) -> dict:
    """`run.py export RUNS --out FILE`: the runs' evaluations in marl-eval's JSON layout."""
    parser = argparse.ArgumentParser(
        prog="run.py export", description="Write the runs under RUNS in the JSON layout of marl-eval (environment -> "
        "task -> algorithm -> run_<seed> -> step_<k> with every evaluation episode's return, and absolute_metrics: "
        "the final evaluation's), which BenchMARL and Mava also write, so their comparison tools read our runs. "
        "Diverged runs are left out; the latest folder of each seed counts.")
    parser.add_argument("runs", nargs="+", help="folders holding runs, at any depth")
    parser.add_argument("--format", choices=["marl-eval"], default="marl-eval", help="the layout written")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print the traceback of an error (or MARL_DEBUG=1)")
    opts = parser.parse_args(argv)
    missing = [root for root in opts.runs if not os.path.isdir(root)]
    if missing:
        raise ConfigError(f"no such folder: {', '.join(missing)} (run.py export reads the run folders under RUNS)")
    records = [r for r in latest_per_seed([read_run(p) for root in opts.runs for p in find_runs(root)])
               if r["status"] != "diverged"]
    if not records:
        raise ConfigError(f"no runs (folders holding args.json) under {', '.join(opts.runs)}")
    data = marl_eval_layout(records)
    write_json_atomic(opts.out, data)
    print(f"wrote {len(records)} runs ({', '.join(sorted({r['label'] for r in records}))}) to {opts.out}")
    return data


# ============================================================================ tune
def tune(argv: List[str]) -> dict:
    """`run.py tune --algo A --env E --space ... [-- algorithm flags]`: an Optuna search whose
    every trial is one grid point of SEEDS runs (launched as a grid is); writes the best point as
    a preset."""
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="run.py tune", formatter_class=argparse.RawDescriptionHelpFormatter, description=(
            "Search an algorithm's settings on one env with Optuna (TPE sampler, median pruning on the evaluation "
            "curve). Every trial runs SEEDS seeds of one point of the space, as `run.py` runs a grid point (the "
            "same --workers pool or --backend ray, run folders under STUDY/runs); its value is the mean over "
            "seeds of the objective. The study lives in STUDY/study.journal: the same command resumes it (a trial "
            "cut short is run again, its runs resuming from their checkpoints), a larger --trials extends it. "
            "At the end the best point is written as a preset (a YAML of Args fields with a header saying how it "
            "was found).\n\n" + tuning.__doc__.split("\n\n", 1)[1]))
    parser.add_argument("--algo", required=True, choices=ALGOS, metavar="ALGO", help="the algorithm file to tune")
    parser.add_argument("--env", required=True, help="the env to tune on")
    parser.add_argument("--space", nargs="+", default=[], metavar="KEY=SPEC", help=tuning.SPACE_HELP)
    parser.add_argument("--space-file", default=None, help="YAML: Args field -> {low, high, log, step} or a list")
    parser.add_argument("--trials", type=int, default=20, help="trials in the study (completed, pruned or diverged)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS per trial; the value is their mean")
    parser.add_argument("--objective", choices=("final", "mean"), default="final",
                        help="final: the last greedy evaluation's return; mean: the mean of the evaluation curve "
                             "(its area: rewards learning early too)")
    parser.add_argument("--study", default=None, help="folder of the study and its runs (default: "
                                                      "runs/tune/<algo>__<env>)")
    parser.add_argument("--preset", default=None, help="where to write the best settings (default: "
                        "configs/<algo>/<env>.yaml, which must not exist yet)")
    parser.add_argument("--random-trials", type=int, default=5, help="trials sampled at random before TPE models "
                                                                     "the results")
    parser.add_argument("--prune-after", type=float, default=0.25, help="no pruning before this fraction of the "
                        "env steps of a run, nor before 3 trials have completed")
    parser.add_argument("--no-pruning", action="store_true", help="run every trial to the end")
    parser.add_argument("--no-defaults-trial", action="store_true", help="do not start with the defaults' point "
                        "(the file's defaults and the flags after --, when the space holds them)")
    parser.add_argument("--sampler-seed", type=int, default=0, help="seed of the TPE sampler")
    parser.add_argument("--dry-run", action="store_true", help="check the space and the flags, say what would run; "
                                                               "run nothing")
    backend_options(parser)
    parser.add_argument(DEBUG_FLAG, action="store_true", help="print tracebacks (or MARL_DEBUG=1)")
    opts = parser.parse_args(own)
    for flag in PER_RUN_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in extra):
            raise ConfigError(f"{flag} is set by run.py tune per run; give --env and --seeds before '--'")
    if opts.seeds < 1 or opts.trials < 1:
        raise ConfigError("--seeds and --trials must be at least 1")
    try:
        env_arguments(opts.env)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError("run.py tune needs Optuna: pip install -e \".[tune]\" (or pip install optuna==5.0.0)") from None
    module = importlib.import_module(f"algos.{opts.algo}")
    space = tuning.search_space(module.Args, opts.space, opts.space_file, NOT_SWEPT)
    study_dir = opts.study or os.path.join("runs", "tune", safe_name(f"{opts.algo}__{opts.env}"))
    runs_dir = os.path.join(study_dir, "runs")
    base = make_job(module, opts.algo, opts.env, 1, {}, extra, runs_dir)  # checks the flags; the defaults' point
    preset = opts.preset or os.path.join(REPO, "configs", opts.algo, safe_name(opts.env.split(":")[-1]) + ".yaml")
    if opts.preset is None and os.path.exists(preset):
        raise ConfigError(f"{os.path.relpath(preset)} exists already: name the file the best settings go to with "
                          "--preset PATH (it is replaced)")
    budget = base.resolved["total_timesteps"]
    if opts.dry_run:
        print(f"{opts.trials} trials x {opts.seeds} seeds: up to {opts.trials * opts.seeds} runs: {opts.algo} on "
              f"{opts.env}, {budget:,} env steps each, searching {' '.join(d.text() for d in space)}; study in "
              f"{study_dir}, preset to {preset}", flush=True)
        return []
    settings = {"algo": opts.algo, "env": opts.env, "seeds": opts.seeds, "space": [d.text() for d in space],
                "flags": extra, "objective": opts.objective}
    study = tuning.open_study(os.path.join(study_dir, "study.journal"), settings, opts.sampler_seed,
                              opts.random_trials, 3, int(opts.prune_after * budget))
    defaults = {d.name: base.resolved[d.name] for d in space}
    if not opts.no_defaults_trial and not study.trials:
        if all(d.holds(defaults[d.name]) for d in space):
            study.enqueue_trial(defaults, user_attrs={"defaults": True})
        else:
            print("the defaults' point is outside the space: no trial of the defaults", flush=True)
    print(f"tuning {opts.algo} on {opts.env}: {opts.trials} trials of {opts.seeds} seeds x {budget:,} env steps, "
          f"objective: {opts.objective} greedy evaluation return; study in {study_dir}", flush=True)
    while sum(tuning.counted(t) for t in study.get_trials(deepcopy=False)) < opts.trials:
        run_trial(study, module, opts, space, extra, runs_dir, argv)
    lines = tuning.trial_lines(study)
    write_json_atomic(os.path.join(study_dir, "trials.json"), tuning.study_record(study))
    print("\n".join([f"trials ({study_dir}, also in trials.json):"] + lines), flush=True)
    completed = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not completed:
        raise ConfigError("no trial completed (every one was pruned or diverged): no preset written")
    best = study.best_trial
    of_defaults = [t for t in completed if t.user_attrs.get("defaults")]
    header = {"algo": opts.algo, "env": opts.env, "seeds": opts.seeds, "objective": (
        "the final greedy evaluation return" if opts.objective == "final" else "the mean of the evaluation curve"),
        "budget": f"{budget:,} env steps", "space": " ".join(d.text() for d in space), "flags": shlex.join(extra),
        "command": relaunch_command(["tune", *argv]),
        "defaults_trial": of_defaults[0].number if of_defaults else None,
        "defaults_value": f"{of_defaults[0].value:.2f}" if of_defaults else None}
    point = best.user_attrs.get("point", best.params)
    resolved = make_job(module, opts.algo, opts.env, 1, point, extra + point_flags(module.Args, point), runs_dir).resolved
    own = [*module.Args.__annotations__, "eval_every", "eval_episodes"]  # the file's own fields, not the shared ones
    header["shown_path"] = os.path.relpath(preset) if preset.startswith(REPO) else preset
    path = tuning.write_preset(preset, study, header, {k: resolved[k] for k in own})
    print(f"best: trial {best.number}, {best.value:.2f} " + tuning.describe(best.user_attrs.get("point", best.params))
          + (f" (defaults {of_defaults[0].value:.2f})" if of_defaults else "") + f"\nwrote the preset {path}",
          flush=True)
    return {"study": study_dir, "best_value": best.value, "best_params": best.user_attrs.get("point", best.params),
            "preset": path,
            "values": [t.value for t in completed]}


def run_trial(study, module, opts, space, extra: List[str], runs_dir: str, argv: List[str]) -> None:
    """Ask the study for a point, run its seeds (stopping them when the median rule prunes the
    trial), tell the study how it went."""
    trial = study.ask()
    point = tuning.sample(trial, space)
    flags = extra + point_flags(module.Args, point)
    jobs = check_saved([make_job(module, opts.algo, opts.env, seed, point, flags, runs_dir)
                        for seed in range(1, opts.seeds + 1)])
    summaries, tasks = finished_and_tasks(jobs)
    ended: Dict[int, tuple] = {}
    on_result = result_recorder(summaries, ended)
    watch = None if opts.no_pruning else tuning.PruneWatch(trial, lambda: [run_folder(j) for j in jobs],
                                                           opts.objective)
    global STOPPED_BY
    STOPPED_BY = None
    if opts.backend == "ray":
        run_ray(tasks, opts.address, opts.workers, opts.cpus_per_run, opts.gpus_per_run, on_result,
                watch and watch.poll)
    else:  # with pruning a trial's seeds run at once: the median rule compares seed means at one env step
        run_local(tasks, opts.workers if watch is None else max(opts.workers, len(tasks)), on_result,
                  watch and watch.poll)
    described = tuning.describe(point)
    if STOPPED_BY is not None:  # the trial stays "running" in the study: the same command runs it again
        name = signal.Signals(STOPPED_BY).name
        raise RunInterrupted(f"stopped by {name} in trial {trial.number} (its runs saved their checkpoints). The same "
                             f"command resumes the study:\n  {relaunch_command(['tune', *argv])}",
                             runs_dir, STOPPED_BY)
    failed = [(jobs[i], e) for i, e in ended.items() if e[0] == "failed"]
    if failed:  # a bug or a bad setting, not a result: the trial stays "running" and is run again next time
        raise RunStopped("error: " + outcome_line(failed[0][0], "failed", None, failed[0][1][2]), runs_dir)
    diverged = [jobs[i] for i, e in ended.items() if e[0] == "diverged"] + [j for j in jobs if j.status == "diverged"]
    if diverged:
        trial.set_user_attr("diverged", diverged[0].where())
        study.tell(trial, state=tuning.optuna_state("FAIL"))
        print(f"trial {trial.number}: diverged ({diverged[0].where()}) {described}", flush=True)
    elif watch is not None and watch.pruned_at is not None:
        study.tell(trial, state=tuning.optuna_state("PRUNED"))
        print(f"trial {trial.number}: pruned at env step {watch.pruned_at:,} {described}", flush=True)
    else:
        values = [tuning.curve_value(tuning.run_curve(summaries[i]["run_dir"]), opts.objective)
                  for i in range(len(jobs))]
        trial.set_user_attr("per_seed", ", ".join(f"{v:.1f}" for v in values))
        study.tell(trial, sum(values) / len(values))
        best = study.best_trial.number == trial.number
        print(f"trial {trial.number}: {sum(values) / len(values):.2f} (seeds {', '.join(f'{v:.1f}' for v in values)}) "
              f"{described}{'  <- best so far' if best else ''}", flush=True)


def run_folder(job: Job) -> Optional[str]:
    """The folder of a job's run: the one an earlier launch made, else the newest one made for it
    in its parent (None before the run has made it)."""
    if job.path:
        return job.path
    prefix = safe_name(f"{job.label}__{job.env}__{job.seed}__")
    found = glob.glob(os.path.join(glob.escape(job.parent), glob.escape(prefix) + "*"))
    return max(found, key=os.path.getmtime) if found else None


# ============================================================================ entry
def main(argv: Optional[Sequence[str]] = None):
    """`run.py [launch options] [-- algorithm flags]`, `run.py plot ...`, `run.py evaluate ...`,
    `run.py tune ...`, `run.py crossplay ...` or `run.py export ...`.

    Errors end in one message and an exit code (common.cli.report_errors): 2 for a usage error
    (`error: ...`), 1 when runs failed or diverged, 130 / 143 after Ctrl-C / SIGTERM; --debug
    before `--` (or MARL_DEBUG=1) shows tracebacks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in (argv[: argv.index("--")] if "--" in argv else argv)
    command = {"plot": plot, "evaluate": evaluate, "export": export, "tune": tune,
               "crossplay": crossplay_command, "league": league_command}.get(argv[0] if argv else "")
    return report_errors(lambda: command(argv[1:]) if command else launch(argv), debug)


if __name__ == "__main__":
    main()
