"""Command line for every algorithm: its `Args` dataclass parsed by tyro, with YAML presets, and
the one place where errors become messages (`run_cli`).

Precedence: dataclass defaults < `--config preset.yaml` < flags on the command line.
Unknown flags and unknown preset keys are errors that list what is accepted; preset values are
checked against the field types, and counts, rates and discounts against their ranges (`check_args`).

Exit codes of every algorithm file and run.py: 0 finished, 1 the run failed (diverged, or an
unexpected error), 2 a usage error (a bad flag, preset, env name, env argument or checkpoint),
130 / 143 stopped by Ctrl-C / SIGTERM after saving a checkpoint. No traceback is printed
unless `--debug` is given or MARL_DEBUG=1 is set.
"""
import dataclasses
import difflib
import importlib
import math
import os
import signal
import sys
import traceback
import typing
from typing import Any, Callable, List, Optional, Sequence, Type, TypeVar

import tyro
import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A preset or an option combination that cannot be used; the message says what is accepted."""


class RunStopped(Exception):
    """A training run that ended early on purpose, after writing its summary.json; `exit_code` is
    what the command line exits with and `run_path` the run's folder."""

    exit_code = 1

    def __init__(self, message: str, run_path: str):
        super().__init__(message)
        self.run_path = run_path


class RunInterrupted(RunStopped):
    """Ctrl-C (SIGINT) or SIGTERM: the run saved its checkpoint and can be resumed."""

    def __init__(self, message: str, run_path: str, signum: int):
        super().__init__(message, run_path)
        self.exit_code = 128 + signum  # 130 for SIGINT, 143 for SIGTERM, as a shell reports them


class RunDiverged(RunStopped):
    """A loss, gradient norm or parameter went NaN or infinite; the last finite checkpoint is kept."""


class StopNow(KeyboardInterrupt):
    """A signal that stops the process where it is (a second Ctrl-C, or SIGTERM before training
    started): nothing more is saved."""

    def __init__(self, signum: int):
        super().__init__()
        self.signum = signum


def stop_now(signum, frame) -> None:
    """Signal handler: raise StopNow."""
    raise StopNow(signum)


@dataclasses.dataclass
class RunArgs:
    """The run settings every algorithm file shares: each file's `Args` subclasses this and adds
    its own (the env, its length, the method's settings). This is the contract between an
    algorithm file and `common/run_utils.py`, which reads these fields by name."""

    exp_name: Optional[str] = None
    """run-name prefix (default: the algorithm's name)"""
    seed: int = 1
    """seed of python, numpy, torch; env copy i is seeded with seed + i"""
    torch_deterministic: bool = True
    """ask cuDNN for deterministic kernels"""
    cuda: bool = True
    """run the networks (acting, update, evaluation) on the GPU when one is present; PettingZoo envs step on the
    CPU, torch: envs on the GPU too"""
    torch_threads: int = 1
    """CPU threads for torch; the networks are small, and 1 thread leaves a core for the env"""
    env_workers: int = 1
    """processes that step the training env's copies, num_envs / env_workers each, with the same trajectories as
    one (Python-stepped families: mpe2, lbf, rware, mamujoco, sisl, butterfly, magent2, classic; envs/workers.py)"""
    run_dir: str = "runs"
    """each run writes <run_dir>/<run_name>/: TensorBoard logs, args.json, checkpoint.pt, summary.json"""
    eval_every: int = 100_000
    """greedy evaluation every this many env steps (0 disables it; a final one always runs)"""
    eval_episodes: int = 100
    """episodes per greedy evaluation"""
    eval_num_envs: int = 10
    """env copies used only for evaluation (seeded seed + 10_000 + i)"""
    checkpoint_every: int = 500_000
    """save <run_dir>/<run_name>/checkpoint.pt (networks, optimisers, the replay of off-policy files) every this many
    env steps, and when Ctrl-C or SIGTERM stops the run (0: only then and at the end)"""
    resume: Optional[str] = None
    """continue a stopped run from its folder or checkpoint.pt (flags given with it override its saved settings); a
    torch: run goes on bitwise, a PettingZoo or VMAS one starts new episodes in every env copy, env RNG reseeded"""
    evaluate_checkpoint: Optional[str] = None
    """do not train: load this run folder or checkpoint, run --eval-episodes greedy episodes, print returns"""
    render_gif: Optional[str] = None
    """with --evaluate-checkpoint: also save one episode as a GIF at this path"""
    config: Optional[str] = None
    """YAML preset of Args fields (defaults < preset < command line); unknown keys are errors"""
    track: bool = False
    """also log the run to Weights & Biases (pip install -e ".[track]"): its scalars, its args as the run config, an
    --evaluate-checkpoint's return and --render-gif; W&B's files stay in the run folder (WANDB_MODE=offline: no
    network). A resumed run is tracked only when its own command line says --track"""
    wandb_project_name: str = "marl-clean"
    """the W&B project of --track (a tracked run keeps its own when it is resumed or evaluated)"""
    wandb_entity: Optional[str] = None
    """the W&B team or user of --track (None: your W&B default entity)"""


def field_names(cls) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def load_preset(cls: Type[T], path: str) -> dict:
    """Read a YAML preset (safe_load: a downloaded file cannot run code), check its keys and the
    type of every value against the field it sets."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ConfigError(f"config {path} is not valid YAML{line}: {getattr(err, 'problem', None) or err}; "
                          "a preset is a mapping of Args fields to values, e.g. 'learning_rate: 0.001'") from None
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path!r} must be a mapping of Args fields to values, got {type(data).__name__}")
    names = field_names(cls)
    preset = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            raise ConfigError(f"unknown config key {key!r} in {path}{did_you_mean(name, names)}; "
                              f"accepted keys: {', '.join(names)}")
        preset[name] = checked_value(cls, name, value, f"config key {key!r} in {path}")
    return preset


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or '' when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=3)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


# Values that older presets and checkpoints hold, as today's fields take them.
RENAMED_VALUES = {"share_params": {True: "all", False: "none"}}
# Fields added after runs were saved whose default is not how those runs behaved: a checkpoint without
# the field gets this value (MAT always had the observation LayerNorm before --obs-layernorm existed).
BEFORE_THE_FIELD = {"obs_layernorm": True}


def upgraded(name: str, value: Any) -> Any:
    """An old value of field `name` as the field takes it now (`share_params: true` -> "all")."""
    return RENAMED_VALUES[name][value] if name in RENAMED_VALUES and isinstance(value, bool) else value


def checked_value(cls, name: str, value: Any, where: str) -> Any:
    """`value` for field `name` of `cls`, converted where YAML is loose (lists for tuples, '1e-3'
    for a float); a value of the wrong type is a ConfigError naming `where` and the type accepted."""
    value = upgraded(name, value)
    try:
        return _as_type(value, typing.get_type_hints(cls)[name])
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {value!r} is not {err}") from None


def _as_type(value: Any, tp: Any) -> Any:
    origin, targs = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        if value is None and type(None) in targs:
            return None
        return _as_type(value, next(t for t in targs if t is not type(None)))
    if origin is typing.Literal:
        if value in targs:
            return value
        raise ValueError(f"one of {', '.join(map(repr, targs))}{did_you_mean(str(value), [str(t) for t in targs])}")
    if origin is tuple:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if targs[-1:] == (Ellipsis,):
            return tuple(_as_type(v, targs[0]) for v in items)
        if len(items) != len(targs):
            raise ValueError(f"a list of {len(targs)} values")
        return tuple(_as_type(v, t) for v, t in zip(items, targs))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # 1e6 written in YAML
            return int(value)
        raise ValueError("an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:  # YAML 1.1 reads 1e-3 (no dot) as text
            return float(value) if isinstance(value, str) else _fail("a number")
        except ValueError:
            raise ValueError("a number") from None
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError("text")
    return value


def _fail(what: str):
    raise ValueError(what)


# Ranges of the fields that many algorithm files share: field -> (accepted?, what is accepted).
# check_args applies the ones an Args has; a file's own validate() checks the rest.
_AT_LEAST_1 = (lambda v: v >= 1, "at least 1")
_NOT_NEGATIVE = (lambda v: v >= 0, "0 or more")
_POSITIVE = (lambda v: v > 0 and math.isfinite(v), "a positive number")
_UNIT = (lambda v: 0 <= v <= 1, "between 0 and 1")
RANGES = {
    **{name: _AT_LEAST_1 for name in (
        "total_timesteps", "num_envs", "num_steps", "eval_episodes", "eval_num_envs", "torch_threads", "update_epochs",
        "env_workers",
        "num_minibatches", "batch_size", "buffer_size", "chunk_len", "updates_per_iteration", "target_update_interval",
        "critic_epochs", "critic_minibatches", "cg_iters", "backtrack_iters", "policy_delay",
        "eps_anneal_steps", "hidden_dim", "hypernet_hidden", "mixer_embed_dim", "mixer_hidden", "encoder_dim",
        "attention_heads")},
    **{name: _NOT_NEGATIVE for name in (
        "eval_every", "checkpoint_every", "learning_starts", "lr_decay_steps", "push_every", "ent_coef", "vf_coef",
        "logit_reg",
        "exploration_noise", "policy_noise", "noise_clip", "cg_damping", "alpha")},
    **{name: (lambda v: 0 <= v < math.inf, "0 or more (0 keeps the weights fixed)") for name in (
        "learning_rate", "actor_learning_rate", "critic_learning_rate", "critic_lr", "q_learning_rate",
        "alpha_learning_rate")},
    **{name: _POSITIVE for name in ("max_grad_norm", "clip_coef", "max_kl", "gumbel_temperature")},
    **{name: _UNIT for name in ("gamma", "gae_lambda", "td_lambda", "eps_start", "eps_finish")},
    "tau": (lambda v: 0 < v <= 1, "in (0, 1]: the share of the online weights copied into the target per update"),
    "backtrack_coef": (lambda v: 0 < v < 1, "between 0 and 1 (exclusive)"),
    "hidden_sizes": (lambda v: len(v) >= 1 and min(v) >= 1, "one or more layer widths, each at least 1"),
    "critic_hidden_sizes": (lambda v: len(v) >= 1 and min(v) >= 1, "one or more layer widths, each at least 1"),
}


def factored_actions(args, env):
    """The action factors for nets.Actor's factored head: the env's `action_factors` when the file's
    --factored-actions is on, None when it is off. An env without joint actions to factor, or a graph
    actor (its own head), fails with what is accepted."""
    if not getattr(args, "factored_actions", False):
        return None
    factors = getattr(env, "action_factors", None)
    if factors is None:
        raise ConfigError(f"--factored-actions: {args.env} has no joint discrete actions to factor; the torch port "
                          "says where every agent picks a (move, word) pair (torch:simple_reference)")
    if getattr(args, "actor_model", "mlp") != "mlp":
        raise ConfigError("--factored-actions builds the MLP actor's head; drop it or use --actor-model mlp")
    return factors


def check_args(args) -> None:
    """Every shared field of `args` inside its range (RANGES), else a ConfigError naming the flag,
    the value given and what is accepted; --render-gif only with --evaluate-checkpoint; --track only where
    Weights & Biases can be imported."""
    for name, (accepted, what) in RANGES.items():
        value = getattr(args, name, None)
        if value is not None and not accepted(value):
            shown = " ".join(map(str, value)) if isinstance(value, tuple) else value
            raise ConfigError(f"--{name.replace('_', '-')} must be {what}, got {shown}")
    if getattr(args, "env_workers", 1) > getattr(args, "num_envs", math.inf):
        raise ConfigError(f"--env-workers {args.env_workers} is more than --num-envs {args.num_envs}: each worker "
                          "steps at least one env copy")
    if getattr(args, "render_gif", None) and not getattr(args, "evaluate_checkpoint", None):
        raise ConfigError("--render-gif needs --evaluate-checkpoint")
    if getattr(args, "track", False):
        require_wandb()


def require_wandb() -> None:
    """A ConfigError saying how to install Weights & Biases when `--track` asks for it and it cannot be imported."""
    try:
        importlib.import_module("wandb")  # now, so that a run without it stops before its folder is made
    except ImportError as err:
        raise ConfigError(f"--track needs Weights & Biases, which cannot be imported ({err}): "
                          'pip install -e ".[track]"') from None


def _flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def resumed_args(cls: Type[T], path: str) -> dict:
    """The Args a run was started with, read from its checkpoint (a run folder or checkpoint.pt).

    Resuming continues *that* run: its saved settings come back underneath whatever the new
    command line sets explicitly (e.g. a larger --total-timesteps to train longer). A checkpoint
    whose settings do not fit this file's Args (another algorithm's run) is refused, naming it.
    """
    from common.run_utils import load_checkpoint  # torch is only needed when resuming

    ckpt = load_checkpoint(path)
    refused = ConfigError(f"--resume {path} holds a {ckpt['algo']} run on {ckpt['args'].get('env')}, which this file "
                          f"cannot continue: resume it with python algos/{ckpt['algo']}.py --resume {path}")
    if set(ckpt["args"]) - set(field_names(cls)):  # settings this file does not have: another algorithm's run
        raise refused
    try:
        return {k: checked_value(cls, k, v, "") for k, v in saved_args(cls, ckpt["args"]).items()}
    except ConfigError:
        raise refused from None


def saved_args(cls: Type[T], saved: dict) -> dict:
    """A checkpoint's saved args (plain values, lists for tuples) as Args fields; a field the run
    predates takes the value it behaved as (BEFORE_THE_FIELD)."""
    names = field_names(cls)
    older = {k: v for k, v in BEFORE_THE_FIELD.items() if k in names and k not in saved}
    return {**older, **{k: tuple(v) if isinstance(v, list) else upgraded(k, v) for k, v in saved.items() if k in names}}


def _base(cls: Type[T], config: Optional[str], resume: Optional[str]) -> dict:
    """defaults < preset < resumed run's saved args (but NOT_RESUMED), as a dict of Args fields."""
    base = load_preset(cls, config) if config else {}
    if resume:
        base.update({k: v for k, v in resumed_args(cls, resume).items() if k not in NOT_RESUMED})
        base["resume"] = resume
    return base


# Saved settings a resumed run does not take back: whether a process logs to W&B is its own command line's choice.
NOT_RESUMED = ("track",)


def parse_args(cls: Type[T], argv: Optional[Sequence[str]] = None, description: Optional[str] = None) -> T:
    """Parse the command line into `cls`: defaults < `--config` preset < the saved args of a
    `--resume`d run < flags given on the command line; then `check_args`. Errors raise
    (ConfigError, or SystemExit(2) from tyro for a bad flag); `run_cli` turns them into messages."""
    argv = list(sys.argv[1:] if argv is None else argv)
    base = _base(cls, _flag_value(argv, "--config"), _flag_value(argv, "--resume"))
    args = tyro.cli(cls, args=argv, default=dataclasses.replace(cls(), **base), description=description)
    check_args(args)
    return args


def make_args(cls: Type[T], **overrides) -> T:
    """Build Args in code (tests, run.py) with the same layering and checks as the command line,
    rejecting unknown names like the command line does."""
    names = field_names(cls)
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise ConfigError(f"unknown argument(s) {unknown}{did_you_mean(unknown[0], names)}; "
                          f"accepted: {', '.join(names)}")
    base = _base(cls, overrides.get("config"), overrides.get("resume"))
    args = dataclasses.replace(cls(), **{**base, **overrides})
    check_args(args)
    return args


# ----------------------------------------------------------------------------- errors as messages
DEBUG_FLAG = "--debug"


def usage_errors() -> tuple:
    """The exception types that mean the user asked for something that cannot be done (exit 2):
    bad settings, env names or arguments, and files that are missing or unusable."""
    from envs import EnvError  # the env layer's own "what you asked for does not exist"

    return (ConfigError, EnvError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
            PermissionError)


def debugging(flag: bool = False) -> bool:
    """Whether tracebacks are wanted: --debug on the command line (`flag`), or MARL_DEBUG=1."""
    return flag or os.environ.get("MARL_DEBUG", "") not in ("", "0")


def report_errors(fn: Callable[[], Any], debug: bool = False) -> Any:
    """Run `fn()`; turn what it raises into one message on stderr and an exit code, no traceback
    (unless `debug`, or MARL_DEBUG=1): usage errors exit 2, a stopped run (interrupted: 130/143,
    diverged: 1) prints what it saved, an unexpected error exits 1 naming where it happened."""
    debug = debugging(debug)
    try:
        return fn()
    except SystemExit:
        raise
    except RunStopped as err:
        print(str(err), file=sys.stderr, flush=True)
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt as err:  # a second Ctrl-C, or a signal before training started
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"\nstopped by {signal.Signals(signum).name}: nothing more was saved; a run's last checkpoint.pt, if any, "
              "is kept", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None
    except Exception as err:
        if debug:
            traceback.print_exc()
        if isinstance(err, (*usage_errors(), OSError)):  # a usage error, or the disk / file system refused
            text = f"{err.strerror}: {err.filename}" if isinstance(err, OSError) and err.filename else str(err)
            print(f"error: {text}", file=sys.stderr, flush=True)
            raise SystemExit(2 if isinstance(err, usage_errors()) else 1) from None
        print(f"error: {type(err).__name__}: {err}\n  (unexpected, at {where_raised(err)}; run again with {DEBUG_FLAG} or "
              "MARL_DEBUG=1 for the traceback)", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def where_raised(err: Exception) -> str:
    """'algos/mappo.py:412 in main': the deepest frame of the traceback inside this repository."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(repo + os.sep) and ".venv" not in f.filename]
    frame = (ours or frames)[-1]
    return f"{os.path.relpath(frame.filename, repo)}:{frame.lineno} in {frame.name}"


def run_cli(cls: Type[T], main: Callable[[T], Any], description: Optional[str] = None,
            argv: Optional[Sequence[str]] = None) -> None:
    """The entry point of every algorithm file: parse the command line into `cls`, run `main`,
    and turn any error into one clear message and an exit code (`report_errors`). `--debug`
    anywhere on the command line shows tracebacks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv
    argv = [a for a in argv if a != DEBUG_FLAG]
    description = (description or "") + (f"\n\nErrors print one message; {DEBUG_FLAG} (or MARL_DEBUG=1) shows the "
                                          "traceback. Ctrl-C or SIGTERM saves a checkpoint and prints the --resume "
                                          "command.")
    signal.signal(signal.SIGTERM, stop_now)  # until training starts, where RunRecorder makes it save first
    report_errors(lambda: main(parse_args(cls, argv, description)), debug)
