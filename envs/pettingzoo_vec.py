"""E copies of a PettingZoo parallel env, stepped in one process, in one batched shape.

Every environment family ends up in the same layout (STYLE.md, "What goes where"):

    obs          (E, N, obs_dim)   float32, each agent's own observation, zero-padded to obs_dim
                 (E, N, H, W, C)   for image observations (3-D Box spaces), uint8 when the env's are
    state        (E, state_dim)    float32, the global state (flattened; its own shape is `state_shape`)
    reward       (E, N)            float32
    terminated   (E, N)            bool, the episode ended by the task: do not bootstrap
    truncated    (E, N)            bool, the episode was cut by a time limit: bootstrap
    alive        (E, N)            bool, the agent was present and acted in this step
    action_mask  (E, N, n_actions) bool, discrete actions only; padded actions are False

Continuous actions are given in the normalised box [-1, 1]^act_dim and mapped affinely onto
each agent's own bounds (-1 -> low, +1 -> high; values outside are clipped), so a policy
whose Gaussian starts at mean 0 starts in the middle of every action space, whatever the
env's units (mpe2's continuous actions live in [0, 1]).

Agents whose observation or action sizes differ are padded to the largest size; the true
sizes stay in `obs_dims` / `action_dims`. Image observations keep their (H, W, C) layout (each
axis padded to the largest agent's) so that a CNN can read them (`nets.encoder_for`); they stay
uint8 when the env gives uint8, a quarter of float32's memory. 1-D and 2-D Box observations
are flattened to (obs_dim,). A copy whose episode ended resets at once; its
last observation is returned in `final_obs` so a truncated episode can be bootstrapped.
Copy i is seeded with `seed + i` at its first reset.
"""
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from gymnasium import spaces

from envs.errors import EnvError


@dataclass
class VecStep:
    """What one batched step returns; every array has the env copies first, then agents."""

    obs: np.ndarray  # (E, N, obs_dim), or (E, N, H, W, C) for images, after auto-reset
    state: np.ndarray  # (E, state_dim) after auto-reset
    reward: np.ndarray  # (E, N)
    terminated: np.ndarray  # (E, N)
    truncated: np.ndarray  # (E, N)
    alive: np.ndarray  # (E, N) agent acted in this step
    action_mask: Optional[np.ndarray]  # (E, N, n_actions) for the next step, or None
    final_obs: np.ndarray  # (E, N, *obs_shape) the true next obs (before auto-reset)
    final_state: np.ndarray  # (E, state_dim) the true next state (before auto-reset)
    done: np.ndarray  # (E,) the copy finished an episode in this step
    episode_return: np.ndarray  # (E, N) per-agent return of the finished episode (0 elsewhere)
    episode_length: np.ndarray  # (E,) length of the finished episode (0 elsewhere)
    final_action_mask: Optional[np.ndarray] = None  # (E, N, n_actions) mask of final_obs (discrete only)
    # (E,) the family's normalised return of the finished episode (0 elsewhere), where it defines one (LBF)
    episode_normalised_return: Optional[np.ndarray] = None
    # (E, N) who acts in the next step: the mover in turn-based games (envs/aec_vec.py), the live units in SMAX
    # (dead ones keep the team's reward until the battle ends: common/turns.py); None elsewhere (everyone acts)
    acting: Optional[np.ndarray] = None
    # (E,) bool, envs with a winner (SMAX): the copy finished an episode in this step and won it; None elsewhere
    episode_won: Optional[np.ndarray] = None


def _obs_shape(space: spaces.Space, agent: str, stride: int) -> tuple:
    """The adapter's layout of one agent's observation: (H, W, C) for a 3-D Box (an image, of
    which every `stride`-th row and column is kept), (size,) for a 1-D or 2-D Box (flattened)."""
    if isinstance(space, spaces.Box) and len(space.shape) == 3:
        H, W, C = space.shape
        return (-(-H // stride), -(-W // stride), C)
    if isinstance(space, spaces.Box) and len(space.shape) in (1, 2):
        return (int(np.prod(space.shape)),)
    raise TypeError(
        f"agent {agent!r} has observation space {space}; the PettingZoo adapter accepts Box "
        "observations of 1 or 2 dimensions (flattened) or 3 (an image, H x W x C), or a Dict with "
        "'observation' and 'action_mask' keys"
    )


class PettingZooVecEnv:
    """E copies of a PettingZoo `ParallelEnv`, stepped one after another in this process.

    Args:
        make_env: builds one fresh parallel env.
        num_envs: E, the number of copies.
        seed: copy i is reset with `seed + i` the first time.
        state_from_obs: build the global state by concatenating the agents' observations
            instead of calling `env.state()`; for envs (like mpe2) whose `state()` is defined
            as exactly that concatenation, it saves a second pass over the observations.
        image_stride: keep every s-th row and column of image observations and of an image
            state (nearest-neighbour downsampling: less memory and a smaller CNN); 1 keeps all.
    """

    python_stepped = True  # copies stepped one after another in Python: make_env(..., workers=W) splits them

    def __init__(self, make_env: Callable[[], object], num_envs: int, seed: int = 0,
                 state_from_obs: bool = False, image_stride: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if image_stride < 1:
            raise EnvError(f"image_stride must be at least 1 (1 keeps every pixel), got {image_stride}")
        self.image_stride = image_stride
        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs = num_envs
        self.seed = seed
        env0 = self.envs[0]
        self.agents = list(env0.possible_agents)
        self.n_agents = len(self.agents)

        # Observations: Box, or PettingZoo's Dict(observation=Box, action_mask=...) form.
        obs_spaces = [env0.observation_space(a) for a in self.agents]
        self._dict_obs = all(isinstance(s, spaces.Dict) and "observation" in s.spaces for s in obs_spaces)
        if self._dict_obs:
            obs_spaces = [s["observation"] for s in obs_spaces]
        shapes = [_obs_shape(s, a, image_stride) for s, a in zip(obs_spaces, self.agents)]
        if len({len(sh) for sh in shapes}) > 1:
            raise TypeError(f"observation spaces {obs_spaces} mix images (3-D Box) and vectors; the adapter "
                            "accepts all-image or all-vector observations")
        self.image_obs = len(shapes[0]) == 3
        if image_stride > 1 and not self.image_obs:
            raise EnvError(f"image_stride={image_stride} downsamples image observations, but these are "
                             f"vectors ({obs_spaces[0]}); leave it at 1")
        # Every axis is padded to the largest agent's; `_obs_slices[n]` is where agent n's values go.
        self.obs_shape = tuple(int(max(sh[k] for sh in shapes)) for k in range(len(shapes[0])))
        self._agent_shapes = shapes
        self._obs_slices = [tuple(slice(0, d) for d in sh) for sh in shapes]
        self.obs_dims = [int(np.prod(sh)) for sh in shapes]  # true (flattened) sizes
        self.obs_dim = int(np.prod(self.obs_shape))
        uint8 = self.image_obs and all(s.dtype == np.uint8 for s in obs_spaces)
        self.obs_dtype = np.uint8 if uint8 else np.float32

        # Actions: all Discrete, or all Box.
        act_spaces = [env0.action_space(a) for a in self.agents]
        if all(isinstance(s, spaces.Discrete) for s in act_spaces):
            self.discrete = True
            self.action_dims = [int(s.n) for s in act_spaces]
            self.n_actions = max(self.action_dims)
            self.action_dim = 1
            # Padded actions are never valid: an agent with 3 of 5 actions gets mask [1,1,1,0,0].
            self._pad_mask = np.arange(self.n_actions)[None, :] < np.array(self.action_dims)[:, None]
        elif all(isinstance(s, spaces.Box) and len(s.shape) == 1 for s in act_spaces):
            self.discrete = False
            self.action_dims = [int(s.shape[0]) for s in act_spaces]
            self.action_dim = max(self.action_dims)
            self.n_actions = 0
            self.action_low = np.zeros((self.n_agents, self.action_dim), np.float32)  # (N, act_dim)
            self.action_high = np.zeros((self.n_agents, self.action_dim), np.float32)  # (N, act_dim)
            for n, s in enumerate(act_spaces):
                self.action_low[n, : s.shape[0]] = s.low
                self.action_high[n, : s.shape[0]] = s.high
            self._pad_mask = np.arange(self.action_dim)[None, :] < np.array(self.action_dims)[:, None]
        else:
            raise TypeError(
                f"action spaces {act_spaces} are not supported: the adapter accepts all-Discrete "
                "or all-Box (1-D) action spaces"
            )
        self.action_dim_mask = self._pad_mask  # (N, n_actions or act_dim), True where real

        # The state's shape and whether infos carry action masks are read from one more copy, reset and
        # closed here, so that the copies themselves start untouched: some envs (LBF) do not reset to the
        # same episode from the same seed after an earlier reset, and copy i must depend on seed + i alone.
        probe = make_env()
        _, infos = probe.reset(seed=seed)
        self.state_from_obs = state_from_obs
        if not state_from_obs:
            try:  # PettingZoo's ParallelEnv defines state() but raises where the env has none
                self.state_shape = self._state_view(probe.state()).shape
            except (NotImplementedError, AttributeError):
                self.state_from_obs = True
        if self.state_from_obs:
            self.state_shape = (sum(self.obs_dims),)
        self.state_dim = int(np.prod(self.state_shape))
        info_masks = any(isinstance(i, dict) and "action_mask" in i for i in infos.values())
        self.has_action_mask = self.discrete and (self._dict_obs or info_masks)
        probe.close()
        E, N = num_envs, self.n_agents
        self._obs = np.zeros((E, N, *self.obs_shape), self.obs_dtype)
        self._state = np.zeros((E, self.state_dim), np.float32)
        self._mask = np.ones((E, N, max(self.n_actions, 1)), bool)
        self._ep_return = np.zeros((E, N), np.float32)
        self._ep_length = np.zeros(E, np.int64)
        self._started = False

    def _state_view(self, state) -> np.ndarray:
        """env.state() as the adapter keeps its shape: an image state downsampled like the observations."""
        state = np.asarray(state)
        return state[:: self.image_stride, :: self.image_stride] if state.ndim == 3 else state

    # ---------------------------------------------------------------- writing one copy
    def _write(self, i: int, env, obs: dict, infos: dict) -> None:
        """Fill row i of the obs/state/mask arrays from one copy's dicts."""
        self._obs[i] = 0.0
        for n, agent in enumerate(self.agents):
            if agent not in obs:
                continue  # absent (dead) agents keep zero observations
            o = obs[agent]
            if self._dict_obs:
                if self.discrete:
                    self._mask[i, n, : self.action_dims[n]] = np.asarray(o["action_mask"], bool)
                o = o["observation"]
            if self.image_obs:
                o = np.asarray(o)[:: self.image_stride, :: self.image_stride]
            self._obs[i, n][self._obs_slices[n]] = np.asarray(o).reshape(self._agent_shapes[n])
            info = infos.get(agent)
            if self.has_action_mask and not self._dict_obs and info and "action_mask" in info:
                self._mask[i, n, : self.action_dims[n]] = np.asarray(info["action_mask"], bool)
        if self.state_from_obs:
            # mpe2 defines state() as this very concatenation, in agent order.
            self._state[i] = np.concatenate([self._obs[i, n][sl].reshape(-1) for n, sl in enumerate(self._obs_slices)])
        else:
            self._state[i] = self._state_view(env.state()).reshape(-1)

    # ---------------------------------------------------------------- public API
    def reset(self):
        """Reset every copy (copy i with seed + i on the first call). Returns (obs, state, action_mask)."""
        for i, env in enumerate(self.envs):
            obs, infos = env.reset(seed=None if self._started else self.seed + i)
            self._write(i, env, obs, infos)
        self._started = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        if self.discrete:
            self._mask[:] = self._mask & self._pad_mask[None]
        return self._obs.copy(), self._state.copy(), self.action_mask()

    def action_mask(self) -> Optional[np.ndarray]:
        """(E, N, n_actions) bool for discrete actions (padding and env masks), else None."""
        return (self._mask & self._pad_mask[None]).copy() if self.discrete else None

    def step(self, actions: np.ndarray) -> VecStep:
        """Step every copy. actions: (E, N) int for discrete, (E, N, act_dim) float for continuous
        (numpy arrays or torch tensors)."""
        E, N = self.num_envs, self.n_agents
        reward = np.zeros((E, N), np.float32)
        terminated = np.zeros((E, N), bool)
        truncated = np.zeros((E, N), bool)
        alive = np.zeros((E, N), bool)
        done = np.zeros(E, bool)
        final_obs = np.empty_like(self._obs)
        final_state = np.empty_like(self._state)
        episode_return = np.zeros((E, N), np.float32)
        episode_length = np.zeros(E, np.int64)
        final_mask = np.ones_like(self._mask)
        if hasattr(actions, "cpu"):  # a torch tensor from the policy
            actions = actions.detach().cpu().numpy()
        if self.discrete:
            actions = np.asarray(actions).astype(np.int64, copy=False)
        else:
            actions = self.to_env_units(actions)
        for i, env in enumerate(self.envs):
            live = env.agents
            if self.discrete:
                act = {a: int(actions[i, n]) for n, a in enumerate(self.agents) if a in live}
            else:
                act = {a: actions[i, n, : self.action_dims[n]] for n, a in enumerate(self.agents) if a in live}
            obs, rew, term, trunc, infos = env.step(act)
            for n, a in enumerate(self.agents):
                if a in act:
                    alive[i, n] = True
                    reward[i, n] = rew.get(a, 0.0)
                    terminated[i, n] = term.get(a, False)
                    truncated[i, n] = trunc.get(a, False)
            if self.discrete:
                self._mask[i] = True
            self._write(i, env, obs, infos)
            self._ep_return[i] += reward[i]
            self._ep_length[i] += 1
            final_obs[i] = self._obs[i]
            final_state[i] = self._state[i]
            if self.discrete:
                final_mask[i] = self._mask[i]
            # The episode is over when no agent is left to act.
            if not env.agents or np.all(terminated[i] | truncated[i] | ~alive[i]):
                done[i] = True
                episode_return[i] = self._ep_return[i]
                episode_length[i] = self._ep_length[i]
                self._ep_return[i] = 0.0
                self._ep_length[i] = 0
                obs, infos = env.reset()
                if self.discrete:
                    self._mask[i] = True
                self._write(i, env, obs, infos)
        return VecStep(self._obs.copy(), self._state.copy(), reward, terminated, truncated, alive,
                       self.action_mask(), final_obs, final_state, done, episode_return, episode_length,
                       final_mask & self._pad_mask[None] if self.discrete else None)

    def to_env_units(self, actions: np.ndarray) -> np.ndarray:
        """Normalised continuous actions (E, N, act_dim) in [-1, 1] -> each agent's [low, high]."""
        unit = (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5
        return (self.action_low + unit * (self.action_high - self.action_low)).astype(np.float32)

    def sample_actions(self, rng: np.random.Generator) -> np.ndarray:
        """Uniform random valid actions: (E, N) indices, or (E, N, act_dim) in the normalised box
        [-1, 1] for continuous actions (uniform there is uniform within the env's bounds)."""
        if self.discrete:
            logits = rng.random((self.num_envs, self.n_agents, self.n_actions))
            return np.argmax(np.where(self.action_mask(), logits, -1.0), axis=-1)
        return rng.uniform(-1.0, 1.0, (self.num_envs, self.n_agents, self.action_dim)).astype(np.float32)

    def render(self) -> np.ndarray:
        """An RGB frame of copy 0 (the env must be built with render_mode='rgb_array')."""
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()
