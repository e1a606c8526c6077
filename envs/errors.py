"""The one exception for a user's mistake in an env name or env argument, and the checks that raise it.

Every check runs before an env is built, so a typo fails with one line that says what was wrong
and what is accepted, instead of a traceback from deep inside a simulator. The command line
prints such an error as `error: <message>` and exits with status 2.
"""
import difflib
import numbers
import re
from typing import Any, Dict, Iterable, Optional

LIST_ENVS = "python -c 'import envs; print(envs.known_envs())'"


class EnvError(ValueError):
    """A user's mistake in an env name or env argument; the message says what is accepted."""


class EnvPackageMissing(EnvError, ImportError):
    """An env whose optional package is not installed; the message gives the pip line that installs
    it. It is an ImportError too, so code that skips envs whose package is absent still does."""


def did_you_mean(word: str, candidates: Iterable[str], prefix: str = "", suffix: str = "", n: int = 1) -> str:
    """"did you mean 'x'? " for the n candidates closest to `word` (ignoring case), each written as
    prefix + candidate + suffix; "" when none is close."""
    by_lower = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)
    return f"did you mean {' or '.join(repr(prefix + by_lower[c] + suffix) for c in close)}? " if close else ""


# Bounds (low, high) of scenario arguments by name, for every env that takes an argument of that
# name; None is an open end. Below these the envs fail deep inside (simple_spread's N=0 reduces
# an empty array, rware's n_agents=0 indexes an empty list) or have nobody left to play against.
LIMITS = {
    # episode lengths, in steps
    "max_cycles": (1, None), "max_steps": (1, None), "max_episode_steps": (1, None),
    "local_ratio": (0, 1),  # weight of an agent's own reward against the team's
    # mpe2 and its torch ports
    "N": (1, None), "num_good": (1, None), "num_adversaries": (1, None), "num_food": (1, None),
    "num_collectors": (1, None), "num_deposits": (1, None), "num_treasures": (1, None),
    # VMAS, SISL, butterfly, LBF, RWARE
    "n_agents": (1, None), "num_good_agents": (1, None), "n_pursuers": (1, None), "n_evaders": (1, None),
    "n_walkers": (1, None), "n_pistons": (2, None), "players": (1, None), "min_player_level": (1, None),
    "shelf_columns": (3, None), "shelf_rows": (1, None), "column_height": (1, None),
    "image_stride": (1, None),  # the PettingZoo adapter's: keep every image_stride-th pixel
}
# Any other count (`n_...`, `num_...`) is at least 0.
_COUNT = re.compile(r"^(n|num)_|^N$|agents|^max_steps$")
# Arguments whose integer default stands for a real number (a reward of 100, a weight of 1).
_REAL = re.compile(r"reward|penalty|weight|cost")
# None turns these off (no time limit), whatever their default.
_NONE_ALLOWED = {"max_steps"}


def _expected_type(key: str, default: Any, typed: bool) -> Optional[type]:
    """The type a value of `key` must have, read from its default: bool, int, float (any real
    number), str, or None (not checked). typed=False where defaults are not declared types (VMAS
    reads kwargs.pop(name, default) in its source): only flags and counts are checked there."""
    if type(default) is bool:
        return bool
    if _COUNT.search(key) and (type(default) is int or not typed):
        return int
    if type(default) is int and not typed:
        return float  # VMAS writes `mass = 5` where 5.5 is meant as much
    if type(default) is int:
        return float if _REAL.search(key) else int
    if type(default) is float:
        return float
    return str if type(default) is str and typed else None


def _type_error(key: str, value: Any, expected: type, default: Any) -> Optional[str]:
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    wrong = {bool: not isinstance(value, bool), int: not (is_number and isinstance(value, numbers.Integral)),
             float: not is_number, str: not isinstance(value, str)}[expected]
    what = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[expected]
    return f"{key} must be {what} (default {default!r}), got {value!r}" if wrong else None


def _range_error(key: str, value: Any, limit) -> Optional[str]:
    if isinstance(limit, list):
        if value in limit:
            return None
        hint = did_you_mean(value, limit) if isinstance(value, str) else ""
        return f"{key} must be one of {', '.join(map(str, limit))}, got {value!r}" + (f"; {hint.strip()}" if hint else "")
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return None
    low, high = limit
    if (low is None or value >= low) and (high is None or value <= high):  # NaN fails both
        return None
    if high is None:
        return f"{key} must be at least {low}, got {value!r}"
    return f"{key} must be in [{low}, {high}], got {value!r}"


def check_arguments(env: str, kwargs: Dict[str, Any], accepted: Dict[str, Any],
                    limits: Optional[Dict[str, Any]] = None, typed: bool = True) -> None:
    """Raise EnvError unless every argument in `kwargs` is one of `accepted` (name -> default),
    of the default's type (see _expected_type; None is accepted where the default is None) and
    within its bounds: `limits` (name -> (low, high), or a list of the accepted values) over LIMITS."""
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        hint = "".join(did_you_mean(k, accepted) for k in unknown)
        raise EnvError(f"env {env!r} does not take argument(s) {unknown}; {hint}accepted: {', '.join(accepted)}"
                       f" (defaults: envs.env_arguments({env!r}))")
    limits = {**LIMITS, **(limits or {})}
    for key, value in kwargs.items():
        default = accepted[key]
        if value is None and (default is None or key in _NONE_ALLOWED):
            continue
        expected = _expected_type(key, default, typed)
        limit = limits.get(key, (0, None) if _COUNT.search(key) else None)
        problem = ((_type_error(key, value, expected, default) if expected else None)
                   or (_range_error(key, value, limit) if limit else None))
        if problem:
            raise EnvError(f"env {env!r}: {problem}")
