"""Command line for every algorithm: its `Args` dataclass parsed by tyro, with YAML presets.

Precedence: dataclass defaults < `--config preset.yaml` < flags on the command line.
Unknown flags and unknown preset keys are errors that list what is accepted.
"""
import dataclasses
import difflib
import sys
from typing import List, Optional, Sequence, Type, TypeVar

import tyro
import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A preset or an option combination that cannot be used; the message says what is accepted."""


def field_names(cls) -> List[str]:
    return [f.name for f in dataclasses.fields(cls)]


def load_preset(cls: Type[T], path: str) -> dict:
    """Read a YAML preset (safe_load: a downloaded file cannot run code) and check its keys."""
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path!r} must be a mapping of Args fields to values, got {type(data).__name__}")
    names = field_names(cls)
    preset = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r} in {path}{hint}; accepted keys: {', '.join(names)}")
        if isinstance(value, list):
            value = tuple(value)
        preset[name] = value
    return preset


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
    command line sets explicitly (e.g. a larger --total-timesteps to train longer).
    """
    from common.run_utils import load_checkpoint  # torch is only needed when resuming

    return saved_args(cls, load_checkpoint(path)["args"])


def saved_args(cls: Type[T], saved: dict) -> dict:
    """A checkpoint's saved args (plain values, lists for tuples) as Args fields."""
    names = field_names(cls)
    return {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in names}


def _base(cls: Type[T], config: Optional[str], resume: Optional[str]) -> dict:
    """defaults < preset < resumed run's saved args, as a dict of Args fields."""
    base = load_preset(cls, config) if config else {}
    if resume:
        base.update(resumed_args(cls, resume))
        base["resume"] = resume
    return base


def parse_args(cls: Type[T], argv: Optional[Sequence[str]] = None, description: Optional[str] = None) -> T:
    """Parse the command line into `cls`: defaults < `--config` preset < the saved args of a
    `--resume`d run < flags given on the command line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        base = _base(cls, _flag_value(argv, "--config"), _flag_value(argv, "--resume"))
    except (ConfigError, OSError) as err:
        sys.exit(f"error: {err}")
    return tyro.cli(cls, args=argv, default=dataclasses.replace(cls(), **base), description=description)


def make_args(cls: Type[T], **overrides) -> T:
    """Build Args in code (tests, run.py) with the same layering as the command line, rejecting
    unknown names like the command line does."""
    names = field_names(cls)
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise ConfigError(f"unknown argument(s) {unknown}; accepted: {', '.join(names)}")
    base = _base(cls, overrides.get("config"), overrides.get("resume"))
    return dataclasses.replace(cls(), **{**base, **overrides})
