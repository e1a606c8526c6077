"""Gymnasium multi-agent envs with tuple spaces: LBF (`lbforaging`) and RWARE (`rware`).

    from envs import make_env
    env = make_env("lbf:Foraging-8x8-2p-3f-v3", num_envs=8, seed=1)
    env = make_env("rware:rware-tiny-2ag-v2", num_envs=8, seed=1)

Both families are one Gymnasium env for all agents: the observation and action spaces are
`Tuple`s with one entry per agent, `reset` and `step` take and return tuples (one reward per
agent) and one `done` flag for the whole team. `TupleGymParallelEnv` presents such an env as a
PettingZoo `ParallelEnv` (dicts keyed `agent_0`, `agent_1`, ...), so `PettingZooVecEnv` batches
it into the shape every family has (obs `(E, N, obs_dim)`, rewards `(E, N)`, ...). Neither
family has a global state: the state is every agent's observation, concatenated.

The single `done` flag mixes two things the algorithms keep apart (bootstrap on truncation,
not on termination), so each family says which one it was, from the env's own counters:
- LBF: every food item collected (`field.sum() == 0`) terminates; the 50-step limit
  (`max_episode_steps`) truncates.
- RWARE: the warehouse never finishes its job; `max_steps` (500) and the optional
  `max_inactivity_steps` both cut the episode, so both truncate.

LBF's valid actions (`_valid_actions`: no step off the grid or onto food, no load away from
food; a step into another agent's cell is valid, and cancelled when it collides) are exposed as
the action mask; the env turns an invalid action into NONE, so masking changes what a policy
can choose, not the dynamics. LBF's rewards are normalised
by default (`normalize_reward=True`): collecting food of level f pays `f / (total level
spawned)`, split between the loading agents by level, so the team's return summed over agents
is the fraction of food collected, 1.0 for all of it. `LBFVecEnv` also reports that fraction
itself (`VecStep.episode_normalised_return`), which stays the normalised return when rewards
are not normalised or a `penalty` is charged.
"""
import importlib
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from gymnasium import spaces

from envs.errors import EnvError, EnvPackageMissing, did_you_mean
from envs.pettingzoo_vec import PettingZooVecEnv, VecStep

# family prefix -> (python package that registers the gymnasium ids, pip line, an example id)
GYM_FAMILIES = {
    "lbf": ("lbforaging", "pip install lbforaging==2.0.0", "Foraging-8x8-2p-3f-v3"),
    "rware": ("rware", "pip install rware==2.0.0", "rware-tiny-2ag-v2"),
}


def _split_lbf(env, done: bool, truncated: bool) -> Tuple[bool, bool]:
    """LBF ends an episode when all food is gone (the task is done) or at its step limit."""
    if not done:
        return False, truncated
    all_collected = int(env.field.sum()) == 0
    return all_collected, truncated or not all_collected


def _split_rware(env, done: bool, truncated: bool) -> Tuple[bool, bool]:
    """RWARE only ever stops on a clock (max_steps or max_inactivity_steps): always a truncation."""
    return False, truncated or done


def _lbf_action_masks(env) -> np.ndarray:
    """(N, 6) bool: LBF's valid actions per player (its `_valid_actions`, recomputed every step)."""
    n_actions = env.action_space[0].n
    mask = np.zeros((len(env.players), n_actions), bool)
    for n, player in enumerate(env.players):
        mask[n, [a.value for a in env._valid_actions[player]]] = True
    return mask


def _lbf_score(env) -> float:
    """Fraction of the food levels spawned this episode that has been collected (1.0: all of it)."""
    spawned = float(env._food_spawned)
    return 1.0 - float(env.field.sum()) / spawned if spawned > 0 else 0.0


class TupleGymParallelEnv:
    """One Gymnasium env with per-agent `Tuple` spaces, behind PettingZoo's ParallelEnv API.

    Args:
        env: the Gymnasium env (observation and action spaces are Tuples, one entry per agent).
        split_done: (unwrapped env, done, truncated) -> (terminated, truncated): the family's
            reading of its single end-of-episode flag.
        action_masks: unwrapped env -> (N, n_actions) bool of valid actions, or None where the
            family defines none.
        score: unwrapped env -> the family's normalised return of the episode so far, or None.
    """

    def __init__(self, env, split_done: Callable, action_masks: Optional[Callable] = None,
                 score: Optional[Callable] = None):
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, spaces.Tuple) or not all(isinstance(s, spaces.Box) for s in obs_space):
            raise TypeError(f"observation space {obs_space} is not supported: the tuple-space adapter accepts a "
                            "Tuple of Box spaces, one per agent (flat or image Boxes; they are flattened)")
        if not isinstance(act_space, spaces.Tuple) or len(act_space) != len(obs_space) or not (
                all(isinstance(s, spaces.Discrete) for s in act_space)
                or all(isinstance(s, spaces.Box) and len(s.shape) == 1 for s in act_space)):
            raise TypeError(f"action space {act_space} is not supported: the tuple-space adapter accepts a Tuple of "
                            f"{len(obs_space)} Discrete spaces or of {len(obs_space)} 1-D Box spaces, one per agent "
                            "(for RWARE, msg_bits > 0 gives MultiDiscrete actions: use msg_bits=0)")
        self.env, self.unwrapped = env, env.unwrapped
        self.split_done, self._action_masks, self._score = split_done, action_masks, score
        self.possible_agents = [f"agent_{i}" for i in range(len(obs_space))]
        self.agents = []
        self._obs_spaces = dict(zip(self.possible_agents, obs_space))
        self._act_spaces = dict(zip(self.possible_agents, act_space))
        self.last_score = 0.0  # the normalised return of the latest finished episode

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def _infos(self) -> Dict[str, dict]:
        if self._action_masks is None:
            return {a: {} for a in self.possible_agents}
        masks = self._action_masks(self.unwrapped)
        return {a: {"action_mask": masks[n]} for n, a in enumerate(self.possible_agents)}

    def reset(self, seed: Optional[int] = None, options=None):
        obs, _ = self.env.reset(seed=seed)
        self.agents = list(self.possible_agents)
        return dict(zip(self.possible_agents, obs)), self._infos()

    def step(self, actions: Dict[str, Any]):
        joint = tuple(actions[a] for a in self.possible_agents)
        obs, rewards, done, truncated, _ = self.env.step(joint)
        terminated, truncated = self.split_done(self.unwrapped, bool(np.all(done)), bool(np.all(truncated)))
        names = self.possible_agents
        if terminated or truncated:
            self.agents = []
            if self._score is not None:
                self.last_score = self._score(self.unwrapped)
        return (dict(zip(names, obs)), {a: float(r) for a, r in zip(names, rewards)},
                {a: terminated for a in names}, {a: truncated for a in names}, self._infos())

    def state(self):
        raise NotImplementedError("tuple-space Gymnasium envs have no global state")

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class LBFVecEnv(PettingZooVecEnv):
    """PettingZooVecEnv over LBF copies that also reports each finished episode's normalised
    return (fraction of the food collected) in `VecStep.episode_normalised_return` (E,)."""

    def step(self, actions) -> VecStep:
        result = super().step(actions)
        score = np.zeros(self.num_envs, np.float32)
        for i in np.flatnonzero(result.done):
            score[i] = self.envs[i].last_score  # set at the episode's last step, before the auto-reset
        result.episode_normalised_return = score
        return result


def _family(prefix: str):
    """Import the family's package (it registers the gymnasium ids) or fail with the pip line."""
    package, pip_line, example = GYM_FAMILIES[prefix]
    try:
        importlib.import_module(package)
    except ImportError as err:
        raise EnvPackageMissing(f"'{prefix}:' envs need the {package} package: {pip_line}") from err
    return package, example


def arguments(prefix: str, env_id: str) -> Dict[str, Any]:
    """The arguments the gymnasium id's env accepts, with the id's registered values as defaults."""
    import gymnasium

    package, example = _family(prefix)
    ids = [k for k, s in gymnasium.registry.items() if str(s.entry_point).startswith(package)]
    if env_id not in ids:
        head = (f"{env_id!r} is not a {package} env" if env_id in gymnasium.registry  # e.g. lbf:CartPole-v1
                else f"unknown {prefix} env {env_id!r}")
        raise EnvError(f"{head}; {did_you_mean(env_id, ids, prefix + ':', n=3)}{len(ids)} ids are registered "
                       f"by {package}, e.g. {prefix}:{example}")
    spec = gymnasium.spec(env_id)
    module, cls = str(spec.entry_point).split(":")
    params = inspect.signature(getattr(importlib.import_module(module), cls).__init__).parameters
    out = {k: p.default for k, p in params.items()
           if k not in ("self", "render_mode") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    out.update(spec.kwargs)
    return out


def make(prefix: str, env_id: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
         render_mode: Optional[str] = None, device=None) -> PettingZooVecEnv:
    """E copies of an LBF or RWARE gymnasium id behind the batched adapter (copy i seeded seed + i);
    they step on the CPU and return numpy arrays whatever `device` is."""
    import gymnasium

    env_kwargs = dict(env_kwargs or {})  # checked against arguments() by envs.make_env
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    lbf = prefix == "lbf"

    def make_one():
        # the env checker would warn about the per-agent reward lists on every step
        env = gymnasium.make(env_id, disable_env_checker=True, **env_kwargs)
        if lbf:
            return TupleGymParallelEnv(env, _split_lbf, _lbf_action_masks, _lbf_score)
        return TupleGymParallelEnv(env, _split_rware)

    vec = LBFVecEnv if lbf else PettingZooVecEnv
    return vec(make_one, num_envs, seed, state_from_obs=True)
