"""The pieces of `run.py tune` that know about Optuna: the search space, the study kept in a file,
the objective read from run folders, median pruning on the evaluation curve, and the preset the
best trial becomes. `run.py tune` launches each trial's seeds as a grid point (same pool or Ray
backend, same run folders, same resume) and asks this module what to run and when to stop.

A search space maps Args fields to what the sampler may pick:

    learning_rate=1e-4:3e-3:log    a float (or int, by the field's type) between two bounds, log-uniform
    clip_coef=0.1:0.3               uniform
    num_minibatches=1,2,4           one of these values

or, in a YAML file, `learning_rate: {low: 1.0e-4, high: 3.0e-3, log: true}` and
`num_minibatches: [1, 2, 4]` (`step: 0.05` makes a range discrete).
"""
import dataclasses
import datetime
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from common.cli import ConfigError
from common.results import eval_episodes
from common.run_utils import atomic_write

OBJECTIVES = ("final", "mean")  # the last evaluation's return, or the mean of the evaluation curve (its area)
SPACE_HELP = "KEY=LOW:HIGH (uniform), KEY=LOW:HIGH:log (log-uniform) or KEY=V1,V2,... (one of these values)"


@dataclasses.dataclass
class Dimension:
    """One searched Args field: a range (`low`, `high`, `log`, `step`) or `choices`."""
    name: str
    kind: str  # "int", "float" or "choice"
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[list] = None

    def suggest(self, trial) -> Any:
        """The value an Optuna trial picks for this field."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, self.choices)
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)

    def holds(self, value: Any) -> bool:
        """Whether `value` (e.g. the field's default) is a point of this dimension."""
        if self.kind == "choice":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value <= self.high:
            return False
        return self.step is None or math.isclose((value - self.low) / self.step, round((value - self.low) / self.step))

    def text(self) -> str:
        if self.kind == "choice":
            return f"{self.name}=" + ",".join(map(str, self.choices))
        return f"{self.name}={self.low:g}:{self.high:g}" + (":log" if self.log else "") + (
            f" (step {self.step:g})" if self.step else "")


def scalar(text: str) -> Any:
    """A command-line value as a number where it reads as one (1e-4 too), else as YAML reads it."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _number(name: str, value: Any, integer: bool) -> float:
    number = scalar(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ConfigError(f"--space {name}: {value!r} is not a number")
    if integer and number != int(number):
        raise ConfigError(f"--space {name}: {value!r} is not an integer ({name} is an int field)")
    return int(number) if integer else float(number)


def dimension(fields: Dict[str, dataclasses.Field], name: str, spec: Any) -> Dimension:
    """One dimension from its command-line text (`LOW:HIGH[:log]`, `V1,V2,...`) or its YAML value
    (a mapping low/high/log/step, or a list), checked against the Args field it searches."""
    if name not in fields:
        raise ConfigError(f"cannot search {name!r}: the algorithm's Args has no such field")
    default = fields[name].default
    if isinstance(spec, str) and ":" in spec and "," not in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
            raise ConfigError(f"--space {name}={spec}: write {SPACE_HELP}")
        spec = {"low": parts[0], "high": parts[1], "log": len(parts) == 3}
    if isinstance(spec, str):
        spec = [scalar(v) for v in spec.split(",")]
    if isinstance(spec, list):
        if not spec:
            raise ConfigError(f"--space {name}: give at least one value")
        if any(isinstance(v, (list, dict)) for v in spec):
            raise ConfigError(f"--space {name}: choices must be numbers, words or booleans (a tuple field's "
                              "value as one string, e.g. '64 64')")
        return Dimension(name, "choice", choices=spec)
    if not isinstance(spec, dict) or not {"low", "high"} <= set(spec) or set(spec) - {"low", "high", "log", "step"}:
        raise ConfigError(f"--space {name}: a range is a mapping with low, high (and log, step), got {spec!r}")
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        raise ConfigError(f"--space {name}: a range needs a numeric field, {name} is "
                          f"{type(default).__name__}; give its values as a list (V1,V2,...)")
    integer = isinstance(default, int)
    low, high = _number(name, spec["low"], integer), _number(name, spec["high"], integer)
    step = _number(name, spec["step"], integer) if spec.get("step") is not None else None
    log = bool(spec.get("log", False))
    if not low < high:
        raise ConfigError(f"--space {name}: low {low:g} must be below high {high:g}")
    if log and (low <= 0 or step is not None):
        raise ConfigError(f"--space {name}: a log range needs low > 0 and no step")
    return Dimension(name, "int" if integer else "float", low, high, log, step)


def search_space(args_cls, specs: Sequence[str], path: Optional[str], not_searched: Sequence[str]) -> List[Dimension]:
    """The dimensions of --space KEY=SPEC ... and of a YAML --space-file (a key given both ways
    takes the command line's)."""
    fields = {f.name: f for f in dataclasses.fields(args_cls)}
    given: Dict[str, Any] = {}
    if path:
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"cannot read the space file {path}: {getattr(err, 'strerror', None) or err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"space file {path!r} must map Args fields to a range or a list of values")
        given.update({str(k).replace("-", "_"): v for k, v in data.items()})
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not value:
            raise ConfigError(f"--space {spec!r}: write {SPACE_HELP}")
        given[key.replace("-", "_")] = value
    if not given:
        raise ConfigError(f"give a search space: --space {SPACE_HELP}, or --space-file FILE.yaml")
    for key in given:
        if key in not_searched:
            raise ConfigError(f"cannot search {key!r}: run.py tune sets it")
    return [dimension(fields, key, value) for key, value in given.items()]


def open_study(path: str, settings: Dict[str, Any], seed: int, random_trials: int, startup_trials: int,
               warmup_steps: int):
    """The Optuna study kept in the file `path` (a journal: resumable, and readable while it is
    written), made or reopened. Its settings (algo, env, space, seeds, flags, objective) are kept
    in it: reopening it with other settings is an error. Trials that a stopped or killed tune left
    running are marked failed, and their settings queued again (their runs then resume)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    study = optuna.create_study(
        storage=JournalStorage(JournalFileBackend(path)), study_name="tune", direction="maximize",
        load_if_exists=True, pruner=optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps))
    # A reopened study draws on from another seed: the same one would repeat the points of the first process.
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials), n_startup_trials=random_trials)
    saved = study.user_attrs.get("settings")
    if saved is None:
        study.set_user_attr("settings", settings)
    elif saved != settings:
        changed = [f"{k} {saved.get(k)!r} -> {settings.get(k)!r}" for k in settings if saved.get(k) != settings[k]]
        raise ConfigError(f"the study {path} was made with other settings ({'; '.join(changed)}); give another "
                          "--study for these, or the same settings to resume it")
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
    return study


def sample(trial, space: Sequence[Dimension]) -> Dict[str, Any]:
    """The trial's point: every dimension's pick, floats to 4 significant digits (short run labels
    and presets; a finer grain would not be measurable); kept in the trial as "point"."""
    point = {d.name: float(f"{v:.4g}") if isinstance(v, float) else v for d in space for v in [d.suggest(trial)]}
    trial.set_user_attr("point", point)
    return point


def optuna_state(name: str):
    """Optuna's TrialState of this name (COMPLETE, PRUNED, FAIL)."""
    import optuna

    return optuna.trial.TrialState[name]


def counted(trial) -> bool:
    """Whether a trial counts towards --trials: it completed, was pruned, or its runs diverged
    (not one that a stop or a crash cut short: that one is run again)."""
    return trial.state.name in ("COMPLETE", "PRUNED") or bool(trial.user_attrs.get("diverged"))


def curve_value(points: Sequence[Tuple[int, float]], objective: str) -> float:
    """The objective of one run's evaluation curve so far: its last point, or the mean of its points."""
    values = [value for _, value in points]
    return float(values[-1] if objective == "final" else np.mean(values))


def run_curve(folder: Optional[str]) -> List[Tuple[int, float]]:
    """[(env step, mean greedy return)] of a run's evaluations so far ([] without a folder)."""
    return [(step, float(np.mean(returns))) for step, returns in eval_episodes(folder)] if folder else []


def seed_mean_curve(curves: Sequence[Sequence[Tuple[int, float]]], objective: str) -> List[Tuple[int, float]]:
    """[(env step, objective so far, mean over seeds)] at every evaluation step that every seed
    has reached: what the pruner compares between trials."""
    if not curves or not all(curves):
        return []
    steps = sorted(set.intersection(*[{s for s, _ in c} for c in curves]))
    return [(step, float(np.mean([curve_value([p for p in c if p[0] <= step], objective) for c in curves])))
            for step in steps]


class PruneWatch:
    """Reports a trial's mean curve over its seeds to Optuna as the runs write their evaluations,
    and says when the median rule prunes it. `folders()` gives the runs' folders (None for one not
    made yet); call it as `poll()` every second or so: True means stop the trial's runs."""

    def __init__(self, trial, folders: Callable[[], List[Optional[str]]], objective: str):
        self.trial, self.folders, self.objective = trial, folders, objective
        self.reported = -1  # the last env step reported
        self.pruned_at: Optional[int] = None

    def poll(self) -> bool:
        if self.pruned_at is not None:
            return True
        for step, value in seed_mean_curve([run_curve(f) for f in self.folders()], self.objective):
            if step > self.reported:
                self.trial.report(value, step)
                self.reported = step
                if self.trial.should_prune():
                    self.pruned_at = step
                    return True
        return False


def trial_lines(study) -> List[str]:
    """One line per counted trial: number, state, value, settings."""
    lines = []
    for t in study.get_trials(deepcopy=False):
        if not counted(t):
            continue
        value = (f"{t.value:.2f}" if t.state.name == "COMPLETE" else "diverged" if t.user_attrs.get("diverged")
                 else f"pruned at env step {max(t.intermediate_values, default=0):,}")
        lines.append(f"  trial {t.number:>3}: {value:<28} " + describe(t.user_attrs.get("point", t.params)))
    return lines


def study_record(study) -> Dict[str, Any]:
    """The study as plain data (its settings, and every trial that counts: number, state, value, point,
    per-seed values, the curve reported to the pruner), for STUDY/trials.json."""
    return {"settings": study.user_attrs.get("settings"), "trials": [
        {"number": t.number, "state": "diverged" if t.user_attrs.get("diverged") else t.state.name.lower(),
         "value": t.value, "point": t.user_attrs.get("point", t.params), "per_seed": t.user_attrs.get("per_seed"),
         "defaults": bool(t.user_attrs.get("defaults")),
         "reported": sorted([int(k), float(v)] for k, v in t.intermediate_values.items())}
        for t in study.get_trials(deepcopy=False) if counted(t)]}


def describe(point: Dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def write_preset(path: str, study, header: Dict[str, str], rest: Dict[str, Any]) -> str:
    """The best trial's settings as a YAML preset (loadable with --config), a comment header
    saying how they were found: its point, then `rest` (the algorithm's other settings as the
    trials ran them, written out so that later changes of the file's defaults leave the preset as
    it was measured); written atomically."""
    best = study.best_trial
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    pruned = sum(t.state.name == "PRUNED" for t in study.get_trials(deepcopy=False))
    values = sorted(t.value for t in done)
    lines = [f"# {header['algo']} on {header['env']}: settings found by `run.py tune` on "
             f"{datetime.date.today().isoformat()}",
             f"# (Optuna TPE, median pruning on the evaluation curve). Objective: {header['objective']},",
             f"# mean over {header['seeds']} seed{'s' if header['seeds'] != 1 else ''}, every run {header['budget']}.",
             f"# Best of {len(done)} completed trials (and {pruned} pruned): trial {best.number}, {best.value:.2f}"
             f"{' (seeds ' + best.user_attrs['per_seed'] + ')' if 'per_seed' in best.user_attrs else ''};",
             f"# median completed trial {float(np.median(values)):.2f}, worst {values[0]:.2f}."
             + (f" The defaults (trial {header['defaults_trial']}): {header['defaults_value']}." if
                header.get("defaults_value") else ""),
             f"# Search space: {header['space']}",
             f"# Every trial ran: {header['flags'] or '(the defaults)'}",
             f"# Found with: {header['command']}",
             f"# Every key is a field of algos/{header['algo']}.py's Args.",
             f"# python algos/{header['algo']}.py --config {header['shown_path']}",
             "", "# the best point of the search"]
    point = dict(best.user_attrs.get("point", best.params))
    text = ("\n".join(lines) + "\n" + yaml.safe_dump(point, sort_keys=False) + "# the other settings, as every trial "
            "ran them\n" + yaml.safe_dump({k: v for k, v in rest.items() if k not in point}, sort_keys=False))
    atomic_write(path, lambda f: f.write(text.encode()))
    return path
