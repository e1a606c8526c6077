"""PettingZoo families beyond mpe2: SISL, butterfly, MAgent2 and the turn-based classic games, by
`family:scenario` names.

    make_env("sisl:pursuit", 8, seed=1, env_kwargs={"n_pursuers": 4})
    make_env("butterfly:pistonball", 4, env_kwargs={"n_pistons": 4, "image_stride": 4})
    make_env("magent2:battle", 2, env_kwargs={"map_size": 15})
    make_env("classic:go", 8, env_kwargs={"board_size": 5})     # turn-based: envs/aec_vec.py

Every scenario goes behind the same `PettingZooVecEnv` as mpe2: image observations keep their
(H, W, C) layout (uint8 for the butterfly screens), agents that die (MAgent2, knights_archers_zombies,
multiwalker with remove_on_fall) are padded with alive=0. The packages are optional: a name whose
package is missing fails when it is used, with the pip line that installs it.
"""
import importlib
import inspect
from typing import Any, Dict

import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper

from envs.errors import EnvError, EnvPackageMissing, did_you_mean
from envs.aec_vec import AECVecEnv
from envs.pettingzoo_vec import PettingZooVecEnv

# family prefix -> (Python package, pip line, {scenario: versioned module}).
PZ_FAMILIES = {
    "sisl": ("pettingzoo.sisl", 'pip install "pettingzoo[sisl]==1.27.0"  (box2d, pymunk)', {
        "multiwalker": "multiwalker_v9", "pursuit": "pursuit_v5"}),
    "butterfly": ("pettingzoo.butterfly", 'pip install "pettingzoo[butterfly]==1.27.0"  (pymunk)', {
        "pistonball": "pistonball_v6", "cooperative_pong": "cooperative_pong_v6",
        "knights_archers_zombies": "knights_archers_zombies_v11"}),
    # Turn-based games (PettingZoo's AEC API), behind envs/aec_vec.py. tictactoe, connect_four and go come
    # with pettingzoo itself; chess, the poker games and Hanabi need the classic extra.
    "classic": ("pettingzoo.classic", 'pip install "pettingzoo[classic]==1.27.0"  (chess, rlcard, open_spiel)', {
        "tictactoe": "tictactoe_v3", "connect_four": "connect_four_v3", "go": "go_v5", "chess": "chess_v6",
        "leduc_holdem": "leduc_holdem_v4", "texas_holdem": "texas_holdem_v4", "hanabi": "hanabi_v5"}),
    "magent2": ("magent2.environments", "pip install magent2==0.3.4", {
        "battle": "battle_v4", "adversarial_pursuit": "adversarial_pursuit_v4", "battlefield": "battlefield_v5",
        "combined_arms": "combined_arms_v6", "gather": "gather_v5", "tiger_deer": "tiger_deer_v4"}),
}
# Where a scenario's parallel_env(**kwargs) hides its arguments: the class that takes them.
_BASE_CLASS = {"multiwalker": "_env", "pursuit": "_env", "cooperative_pong": "CooperativePong"}
# Arguments the adapter sets itself (seeding, rendering) or that only the base class's internals take.
_NOT_ARGUMENTS = {"self", "render_mode", "seed", "randomizer"}
# Scenarios whose state() cannot be used: multiwalker's reads the walkers' bodies, which are gone
# once one has fallen (AttributeError at the end of an episode); their state is then the
# concatenation of the agents' observations.
_STATE_FROM_OBS = {"multiwalker"}
# Adapter arguments accepted beside the scenario's own (see envs.PettingZooVecEnv, envs.AECVecEnv).
ADAPTER_ARGUMENTS = {"image_stride": 1}
TURN_BASED_ARGUMENTS = {"board": "auto"}  # auto: Go and chess as (H, W, C) planes, the other games flat
_IMAGE_BOARDS = {"go", "chess"}
TURN_BASED = {"classic"}  # families of AEC games


def family_names() -> list:
    return sorted(f"{family}:{scenario}" for family, (_, _, table) in PZ_FAMILIES.items() for scenario in table)


def split_family(name: str):
    """'sisl:pursuit' or 'sisl:pursuit_v5' -> ('sisl', 'pursuit'); a name of no family here -> None."""
    family, _, scenario = name.partition(":")
    if family not in PZ_FAMILIES:
        return None
    table = PZ_FAMILIES[family][2]
    for short, module in table.items():
        if scenario in (short, module):
            return family, short
    raise EnvError(f"unknown {family} scenario {scenario!r}; {did_you_mean(scenario, table, family + ':')}known: "
                   + ", ".join(f"{family}:{s}" for s in table)
                   + f" (also with the version suffix, e.g. {family}:{next(iter(table.values()))})")


def _module(family: str, scenario: str):
    """Import a scenario's module, or fail saying which package to install."""
    package, pip_line, table = PZ_FAMILIES[family]
    try:
        return importlib.import_module(f"{package}.{table[scenario]}")
    except ImportError as err:  # gymnasium's DependencyNotInstalled (box2d, pymunk) is an ImportError too
        raise EnvPackageMissing(f"{family}:{scenario} needs an optional package that is not installed ({err}); "
                          f"install it with: {pip_line}") from err


def family_parallel_env(family: str, scenario: str):
    """The scenario's PettingZoo `parallel_env` constructor (MAgent2's with a safe `state()`; a
    turn-based game's AEC `env`)."""
    module = _module(family, scenario)
    if family in TURN_BASED:
        return module.env
    maker = module.parallel_env
    if family != "magent2":
        return maker
    return lambda **kwargs: MAgent2StateFix(maker(**kwargs))


def family_arguments(family: str, scenario: str) -> Dict[str, Any]:
    """A scenario's own arguments with their defaults, then the adapter's (image_stride)."""
    module = _module(family, scenario)
    if family in TURN_BASED:
        params = inspect.signature(module.raw_env.__init__).parameters
        own = {k: p.default for k, p in params.items()
               if k not in _NOT_ARGUMENTS | {"screen_height", "screen_scaling"}
               and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        return {**own, **TURN_BASED_ARGUMENTS}
    target = module.parallel_env
    if scenario in _BASE_CLASS:  # parallel_env(**kwargs) -> raw_env(**kwargs) -> this class
        target = getattr(importlib.import_module(module.raw_env.__module__), _BASE_CLASS[scenario]).__init__
    elif all(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in inspect.signature(target).parameters.values()):
        target = module.raw_env.__init__
    params = inspect.signature(target).parameters
    out = {k: p.default for k, p in params.items()
           if k not in _NOT_ARGUMENTS and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    # MAgent2 scenarios take their reward terms (tiger_deer: its hp terms) as **kwargs, listed here.
    source = importlib.import_module(module.parallel_env.__module__)
    out.update(getattr(source, "default_reward_args", {}))
    out.update(getattr(source, "default_env_args", {}))
    return {**out, **ADAPTER_ARGUMENTS}


def make_family_env(name: str, family: tuple, num_envs: int, seed: int, env_kwargs: Dict[str, Any],
                    render_mode=None) -> PettingZooVecEnv:
    """E copies of a scenario behind the PettingZoo adapter. The global state is the env's own
    `state()` (an image for pursuit, pistonball, cooperative_pong and MAgent2, flattened by the
    adapter, its shape in `state_shape`), except where that is broken (`_STATE_FROM_OBS`).
    envs.make_env checks env_kwargs against family_arguments first."""
    env_kwargs = dict(env_kwargs)
    maker = family_parallel_env(*family)
    if family[0] in TURN_BASED:
        board = env_kwargs.pop("board", "auto")
        board = ("image" if family[1] in _IMAGE_BOARDS else "flat") if board == "auto" else board
        if render_mode is not None:
            env_kwargs["render_mode"] = render_mode
        return AECVecEnv(lambda: maker(**env_kwargs), num_envs, seed, board=board)
    adapter = {k: env_kwargs.pop(k) for k in ADAPTER_ARGUMENTS if k in env_kwargs}
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    return PettingZooVecEnv(lambda: maker(**env_kwargs), num_envs, seed,
                            state_from_obs=family[1] in _STATE_FROM_OBS, **adapter)


class MAgent2StateFix(BaseParallelWrapper):
    """MAgent2's `state()` fails (`zip(*pos)` of nothing) once a whole group is dead, which is
    how a battle ends. This leaves the dead groups out of the drawing: they have nobody to draw."""

    def state(self) -> np.ndarray:
        env = self.env.unwrapped
        handles = env._all_handles
        present = [h for h in handles if len(env.env.get_pos(h))]
        if len(present) == len(handles):
            return env.state()
        env._all_handles = present
        try:
            return env.state()
        finally:
            env._all_handles = handles
