"""JaxMARL environments, E copies stepped as one jitted JAX call, handed to torch.

    from envs import make_env
    env = make_env("jaxmarl:smax_3m", num_envs=1024, seed=0)

JaxMARL writes every environment as pure functions `reset(key)` / `step_env(key, state,
actions)` of one copy. `JaxMARLVecEnv` compiles `jax.jit(jax.vmap(...))` of both, so all E copies
advance in one call on the JAX side; the results reach torch through DLPack (no copy on the CPU,
no Python loop over copies) and are moved to `device`. The surface is `PettingZooVecEnv`'s.

- Names: `jaxmarl:<id>` for each id of `jaxmarl.registered_envs` that builds from its defaults
  and whose dependencies are installed (`jaxmarl:MPE_simple_spread_v3`, `jaxmarl:hanabi`,
  `jaxmarl:overcooked`, `jaxmarl:coin_game`, `jaxmarl:switch_riddle`, `jaxmarl:SMAX`, ...);
  `jaxmarl:smax_<map>` is JaxMARL's `HeuristicEnemySMAX` on one of SMAX's maps (`smax_3m`,
  `smax_2s3z`, `smax_smacv2_5_units`, ...): only the allies are agents, the enemy is the
  heuristic. Refused, each with its reason: MABrax without `brax`, JaxRobotarium without its
  submodule, `LearnedPolicyEnemySMAX` (it needs a trained policy), and the STORM games (their
  observations are not one array per agent).
- Arguments: the env class's own (`--env-kwargs max_steps=50`); an env that takes
  `action_type` takes `continuous_actions=true/false` in its place, as the other families.
- Auto-reset: JaxMARL's own `step` resets a finished copy inside and returns only the new
  episode's observation. The adapter calls `step_env` and `reset` itself and selects per copy
  (as `step` does, with the same keys), so `final_obs` / `final_state` are the true last ones.
- Global state: the env's `world_state` (SMAX) where it gives one, else every agent's
  true-size observation, concatenated.
- Action masks: `get_avail_actions` (SMAX) or `get_legal_moves` (Hanabi) where the env has
  one; padded actions are False. `alive`: False for an SMAX unit that was dead before the step
  (it did not act), True elsewhere. `episode_won` and `take_episode_wins()`: SMAX with the
  heuristic enemy only (won: every enemy dead while an ally lives, in the final state).
- Episodes end at JaxMARL's `dones["__all__"]`. Truncated where the step count reached the
  env's `max_steps` (for SMAX: and no side is wiped out), terminated otherwise, for every agent:
  a dead SMAX unit stays in the team, with `alive` False and the team's reward, until the battle
  ends (as `torch:smax_`). SMAX's `acting` (after `reset()` and in each step's result): the
  units alive to act in the coming step, so that the on-policy files with critics of a unit's own
  view credit the rewards it receives after its death to its last live action (common/turns.py).
  (JaxMARL's MPE compares its count before adding the step: its episodes last max_steps + 1 steps.)
- Seeding: `jax.random.PRNGKey(seed)` split into one key per copy; each copy splits its own
  key at every reset and step. The same seed gives the same trajectories.
- Compiling: adapters of one name and arguments share their jitted reset and step and the traced
  observation shapes (`_COMPILED`), so a second one (an eval env, the next run in the process)
  compiles only for a new number of copies.
"""
import ast
import inspect
import textwrap
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch

from envs.errors import EnvError, EnvPackageMissing, did_you_mean
from envs.pettingzoo_vec import VecStep

PIP_LINE = 'pip install -e ".[jaxmarl]"'
MAP_PREFIX = "smax_"

# registered id -> the class jaxmarl.make builds for it (jaxmarl/registration.py), by name in
# jaxmarl.environments; the ids of JaxMARL 0.2.0.
_CLASSES = {
    "MPE_simple_v3": "SimpleMPE", "MPE_simple_tag_v3": "SimpleTagMPE",
    "MPE_simple_world_comm_v3": "SimpleWorldCommMPE", "MPE_simple_spread_v3": "SimpleSpreadMPE",
    "MPE_simple_crypto_v3": "SimpleCryptoMPE", "MPE_simple_speaker_listener_v4": "SimpleSpeakerListenerMPE",
    "MPE_simple_push_v3": "SimplePushMPE", "MPE_simple_adversary_v3": "SimpleAdversaryMPE",
    "MPE_simple_reference_v3": "SimpleReferenceMPE", "MPE_simple_facmac_v1": "SimpleFacmacMPE",
    "MPE_simple_facmac_3a_v1": "SimpleFacmacMPE3a", "MPE_simple_facmac_6a_v1": "SimpleFacmacMPE6a",
    "MPE_simple_facmac_9a_v1": "SimpleFacmacMPE9a", "switch_riddle": "SwitchRiddle", "SMAX": "SMAX",
    "HeuristicEnemySMAX": "HeuristicEnemySMAX", "LearnedPolicyEnemySMAX": "LearnedPolicyEnemySMAX",
    "ant_4x2": "Ant", "halfcheetah_6x1": "HalfCheetah", "hopper_3x1": "Hopper", "humanoid_9|8": "Humanoid",
    "walker2d_2x3": "Walker2d", "storm": "InTheGrid", "storm_2p": "InTheGrid_2p", "storm_np": "InTheMatrix",
    "hanabi": "Hanabi", "overcooked": "Overcooked", "overcooked_v2": "OvercookedV2", "coin_game": "CoinGame",
    "jaxnav": "JaxNav",
}
_MABRAX = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")
# ids that build but that the adapter cannot step, and why
_NOT_PER_AGENT = "its observations are not one array per agent"
_REFUSED = {
    "LearnedPolicyEnemySMAX": "it needs a trained enemy policy and its parameters, which a name cannot give; "
                              "jaxmarl:smax_<map> plays against SMAX's heuristic enemy",
    "storm": _NOT_PER_AGENT, "storm_2p": _NOT_PER_AGENT, "storm_np": _NOT_PER_AGENT,
}
# SMAX arguments that a map sets itself (jaxmarl.environments.smax.map_name_to_scenario)
_MAP_SETS = ("num_allies", "num_enemies", "scenario", "smacv2_position_generation", "smacv2_unit_type_generation")
# (name, its arguments) -> (observation shapes, jitted reset_all, jitted step_all) of the first adapter built
# from them. jax compiles per function object (10-25 s for SMAX), so adapters of one env share them and jax
# compiles again only for a new number of copies (jit's own cache, keyed by input shapes): a run's eval env,
# the next run in a process.
_COMPILED: Dict[Tuple[str, str], Tuple[Any, Any, Any]] = {}


def _jaxmarl():
    """The jaxmarl package's environments module."""
    try:
        import jaxmarl.environments
    except ImportError as err:
        raise EnvPackageMissing(f"'jaxmarl:' envs need the jaxmarl package (and a CPU jax): {PIP_LINE}") from err
    return jaxmarl.environments


def smax_maps() -> list:
    """The SMAX maps (SMAC's and the SMACv2-style ones) that `jaxmarl:smax_<map>` takes."""
    _jaxmarl()
    from jaxmarl.environments.smax import smax_env

    return list(smax_env.MAP_NAME_TO_SCENARIO)


def jaxmarl_names() -> list:
    """Every name the family builds here: `jaxmarl:<id>` for the ids of `jaxmarl.registered_envs` it
    can step whose dependencies are installed, then `jaxmarl:smax_<map>` for each SMAX map."""
    environments = _jaxmarl()
    from jaxmarl import registered_envs

    ids = [i for i in registered_envs if i in _CLASSES and i not in _REFUSED and hasattr(environments, _CLASSES[i])]
    return [f"jaxmarl:{i}" for i in ids] + [f"jaxmarl:{MAP_PREFIX}{m}" for m in smax_maps()]


def _env_class(name: str):
    """The JaxMARL class behind a name after the prefix, or an EnvError saying why there is none."""
    environments = _jaxmarl()
    if name.startswith(MAP_PREFIX):
        maps = smax_maps()
        if name[len(MAP_PREFIX):] not in maps:
            raise EnvError(f"unknown SMAX map {name[len(MAP_PREFIX):]!r} in 'jaxmarl:{name}'; "
                           f"{did_you_mean(name, [MAP_PREFIX + m for m in maps], 'jaxmarl:')}maps: {', '.join(maps)}")
        return environments.HeuristicEnemySMAX
    if name in _MABRAX and not hasattr(environments, _CLASSES[name]):
        raise EnvPackageMissing(f"'jaxmarl:{name}' is MABrax, which needs brax: pip install \"jaxmarl[mabrax]==0.2.0\"")
    if name.startswith("JaxRobotarium"):
        raise EnvError(f"'jaxmarl:{name}' needs JaxMARL's jaxrobotarium submodule, which is not on the package index")
    if name in _REFUSED:
        raise EnvError(f"'jaxmarl:{name}' is not supported: {_REFUSED[name]}")
    if name not in _CLASSES:
        raise EnvError(f"unknown JaxMARL env 'jaxmarl:{name}'; {did_you_mean(name, _CLASSES, 'jaxmarl:')}names: "
                       f"python -c 'import envs; print(envs.jaxmarl_vec.jaxmarl_names())'")
    return getattr(environments, _CLASSES[name])


def _named(params) -> Dict[str, Any]:
    return {k: p.default for k, p in params.items()
            if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _init_arguments(cls) -> Dict[str, Any]:
    """A class's __init__ arguments with their defaults; where it takes **kwargs and hands them to
    its base class, also the base's arguments that its own super().__init__(...) call leaves free.
    A maker function (SimpleFacmacMPE3a) gives its own arguments (none)."""
    if not inspect.isclass(cls):
        return _named(inspect.signature(cls).parameters)
    params = inspect.signature(cls.__init__).parameters
    out = _named(params)
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return out
    base = next((b for b in cls.__mro__[1:] if "__init__" in vars(b)), object)
    if base is object:
        return out
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    passed = {kw.arg for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__" for kw in node.keywords}
    return {**out, **{k: v for k, v in _named(inspect.signature(base.__init__).parameters).items()
                      if k not in passed and k not in out}}


def arguments(name: str) -> Dict[str, Any]:
    """The arguments `jaxmarl:<name>` takes, with their defaults: the env class's own (for
    `smax_<map>`, SMAX's and the heuristic enemy's, less those the map sets), `action_type`
    given as `continuous_actions`."""
    cls = _env_class(name)
    out = _init_arguments(cls)
    from jaxmarl.environments.smax import SMAX
    from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX

    if inspect.isclass(cls) and issubclass(cls, EnemySMAX):  # it hands **env_kwargs to the SMAX it wraps
        out.update(_named(inspect.signature(SMAX.__init__).parameters))
    if name.startswith(MAP_PREFIX):
        out = {k: v for k, v in out.items() if k not in _MAP_SETS}
    if isinstance(out.get("action_type"), str):
        out["continuous_actions"] = out.pop("action_type").lower() == "continuous"
    return out


def _build(name: str, env_kwargs: Dict[str, Any]):
    """The one-copy JaxMARL env (checked arguments in), or an EnvError with the env's own complaint."""
    cls = _env_class(name)
    kwargs = dict(env_kwargs)
    if "continuous_actions" in kwargs:  # the env's own spelling: "Continuous" (MPE) or "continuous" (SMAX)
        default = _init_arguments(cls).get("action_type") or "discrete"
        word = "continuous" if kwargs.pop("continuous_actions") else "discrete"
        kwargs["action_type"] = word.capitalize() if default[0].isupper() else word
    if name.startswith(MAP_PREFIX):
        from jaxmarl.environments.smax import map_name_to_scenario

        kwargs["scenario"] = map_name_to_scenario(name[len(MAP_PREFIX):])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, AssertionError, KeyError) as err:
        raise EnvError(f"'jaxmarl:{name}' with {env_kwargs}: {type(err).__name__}: {err}") from err


def _space_kind(space) -> str:
    """JaxMARL spaces by class name ('Discrete', 'Box', ...)."""
    return type(space).__name__


def _box_bounds(spaces, side: str, width: int) -> np.ndarray:
    """(N, width) every agent's Box bound `side` ('low' or 'high'; JaxMARL's MPE gives a scalar), 0-padded."""
    rows = [np.broadcast_to(np.asarray(getattr(s, side), np.float32), s.shape) for s in spaces]
    return np.stack([np.pad(r, (0, width - r.shape[0])) for r in rows])


class JaxMARLVecEnv:
    """E copies of one JaxMARL environment behind the batched-adapter interface (torch tensors on `device`).

    Args:
        env: a JaxMARL `MultiAgentEnv` (one copy; its functions are vmapped over the copies).
        num_envs: E.
        seed: `jax.random.PRNGKey(seed)` is split into the E copies' keys.
        device: where the returned tensors live (JAX itself computes on its own default device).
        share_key: (name, arguments) of `env`: adapters with the same key share the compiled reset and
            step and the observation shapes (their functions read only the env's fixed settings); None
            traces and compiles its own.
    """

    def __init__(self, env, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 share_key: Optional[Tuple[str, str]] = None):
        import jax

        if num_envs < 1:
            raise EnvError(f"num_envs must be at least 1, got {num_envs}")
        self.jax, self.env = jax, env
        self.num_envs, self.seed, self.device = num_envs, seed, torch.device(device)
        self.agents = list(env.agents)
        self.n_agents = N = len(self.agents)
        self.python_stepped = False  # one vectorised call steps every copy: no worker processes needed

        # SMAX (both teams as agents) or SMAX with an enemy policy: units die, the allies can win
        from jaxmarl.environments.smax import SMAX
        from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX

        self._enemy_smax = isinstance(env, EnemySMAX)
        self._smax = self._enemy_smax or isinstance(env, SMAX)

        # Shapes from one abstract reset (no compute, but a trace: about 0.5 s for SMAX, so shared too)
        shared = _COMPILED.get(share_key) if share_key is not None else None
        obs_struct = shared[0] if shared else jax.eval_shape(env.reset, jax.random.PRNGKey(0))[0]
        if not isinstance(obs_struct, dict) or any(a not in obs_struct for a in self.agents):
            raise EnvError(f"{type(env).__name__}'s observations are not one array per agent "
                           f"({type(obs_struct).__name__}); the adapter needs a dict keyed by {self.agents}")
        shapes = [tuple(obs_struct[a].shape) for a in self.agents]
        if any(len(s) > 3 for s in shapes) or len({len(s) == 3 for s in shapes}) > 1:
            raise EnvError(f"observation shapes {shapes}: the adapter takes vectors (1-D, 2-D: flattened) or "
                           "images (3-D, H x W x C) for every agent alike")
        self.image_obs = len(shapes[0]) == 3
        self._agent_shapes = shapes if self.image_obs else [(int(np.prod(s)),) for s in shapes]
        self.obs_shape = tuple(max(s[k] for s in self._agent_shapes) for k in range(len(self._agent_shapes[0])))
        self.obs_dims = [int(np.prod(s)) for s in self._agent_shapes]  # true (flattened) sizes
        self.obs_dim = int(np.prod(self.obs_shape))
        self._world_state = "world_state" in obs_struct
        self.state_dim = int(np.prod(obs_struct["world_state"].shape)) if self._world_state else sum(self.obs_dims)
        self.state_shape = (self.state_dim,)

        act_spaces = [env.action_space(a) for a in self.agents]
        if all(_space_kind(s) == "Discrete" for s in act_spaces):
            self.discrete = True
            self.action_dims = [int(s.n) for s in act_spaces]
            self.n_actions, self.action_dim = max(self.action_dims), 1
        elif all(_space_kind(s) == "Box" and len(s.shape) == 1 for s in act_spaces):
            self.discrete = False
            self.action_dims = [int(s.shape[0]) for s in act_spaces]
            self.n_actions, self.action_dim = 0, max(self.action_dims)
            self.action_low = _box_bounds(act_spaces, "low", self.action_dim)  # (N, act_dim)
            self.action_high = _box_bounds(act_spaces, "high", self.action_dim)  # (N, act_dim)
            self._low_t = torch.as_tensor(self.action_low, device=self.device)
            self._high_t = torch.as_tensor(self.action_high, device=self.device)
        else:
            raise EnvError(f"action spaces {[_space_kind(s) for s in act_spaces]}: the adapter takes all-Discrete "
                           "or all-Box (1-D) actions")
        width = self.n_actions if self.discrete else self.action_dim
        self.action_dim_mask = np.arange(width)[None, :] < np.array(self.action_dims)[:, None]  # (N, width)
        self._mask_t = torch.as_tensor(self.action_dim_mask, device=self.device)
        # the env's own legal actions: SMAX's get_avail_actions, Hanabi's get_legal_moves
        from jaxmarl.environments.multi_agent_env import MultiAgentEnv

        if not self.discrete:
            self._avail = None
        elif hasattr(type(env), "get_legal_moves"):
            self._avail = env.get_legal_moves
        elif type(env).get_avail_actions is not MultiAgentEnv.get_avail_actions:
            self._avail = env.get_avail_actions
        else:
            self._avail = None
        self.has_action_mask = self._avail is not None

        if shared is None:
            shared = obs_struct, jax.jit(jax.vmap(self._reset_one)), jax.jit(jax.vmap(self._step_one))
            if share_key is not None:
                _COMPILED[share_key] = shared
        self._reset_all, self._step_all = shared[1:]
        self._keys = jax.random.split(jax.random.PRNGKey(seed), num_envs)  # (E, 2) one key per copy
        # every copy's (key, JaxMARL state, return (N,) and length of the episode in flight), batched: set by reset()
        self._carry = None
        self._mask = None if not self.discrete else self._mask_t[None].expand(num_envs, N, self.n_actions)
        self._won = self._finished = 0

    # ------------------------------------------------------------------ one copy, in JAX (vmapped)
    def _view(self, obs: dict, env_state):
        """One copy's (obs (N, *obs_shape), state (state_dim,), mask (N, n_actions) or None) from
        JaxMARL's observation dict and state."""
        jnp = self.jax.numpy
        rows = []
        for agent, shape in zip(self.agents, self._agent_shapes):
            o = obs[agent].reshape(shape).astype(jnp.float32)
            rows.append(jnp.pad(o, [(0, full - own) for full, own in zip(self.obs_shape, shape)]))
        obs_arr = jnp.stack(rows)
        if self._world_state:
            state = obs["world_state"].reshape(-1).astype(jnp.float32)
        else:
            state = jnp.concatenate([obs[a].reshape(-1).astype(jnp.float32) for a in self.agents])
        mask = None
        if self._avail is not None:
            avail = self._avail(env_state)
            mask = jnp.stack([jnp.pad(avail[a].astype(bool), (0, self.n_actions - d))
                              for a, d in zip(self.agents, self.action_dims)])
        return obs_arr, state, mask

    def _units(self, env_state):
        """The SMAX battle state inside one copy's state (the heuristic-enemy env wraps it)."""
        return env_state.state if self._enemy_smax else env_state

    def _strong(self, tree):
        """The same values without JAX's weak types, which a reset gives some counters and a step
        does not: the jitted step then sees one input type and compiles once, not twice."""
        return self.jax.tree.map(lambda x: self.jax.lax.convert_element_type(x, x.dtype), tree)

    def _reset_one(self, key):
        """One copy's fresh episode: its next key, the carry a step takes, and the first view."""
        jnp = self.jax.numpy
        key, reset_key = self.jax.random.split(key)
        obs, env_state = self.env.reset(reset_key)
        carry = (key, self._strong(env_state), jnp.zeros(self.n_agents, jnp.float32), jnp.zeros((), jnp.int32))
        return carry, self._view(obs, env_state)

    def _step_one(self, carry, actions):
        """One copy's step with its own auto-reset: the keys of JaxMARL's `step` (a split into the
        step's and the reset's), but both results kept, so the finished episode's last view survives.
        Returns the next carry and the step's outputs by name."""
        jax, jnp = self.jax, self.jax.numpy
        key, env_state, ep_return, ep_length = carry
        key, step_key = jax.random.split(key)
        key_step, key_reset = jax.random.split(step_key)
        act = {a: actions[n] if self.discrete else actions[n, :d]
               for n, (a, d) in enumerate(zip(self.agents, self.action_dims))}
        obs_f, state_f, reward, dones, _ = self.env.step_env(key_step, env_state, act)
        obs_r, state_r = self.env.reset(key_reset)
        done = dones["__all__"]
        final = self._view(obs_f, state_f)
        after = jax.tree.map(lambda r, f: jax.lax.select(done, r, f), self._view(obs_r, state_r), final)
        next_state = jax.tree.map(lambda r, f: jax.lax.select(done, r, f), state_r, state_f)
        reward = jnp.stack([reward[a] for a in self.agents]).astype(jnp.float32)
        alive = jnp.ones(self.n_agents, bool)
        won = jnp.array(False)
        extra = {}
        if self._smax:
            before, last = self._units(env_state), self._units(state_f)
            n_allies = self.env.num_allies
            allies_left, enemies_left = last.unit_alive[:n_allies].any(), last.unit_alive[n_allies:].any()
            alive = before.unit_alive[: self.n_agents]  # a unit dead before the step did not act
            truncated = done & allies_left & enemies_left  # the time ran out with both sides standing
            won = done & allies_left & ~enemies_left
            extra["acting"] = self._units(next_state).unit_alive[: self.n_agents]  # who acts in the coming step
        elif hasattr(state_f, "step") and getattr(self.env, "max_steps", None) is not None:
            truncated = done & (state_f.step >= self.env.max_steps)
        else:
            truncated = jnp.array(False)
        terminated = jnp.broadcast_to(done & ~truncated, (self.n_agents,))
        ep_return, ep_length = ep_return + reward, ep_length + 1
        out = dict(after=after, final=final, reward=reward, done=done, terminated=terminated,
                   truncated=truncated & ~terminated, alive=alive, won=won,
                   episode_return=jnp.where(done, ep_return, 0.0), episode_length=jnp.where(done, ep_length, 0),
                   **extra)
        carry = (key, self._strong(next_state), jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
        return carry, out

    # ------------------------------------------------------------------ JAX -> torch
    def _torch(self, x) -> torch.Tensor:
        """A JAX array as a torch tensor on `device` (DLPack: no copy while both are on the CPU)."""
        return torch.from_dlpack(x).to(self.device)

    def _view_torch(self, view):
        obs, state, mask = view
        mask = self._mask_t[None].expand(self.num_envs, -1, -1) if mask is None and self.discrete else mask
        return self._torch(obs), self._torch(state), None if mask is None else self._torch(mask)

    # ------------------------------------------------------------------ adapter API
    def reset(self, seed: Optional[int] = None):
        """Reset every copy; with `seed`, first start every copy's key again from it, as a new env built
        with that seed. Returns (obs (E, N, *obs_shape), state (E, state_dim), action_mask or None)."""
        if seed is not None:
            self._keys = self.jax.random.split(self.jax.random.PRNGKey(seed), self.num_envs)  # (E, 2)
        self._carry, view = self._reset_all(self._keys)
        self._keys = self._carry[0]
        obs, state, self._mask = self._view_torch(view)
        if self._smax:  # every unit of a fresh battle acts
            self.acting = torch.ones(self.num_envs, self.n_agents, dtype=torch.bool, device=self.device)
        return obs, state, self.action_mask()

    @property
    def jaxmarl_state(self):
        """Every copy's JaxMARL state, batched (leading axis E): what the next step starts from."""
        return None if self._carry is None else self._carry[1]

    def set_jaxmarl_state(self, env_state) -> None:
        """Overwrite every copy's JaxMARL state (same structure and shapes; tests set up battles with it)."""
        self._carry = (self._carry[0], self._strong(env_state), *self._carry[2:])

    def action_mask(self) -> Optional[torch.Tensor]:
        """(E, N, n_actions) bool for discrete actions (the env's legal actions, padding False); else None."""
        return self._mask if self.discrete else None

    def to_env_units(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised continuous actions (E, N, act_dim) in [-1, 1] -> each agent's [low, high]."""
        unit = (actions.clamp(-1.0, 1.0) + 1.0) * 0.5
        return self._low_t + unit * (self._high_t - self._low_t)

    def step(self, actions) -> VecStep:
        """Step every copy. actions: (E, N) int, or (E, N, act_dim) float in [-1, 1] (tensor or array)."""
        if self._carry is None:
            raise RuntimeError("call reset() before step()")
        jnp = self.jax.numpy
        actions = torch.as_tensor(actions, device=self.device)
        if self.discrete:
            actions = jnp.asarray(actions.to("cpu", torch.int32).numpy())
        else:
            actions = jnp.asarray(self.to_env_units(actions.float()).cpu().numpy())
        self._carry, out = self._step_all(self._carry, actions)
        self._keys = self._carry[0]
        obs, state, self._mask = self._view_torch(out.pop("after"))
        final_obs, final_state, final_mask = self._view_torch(out.pop("final"))
        out = {name: self._torch(x) for name, x in out.items()}
        out["episode_length"] = out["episode_length"].long()
        won = out.pop("won")
        if self._smax:
            self.acting = out["acting"] = out["acting"].bool()
        if self._enemy_smax:
            self._won += int(won.sum())
            self._finished += int(out["done"].sum())
        return VecStep(obs=obs, state=state, action_mask=self.action_mask(), final_obs=final_obs,
                       final_state=final_state, final_action_mask=final_mask,
                       episode_won=won if self._enemy_smax else None, **out)

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """Uniform random legal actions: (E, N) indices (within the current mask), or (E, N, act_dim)
        in the normalised box [-1, 1] (zero in an agent's padding)."""
        rng = rng if rng is not None else np.random.default_rng()
        E, N = self.num_envs, self.n_agents
        if self.discrete:
            logits = torch.as_tensor(rng.random((E, N, self.n_actions)), device=self.device)
            return torch.where(self.action_mask(), logits, torch.full_like(logits, -1.0)).argmax(-1)
        u = torch.as_tensor(rng.uniform(-1.0, 1.0, (E, N, self.action_dim)), dtype=torch.float32, device=self.device)
        return u * self._mask_t

    def render(self):
        raise NotImplementedError("the jaxmarl adapter does not render (JaxMARL's own visualisers draw one copy)")

    def close(self) -> None:
        pass


class JaxMARLSMAXEnv(JaxMARLVecEnv):
    """SMAX against its heuristic enemy: an env whose episodes are won or lost, so it also counts wins."""

    def take_episode_wins(self) -> Tuple[int, int]:
        """(won, finished) episodes since the last call, which resets both counts."""
        out, (self._won, self._finished) = (self._won, self._finished), (0, 0)
        return out


def make(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
         render_mode: Optional[str] = None, device=None) -> JaxMARLVecEnv:
    """E copies of `jaxmarl:<name>`, vectorised in JAX, returned as torch tensors on `device`;
    envs.make_env checks env_kwargs against arguments() first."""
    if render_mode is not None:
        raise EnvError("the jaxmarl adapter does not render; leave --render off for 'jaxmarl:' envs")
    env = _build(name, dict(env_kwargs or {}))
    from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX

    adapter = JaxMARLSMAXEnv if isinstance(env, EnemySMAX) else JaxMARLVecEnv
    share_key = (name, repr(sorted((env_kwargs or {}).items())))
    return adapter(env, num_envs, seed, device or "cpu", share_key)
