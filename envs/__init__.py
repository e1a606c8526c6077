"""Environment registry: short names -> batched adapters with one shape for every family.

    from envs import make_env
    env = make_env("simple_spread", num_envs=16, seed=1, env_kwargs={"N": 5})

Names: every mpe2 scenario by its bare name (`simple_spread`), its versioned name
(`simple_spread_v3`) or with the family prefix (`mpe2:simple_spread`). The batched torch port
of a scenario (envs/torch_mpe.py: same dynamics, tensors on the CPU or the GPU, 10-100x the
throughput) is selected with the `torch:` prefix (`torch:simple_spread`).

Other families by prefix (their packages are optional; docs/envs.md has the install lines):
`lbf:<gymnasium id>` (`lbf:Foraging-8x8-2p-3f-v3`), `rware:<gymnasium id>`
(`rware:rware-tiny-2ag-v2`), `vmas:<scenario>` (`vmas:balance`, batched in torch on `device`)
and `mamujoco:<scenario>-<agent_conf>` (`mamujoco:HalfCheetah-2x3`); `jaxmarl:<id>` runs a JaxMARL env
(`jaxmarl:MPE_simple_spread_v3`, `jaxmarl:smax_3m`: SMAX against its heuristic enemy), vectorised in JAX.
Other PettingZoo families go by `family:scenario` (`sisl:pursuit`, `butterfly:pistonball`,
`magent2:battle`, or with the module's version, `sisl:pursuit_v5`); their packages are optional
and a missing one fails with the pip line that installs it (`PZ_FAMILIES`).

Every mistake in a name or a scenario argument (an unknown name or argument, a value of the wrong
type or out of range, a missing package) raises `EnvError` before any env is built, with the
closest accepted spelling first ("did you mean 'simple_spread'?") and then what is accepted.
"""
import importlib
import inspect
from functools import partial
from typing import Any, Dict, Optional, Sequence, Tuple

from envs.errors import LIST_ENVS, EnvError, EnvPackageMissing, check_arguments, did_you_mean
from envs.pettingzoo_vec import PettingZooVecEnv, VecStep
from envs.matrix_game import PAYOFFS, MatrixGame
from envs.torch_mpe import TORCH_SCENARIOS, TorchMPE, make_torch_mpe, ported_kwargs
from envs import gym_multiagent, jaxmarl_vec, mamujoco, torch_connect_four, torch_mpe, torch_smax, vmas_vec
from envs.pz_families import PZ_FAMILIES, family_arguments, family_names, family_parallel_env, make_family_env, split_family

TORCH_PREFIX = "torch:"
SMAX_PREFIX = "torch:smax_"  # the torch port of JaxMARL's SMAX: torch:smax_3m, torch:smax_2s3z, ...
CONNECT_FOUR = "torch:connect_four"  # the torch port of PettingZoo's classic:connect_four (turn-based)

# bare name -> mpe2 module. Every scenario mpe2 1.1 ships.
MPE2_SCENARIOS = {
    "simple": "simple_v3",
    "simple_adversary": "simple_adversary_v3",
    "simple_crypto": "simple_crypto_v3",
    "simple_push": "simple_push_v3",
    "simple_reference": "simple_reference_v3",
    "simple_speaker_listener": "simple_speaker_listener_v4",
    "simple_spread": "simple_spread_v3",
    "simple_tag": "simple_tag_v3",
    "simple_world_comm": "simple_world_comm_v3",
    "simple_formation": "simple_formation_v1",
    "simple_line": "simple_line_v1",
    "collect_treasure": "collect_treasure_v1",
}


# Where each agent's own position and velocity sit in its observation, as (start, end) index
# ranges, for the scenarios whose every agent observes them at the same place (mpe2's
# `observation()`, which the torch port writes in the same order). Graph models use them
# (nets/gnn.py: the "from_pos" topology, relative edge features). Scenarios missing here, or a
# missing key, do not give that feature at one place for every agent.
MPE_AGENT_FEATURES = {
    "simple": {"vel": (0, 2)},  # [self_vel, landmark_rel]
    "simple_push": {"vel": (0, 2)},  # both agents start with self_vel
    "simple_reference": {"vel": (0, 2)},
    "simple_spread": {"vel": (0, 2), "pos": (2, 4)},  # [self_vel, self_pos, landmark_rel, other_rel, comm]
    "simple_tag": {"vel": (0, 2), "pos": (2, 4)},
    "simple_world_comm": {"vel": (0, 2), "pos": (2, 4)},
    "simple_formation": {"vel": (0, 2), "pos": (2, 4)},
    "simple_line": {"vel": (0, 2), "pos": (2, 4)},
    "collect_treasure": {"pos": (0, 2), "vel": (2, 4)},  # position first in this one
}


def agent_feature_slices(name: str) -> Dict[str, Tuple[int, int]]:
    """{"pos": (start, end), "vel": (start, end)} of each agent's own position and velocity in
    the observations of env `name` (mpe2 or torch: spellings alike); a key is absent where the
    env does not report it, and the dict is empty for envs outside MPE."""
    if name in NATIVE_ENVS:
        return {}
    return dict(MPE_AGENT_FEATURES.get(_resolve(_split_torch(name)[1]), {}))


# Small torch-native envs (no PettingZoo twin)
NATIVE_ENVS = {"matrix_game": MatrixGame}

# Bounds of one scenario's arguments beyond envs.errors.LIMITS (those hold for every env):
# registry name -> {argument: (low, high), or the list of accepted values}.
SCENARIO_LIMITS = {
    "matrix_game": {"game": list(PAYOFFS)},
    # MAgent2's own minimum map sides (an AssertionError inside the env otherwise)
    "magent2:adversarial_pursuit": {"map_size": (7, None)}, "magent2:battle": {"map_size": (12, None)},
    "magent2:battlefield": {"map_size": (46, None)}, "magent2:combined_arms": {"map_size": (16, None)},
    "magent2:tiger_deer": {"map_size": (10, None)},
    CONNECT_FOUR: {"board": list(torch_connect_four.BOARDS)},
}

# Families reached by a prefix: prefix -> (arguments(rest), make(rest, num_envs, seed, env_kwargs,
# render_mode, device), an example name), `rest` being the name after the prefix. Each family
# imports its package only when used; a missing package fails with its pip line.
FAMILIES = {
    "lbf": (partial(gym_multiagent.arguments, "lbf"), partial(gym_multiagent.make, "lbf"), "lbf:Foraging-8x8-2p-3f-v3"),
    "rware": (partial(gym_multiagent.arguments, "rware"), partial(gym_multiagent.make, "rware"),
              "rware:rware-tiny-2ag-v2"),
    "vmas": (vmas_vec.arguments, vmas_vec.make, "vmas:balance"),
    "mamujoco": (mamujoco.arguments, mamujoco.make, "mamujoco:HalfCheetah-2x3"),
    "jaxmarl": (jaxmarl_vec.arguments, jaxmarl_vec.make, "jaxmarl:smax_3m"),
}


def _make_smax(map_name: str, num_envs: int, seed: int, env_kwargs, render_mode, device):
    if render_mode is not None:
        raise EnvError(f"{SMAX_PREFIX}{map_name} does not render (it has no drawing code); train on it and render "
                       f"JaxMARL's SMAX instead (jaxmarl:smax_{map_name})")
    return torch_smax.make(map_name, num_envs, seed, env_kwargs, device)


# torch:smax_<map> goes through the family interface, with the map as the name after the prefix
SMAX_FAMILY = (torch_smax.arguments, _make_smax, "torch:smax_3m")


def _make_connect_four(name: str, num_envs: int, seed: int, env_kwargs, render_mode, device):
    if render_mode is not None:  # the port does not draw; PettingZoo's game is the same, move for move
        return make_env("classic:connect_four", num_envs, seed, env_kwargs, render_mode)
    return torch_connect_four.make(name, num_envs, seed, env_kwargs, device)


CONNECT_FOUR_FAMILY = (torch_connect_four.arguments, _make_connect_four, CONNECT_FOUR)


def _family(name: str):
    """'lbf:Foraging-8x8-2p-3f-v3' -> (FAMILIES['lbf'], 'Foraging-8x8-2p-3f-v3'), 'torch:smax_3m' ->
    (SMAX_FAMILY, '3m'); other names -> (None, name)."""
    if name.startswith(SMAX_PREFIX):
        return SMAX_FAMILY, name[len(SMAX_PREFIX):]
    if name == CONNECT_FOUR:
        return CONNECT_FOUR_FAMILY, "connect_four"
    prefix, sep, rest = name.partition(":")
    return (FAMILIES[prefix], rest) if sep and prefix in FAMILIES else (None, name)


def known_envs() -> list:
    """The names to pick from: mpe2 scenarios, their torch ports, the native envs and the PettingZoo
    families' scenarios. The lbf/rware/vmas/mamujoco families have too many to list (FAMILIES
    gives an example of each)."""
    return (sorted(MPE2_SCENARIOS) + sorted(TORCH_PREFIX + name for name in TORCH_SCENARIOS)
            + [SMAX_PREFIX + name for name in torch_smax.MAPS] + [CONNECT_FOUR] + sorted(NATIVE_ENVS) + family_names())


def _split_torch(name: str):
    """'torch:simple_spread_v3' -> (True, 'simple_spread'); other names -> (False, name)."""
    if not name.startswith(TORCH_PREFIX) or name.startswith(SMAX_PREFIX) or name == CONNECT_FOUR:  # as families
        return False, name
    rest = name[len(TORCH_PREFIX):]
    bare = _mpe2_name(rest)
    if bare not in TORCH_SCENARIOS:
        ported = ", ".join(TORCH_PREFIX + n for n in TORCH_SCENARIOS)
        if bare is not None:
            raise EnvError(f"{bare!r} has no torch port yet; ported: {ported} (drop the prefix to run the "
                           "PettingZoo version)")
        raise EnvError(f"unknown env {name!r}; {did_you_mean(rest, TORCH_SCENARIOS, TORCH_PREFIX)}ported: {ported}")
    return True, bare


def _mpe2_name(name: str) -> Optional[str]:
    """The bare mpe2 name of any accepted spelling (simple_spread, simple_spread_v3, mpe2:simple_spread), or None."""
    bare = name.split(":", 1)[1] if name.startswith("mpe2:") or name.startswith("mpe:") else name
    for short, module in MPE2_SCENARIOS.items():
        if bare in (short, module):
            return short
    return None


def _resolve(name: str) -> str:
    """Map any accepted spelling to the bare mpe2 name, or fail saying what is accepted."""
    bare = _mpe2_name(name)
    if bare is None:
        raise _unknown_env(name)
    return bare


def _unknown_env(name: str) -> EnvError:
    """The error for a name that no family takes: the closest accepted name first, then a short
    account of the names (all of them: LIST_ENVS)."""
    prefixes = [*FAMILIES, *PZ_FAMILIES, "torch", "mpe2"]
    prefix, sep, rest = name.partition(":")
    if sep and prefix not in prefixes + ["mpe"]:
        return EnvError(f"unknown env family {prefix + ':'!r} in {name!r}; {did_you_mean(prefix, prefixes, '', sep + rest)}"
                        f"families: {', '.join(p + ':' for p in prefixes)}")
    hint = (did_you_mean(rest, MPE2_SCENARIOS, prefix + sep) if sep
            else did_you_mean(name, [*MPE2_SCENARIOS, *NATIVE_ENVS, *family_names()]))
    if hint:
        return EnvError(f"unknown env {name!r}; {hint}every name: {LIST_ENVS}")
    return EnvError(f"unknown env {name!r}; known envs: {', '.join(MPE2_SCENARIOS)} (mpe2 scenarios, also as "
                    f"simple_spread_v3, mpe2:simple_spread, torch:simple_spread), matrix_game, and by prefix "
                    f"{', '.join(p + ':' for p in prefixes[:-2])} (e.g. {FAMILIES['lbf'][2]}); every name: {LIST_ENVS}")


def env_maker(name: str):
    """The PettingZoo `parallel_env` constructor behind a registry name (a torch port's twin)."""
    if name.startswith(SMAX_PREFIX):
        raise EnvError(f"{name} is a batched torch env with no PettingZoo version; build it with make_env({name!r}, "
                       "num_envs)")
    family = split_family("classic:connect_four" if name == CONNECT_FOUR else name)
    if family is not None:
        return family_parallel_env(*family)
    name = _split_torch(name)[1]
    return importlib.import_module(f"mpe2.{MPE2_SCENARIOS[_resolve(name)]}").parallel_env


def env_arguments(name: str) -> Dict[str, Any]:
    """The scenario arguments an env accepts, with their defaults."""
    family, rest = _family(name)
    if family is not None:
        return family[0](rest)
    if name in NATIVE_ENVS:
        params = inspect.signature(NATIVE_ENVS[name].__init__).parameters
        return {k: p.default for k, p in params.items() if k not in ("self", "num_envs", "seed", "device")}
    family = split_family(name)
    if family is not None:
        return family_arguments(*family)
    is_torch, bare = _split_torch(name)
    if is_torch:
        return torch_mpe.arguments(bare)
    sig = inspect.signature(env_maker(name))
    params = sig.parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        # mpe2's parallel_env(**kwargs) forwards to raw_env; read the real signature there.
        module = importlib.import_module(f"mpe2.{MPE2_SCENARIOS[_resolve(name)]}")
        params = inspect.signature(module.raw_env.__init__).parameters
    return {k: p.default for k, p in params.items()
            if k not in ("self", "render_mode") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def parse_env_kwargs(pairs: Sequence[str]) -> Dict[str, Any]:
    """['N=5', 'continuous_actions=true'] -> {'N': 5, 'continuous_actions': True}. Values are read as
    true/false, none/null, an int, a float, or else kept as a string; make_env checks them."""
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise EnvError(f"env argument {pair!r} is not KEY=VALUE (e.g. N=5 max_cycles=50 continuous_actions=true)")
        low = raw.lower()
        if low in ("true", "false"):
            value: Any = low == "true"
        elif low in ("none", "null"):
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        out[key.strip()] = value
    return out


def with_continuous_actions(name: str, pairs: Sequence[str]) -> Tuple[str, ...]:
    """The KEY=VALUE pairs, plus continuous_actions=true where the env takes that argument and the
    pairs do not set it: the continuous-control files' default (mpe2's own default is discrete).
    Envs without the argument (MaMuJoCo, LBF) are not given it. The files store the result in
    their args, so args.json, evaluation and resume name the env that was trained on."""
    pairs = tuple(pairs)
    if "continuous_actions" in parse_env_kwargs(pairs):
        return pairs
    try:
        accepted = env_arguments(name)
    except EnvError:  # unknown or missing env: make_env says what is wrong
        return pairs
    return pairs + ("continuous_actions=true",) if "continuous_actions" in accepted else pairs


# Envs whose actions are continuous whatever their arguments. Envs with neither an argument that
# switches the action type (_ACTION_SWITCHES) nor an entry here have discrete actions only.
_CONTINUOUS_ONLY = ("mamujoco:", "sisl:multiwalker")
_ACTION_SWITCHES = ("continuous_actions", "continuous")  # mpe2, torch ports, VMAS; pistonball
_CONTINUOUS_ENVS = "mamujoco:HalfCheetah-2x3, vmas:balance, sisl:multiwalker, or an MPE scenario with continuous_actions=true"
_DISCRETE_ENVS = "lbf:Foraging-8x8-2p-3f-v3, rware:rware-tiny-2ag-v2, sisl:pursuit, or an MPE scenario (e.g. simple_spread)"


def _action_hint(name: str, continuous: bool) -> str:
    try:
        accepted = env_arguments(name)
    except EnvError as err:
        return str(err)
    switch = next((k for k in _ACTION_SWITCHES if k in accepted), None)
    if switch is not None:
        return f"pass --env-kwargs {switch}={'true' if continuous else 'false'}"
    if name.startswith(_CONTINUOUS_ONLY):
        return f"{name} has continuous actions only" + ("" if continuous else f"; envs with discrete ones: {_DISCRETE_ENVS}")
    return f"{name} has discrete actions only" + (f"; envs with continuous ones: {_CONTINUOUS_ENVS}" if continuous else "")


def continuous_hint(name: str) -> str:
    """What to do when an algorithm needs continuous actions and env `name` gave discrete ones,
    true for that env: "pass --env-kwargs continuous_actions=true" where the env has that switch,
    else that it has discrete actions only and which envs have continuous ones."""
    return _action_hint(name, continuous=True)


def discrete_hint(name: str) -> str:
    """What to do when an algorithm needs discrete actions and env `name` gave continuous ones:
    "pass --env-kwargs continuous_actions=false" where the env has that switch, else that it has
    continuous actions only and which envs have discrete ones."""
    return _action_hint(name, continuous=False)


def check_env_kwargs(name: str, env_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Raise EnvError unless `name` is a known env and takes every argument in env_kwargs, each of
    its default's type and in range (envs/errors.py); builds nothing. Returns the arguments to build
    it with (a torch port drops the mpe2 arguments it takes only at their default)."""
    env_kwargs = dict(env_kwargs or {})
    is_torch, bare = _split_torch(name)
    if is_torch:
        env_kwargs = ported_kwargs(bare, env_kwargs)
    family = split_family(name)
    canonical = ":".join(family) if family else name
    # VMAS scenarios declare no signature: their defaults (kwargs.pop(name, 5)) are not types
    limits = torch_smax.LIMITS if name.startswith(SMAX_PREFIX) else SCENARIO_LIMITS.get(canonical)
    check_arguments(name, env_kwargs, env_arguments(name), limits, typed=not name.startswith("vmas:"))
    return env_kwargs


def make_env(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
             render_mode: Optional[str] = None, device=None, workers: int = 1):
    """Build E copies of the named env behind the batched adapter.

    env_kwargs are the scenario's own arguments (for mpe2: N, max_cycles, continuous_actions,
    local_ratio, ...), checked first (check_env_kwargs): an unknown name or argument, or a value
    of the wrong type or out of range, raises EnvError before anything is built. `device` places
    a torch port's tensors (the training device, so the whole loop stays there); the PettingZoo
    adapter steps on the CPU and returns numpy arrays whatever it is. Rendering a torch port
    builds its PettingZoo twin (same observations and dynamics), which draws frames. `workers` > 1
    steps the copies of a Python-stepped family in that many processes (envs/workers.py: the same
    trajectories, in parallel).
    """
    if workers != 1:
        if not 1 < workers <= num_envs:
            raise EnvError(f"--env-workers {workers} with --num-envs {num_envs}: each worker steps at least one "
                           f"copy, so give 2 to {num_envs} workers, or 1 for none")
        spec = make_env(name, 1, seed, env_kwargs, render_mode, device)  # checks the name and its arguments
        if not getattr(spec, "python_stepped", False):
            raise EnvError(f"--env-workers steps Python-stepped envs in worker processes; {name} is stepped as "
                           "batched tensors in this process already: leave --env-workers at 1")
        from envs.workers import WorkerVecEnv

        return WorkerVecEnv(name, num_envs, seed, env_kwargs, workers, spec)
    is_torch, bare = _split_torch(name)
    if is_torch and render_mode is not None:  # the port does not draw; its PettingZoo twin has the same dynamics
        name, is_torch = bare, False
    env_kwargs = check_env_kwargs(name, env_kwargs)
    family, rest = _family(name)
    if family is not None:
        return family[1](rest, num_envs, seed, env_kwargs, render_mode, device)
    if name in NATIVE_ENVS:
        return NATIVE_ENVS[name](num_envs, seed, device or "cpu", **env_kwargs)
    family = split_family(name)
    if family is not None:
        return make_family_env(name, family, num_envs, seed, env_kwargs, render_mode)
    if is_torch:
        return make_torch_mpe(bare, num_envs, seed, device or "cpu", **env_kwargs)
    maker = env_maker(name)
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    # mpe2's state() is the concatenation of every agent's observation (simple_env.py);
    # building it from the observations already in hand avoids computing them twice.
    return PettingZooVecEnv(lambda: maker(**env_kwargs), num_envs, seed, state_from_obs=True)


__all__ = ["make_env", "env_maker", "env_arguments", "parse_env_kwargs", "with_continuous_actions", "known_envs",
           "EnvError", "EnvPackageMissing", "check_env_kwargs", "continuous_hint", "discrete_hint", "SCENARIO_LIMITS",
           "agent_feature_slices", "MPE_AGENT_FEATURES",
           "PettingZooVecEnv", "VecStep", "MPE2_SCENARIOS", "TorchMPE", "TORCH_SCENARIOS", "MatrixGame", "PAYOFFS", "NATIVE_ENVS",
           "FAMILIES", "PZ_FAMILIES"]
