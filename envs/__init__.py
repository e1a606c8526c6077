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
and `mamujoco:<scenario>-<agent_conf>` (`mamujoco:HalfCheetah-2x3`).
Other PettingZoo families go by `family:scenario` (`sisl:pursuit`, `butterfly:pistonball`,
`magent2:battle`, or with the module's version, `sisl:pursuit_v5`); their packages are optional
and a missing one fails with the pip line that installs it (`PZ_FAMILIES`).
"""
import importlib
import inspect
from functools import partial
from typing import Any, Dict, Optional, Sequence, Tuple

from envs.pettingzoo_vec import PettingZooVecEnv, VecStep
from envs.matrix_game import PAYOFFS, MatrixGame
from envs.torch_mpe import TORCH_SCENARIOS, TorchMPE, make_torch_mpe
from envs import gym_multiagent, mamujoco, vmas_vec
from envs.pz_families import PZ_FAMILIES, family_arguments, family_names, family_parallel_env, make_family_env, split_family

TORCH_PREFIX = "torch:"

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

# Families reached by a prefix: prefix -> (arguments(rest), make(rest, num_envs, seed, env_kwargs,
# render_mode, device), an example name), `rest` being the name after the prefix. Each family
# imports its package only when used; a missing package fails with its pip line.
FAMILIES = {
    "lbf": (partial(gym_multiagent.arguments, "lbf"), partial(gym_multiagent.make, "lbf"), "lbf:Foraging-8x8-2p-3f-v3"),
    "rware": (partial(gym_multiagent.arguments, "rware"), partial(gym_multiagent.make, "rware"),
              "rware:rware-tiny-2ag-v2"),
    "vmas": (vmas_vec.arguments, vmas_vec.make, "vmas:balance"),
    "mamujoco": (mamujoco.arguments, mamujoco.make, "mamujoco:HalfCheetah-2x3"),
}


def _family(name: str):
    """'lbf:Foraging-8x8-2p-3f-v3' -> (FAMILIES['lbf'], 'Foraging-8x8-2p-3f-v3'); other names -> (None, name)."""
    prefix, sep, rest = name.partition(":")
    return (FAMILIES[prefix], rest) if sep and prefix in FAMILIES else (None, name)


def known_envs() -> list:
    return (sorted(MPE2_SCENARIOS) + sorted(TORCH_PREFIX + name for name in TORCH_SCENARIOS) + sorted(NATIVE_ENVS)
            + family_names())


def _split_torch(name: str):
    """'torch:simple_spread_v3' -> (True, 'simple_spread'); other names -> (False, name)."""
    if not name.startswith(TORCH_PREFIX):
        return False, name
    bare = _resolve(name[len(TORCH_PREFIX):])
    if bare not in TORCH_SCENARIOS:
        raise ValueError(f"{bare!r} has no torch port yet; ported: "
                         f"{', '.join(TORCH_PREFIX + n for n in sorted(TORCH_SCENARIOS))} "
                         f"(drop the prefix to run the PettingZoo version)")
    return True, bare


def _resolve(name: str) -> str:
    """Map any accepted spelling to the bare mpe2 name, or fail with the list of known names."""
    bare = name.split(":", 1)[1] if name.startswith("mpe2:") or name.startswith("mpe:") else name
    for short, module in MPE2_SCENARIOS.items():
        if bare in (short, module):
            return short
    raise ValueError(f"unknown env {name!r}; known envs: {', '.join(known_envs())} "
                     "(also accepted with a version suffix, e.g. simple_spread_v3, or a 'mpe2:' prefix); "
                     "other families by prefix: " + ", ".join(f"{p}: (e.g. {f[2]})" for p, f in FAMILIES.items()))


def env_maker(name: str):
    """The PettingZoo `parallel_env` constructor behind a registry name (a torch port's twin)."""
    family = split_family(name)
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
        params = inspect.signature(TORCH_SCENARIOS[bare].__init__).parameters
        return {k: p.default for k, p in params.items() if k not in ("self", "num_envs", "seed", "device", "dtype")}
    sig = inspect.signature(env_maker(name))
    params = sig.parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        # mpe2's parallel_env(**kwargs) forwards to raw_env; read the real signature there.
        module = importlib.import_module(f"mpe2.{MPE2_SCENARIOS[_resolve(name)]}")
        params = inspect.signature(module.raw_env.__init__).parameters
    return {k: p.default for k, p in params.items()
            if k not in ("self", "render_mode") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def parse_env_kwargs(pairs: Sequence[str]) -> Dict[str, Any]:
    """['N=5', 'continuous_actions=true'] -> {'N': 5, 'continuous_actions': True}."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"env argument {pair!r} is not KEY=VALUE (e.g. N=5 max_cycles=50 continuous_actions=true)")
        key, raw = pair.split("=", 1)
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
    except (KeyError, ValueError, ImportError):  # unknown or missing env: make_env says what is wrong
        return pairs
    return pairs + ("continuous_actions=true",) if "continuous_actions" in accepted else pairs


def make_env(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
             render_mode: Optional[str] = None, device=None):
    """Build E copies of the named env behind the batched adapter.

    env_kwargs are the scenario's own arguments (for mpe2: N, max_cycles, continuous_actions,
    local_ratio, ...); an unknown one fails with the list the scenario accepts. `device` places
    a torch port's tensors (the training device, so the whole loop stays there); the PettingZoo
    adapter steps on the CPU and returns numpy arrays whatever it is. Rendering a torch port
    builds its PettingZoo twin (same observations and dynamics), which draws frames.
    """
    env_kwargs = dict(env_kwargs or {})
    family, rest = _family(name)
    if family is not None:
        return family[1](rest, num_envs, seed, env_kwargs, render_mode, device)
    if name in NATIVE_ENVS:
        accepted = env_arguments(name)
        unknown = sorted(set(env_kwargs) - set(accepted))
        if unknown:
            raise ValueError(f"env {name!r} does not take argument(s) {unknown}; accepted: {', '.join(accepted)}")
        return NATIVE_ENVS[name](num_envs, seed, device or "cpu", **env_kwargs)
    family = split_family(name)
    if family is not None:
        return make_family_env(name, family, num_envs, seed, env_kwargs, render_mode)
    is_torch, bare = _split_torch(name)
    if is_torch and render_mode is None:
        return make_torch_mpe(bare, num_envs, seed, device or "cpu", **env_kwargs)
    if is_torch:  # the port does not draw; its PettingZoo twin has the same dynamics and does
        name = bare
    accepted = env_arguments(name)
    unknown = sorted(set(env_kwargs) - set(accepted))
    if unknown:
        raise ValueError(f"env {name!r} does not take argument(s) {unknown}; accepted: "
                         + ", ".join(f"{k} (default {v!r})" for k, v in accepted.items()))
    maker = env_maker(name)
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    # mpe2's state() is the concatenation of every agent's observation (simple_env.py);
    # building it from the observations already in hand avoids computing them twice.
    return PettingZooVecEnv(lambda: maker(**env_kwargs), num_envs, seed, state_from_obs=True)


__all__ = ["make_env", "env_maker", "env_arguments", "parse_env_kwargs", "with_continuous_actions", "known_envs",
           "agent_feature_slices", "MPE_AGENT_FEATURES",
           "PettingZooVecEnv", "VecStep", "MPE2_SCENARIOS", "TorchMPE", "TORCH_SCENARIOS", "MatrixGame", "PAYOFFS", "NATIVE_ENVS",
           "FAMILIES", "PZ_FAMILIES"]
