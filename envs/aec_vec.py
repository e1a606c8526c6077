"""E copies of a turn-based PettingZoo game (the AEC API: chess, Go, connect four, poker, Hanabi)
in the batched shape of every other family.

A turn-based game has one agent to move at a time. The adapter keeps the parallel layout, one
batched step = one move in every copy, and says whose move it is:

    acting       (E, N)  bool, the agent whose turn it is in each copy (`env.acting` after reset,
                         `VecStep.acting` after a step: both for the coming step)
    action_mask  (E, N, n_actions), the mover's legal moves (from its observation dict); an agent
                         that is not to move gets its own mask where the game gives one, else every
                         action: whatever it picks is not played
    reward       (E, N)  what each agent received in this step, whoever moved: in tic-tac-toe the
                         loser's -1 arrives on the winner's move
    alive        (E, N)  the agent is in the game (every agent, in these two-player games)

So an algorithm must (a) play only the mover's action (the adapter ignores the others), (b) leave
steps where an agent did not move out of its losses, and (c) credit the rewards an agent receives
between two of its moves to the first of them, then bootstrap from its next move, not from the
next step (common/turns.py does (c) for the on-policy files). `turn_based = True` marks the
adapter, and the files that cannot honour it refuse it.

Observations are each agent's own view (`observe(agent)["observation"]`, from the mover's side in
the classic games: its pieces, then the opponent's), flattened to float32 vectors, or kept as
(H, W, C) float32 planes (`board="image"`, read by a CNN; the default for Go and chess, whose
boards are large). The global state is the concatenation of every agent's view. A finished game
resets at once; its final views are in `final_obs`. Copy i is reset with seed + i first.
"""
from typing import Callable, Optional

import numpy as np
from gymnasium import spaces

from envs.errors import EnvError
from envs.pettingzoo_vec import VecStep


class AECVecEnv:
    """E copies of a PettingZoo `AECEnv` with Dict observations ("observation", "action_mask") and
    Discrete actions, stepped one move at a time.

    Args:
        make_env: builds one fresh AEC env.
        num_envs: E.
        seed: copy i is reset with seed + i the first time.
        board: "flat" (observations flattened) or "image" (3-D observations kept as (H, W, C)).
    """

    python_stepped = True  # copies stepped one after another in Python: make_env(..., workers=W) splits them

    turn_based = True

    def __init__(self, make_env: Callable[[], object], num_envs: int, seed: int = 0, board: str = "flat"):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if board not in ("flat", "image"):
            raise EnvError(f"board must be 'flat' or 'image', got {board!r}")
        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs, self.seed = num_envs, seed
        env0 = self.envs[0]
        self.agents = list(env0.possible_agents)
        self.n_agents = len(self.agents)
        obs_spaces = [env0.observation_space(a) for a in self.agents]
        if not all(isinstance(s, spaces.Dict) and {"observation", "action_mask"} <= set(s.spaces) for s in obs_spaces):
            raise TypeError(f"observation spaces {obs_spaces}: the turn-based adapter needs PettingZoo's Dict "
                            "form with 'observation' and 'action_mask' (the classic games' own)")
        act_spaces = [env0.action_space(a) for a in self.agents]
        if not all(isinstance(s, spaces.Discrete) for s in act_spaces):
            raise TypeError(f"action spaces {act_spaces}: the turn-based adapter takes Discrete actions only")
        shapes = [tuple(s["observation"].shape) for s in obs_spaces]
        image = board == "image" and all(len(sh) == 3 for sh in shapes)
        if board == "image" and not image:
            raise EnvError(f"board='image' needs 3-D observations; these are {shapes[0]}: use board='flat'")
        self.image_obs = image
        self._shapes = shapes if image else [(int(np.prod(sh)),) for sh in shapes]
        self.obs_shape = tuple(int(max(sh[k] for sh in self._shapes)) for k in range(len(self._shapes[0])))
        self._slices = [tuple(slice(0, d) for d in sh) for sh in self._shapes]
        self.obs_dims = [int(np.prod(sh)) for sh in self._shapes]
        self.obs_dim = int(np.prod(self.obs_shape))
        self.obs_dtype = np.float32
        self.discrete, self.action_dim = True, 1
        self.action_dims = [int(s.n) for s in act_spaces]
        self.n_actions = max(self.action_dims)
        self.action_dim_mask = np.arange(self.n_actions)[None, :] < np.array(self.action_dims)[:, None]
        self.has_action_mask = True
        self.state_shape = (sum(self.obs_dims),)
        self.state_dim = self.state_shape[0]
        E, N = num_envs, self.n_agents
        self._obs = np.zeros((E, N, *self.obs_shape), np.float32)
        self._state = np.zeros((E, self.state_dim), np.float32)
        self._mask = np.zeros((E, N, self.n_actions), bool)
        self.acting = np.zeros((E, N), bool)
        self._ep_return = np.zeros((E, N), np.float32)
        self._ep_length = np.zeros(E, np.int64)
        self._started = False

    # ---------------------------------------------------------------- reading one copy
    def _read(self, i: int, env) -> None:
        """Row i of obs, state, masks and the mover, from the copy's current position."""
        self._obs[i] = 0.0
        self.acting[i] = False
        for n, agent in enumerate(self.agents):
            if agent not in env.agents:
                self._mask[i, n] = self.action_dim_mask[n]
                continue
            view = env.observe(agent)
            self._obs[i, n][self._slices[n]] = np.asarray(view["observation"], np.float32).reshape(self._shapes[n])
            legal = np.asarray(view["action_mask"], bool)
            self._mask[i, n] = False
            self._mask[i, n, : self.action_dims[n]] = legal if legal.any() else True  # not its move: any action
        mover = env.agent_selection if env.agents else None
        if mover is not None:
            self.acting[i, self.agents.index(mover)] = True
        self._state[i] = np.concatenate([self._obs[i, n][sl].reshape(-1) for n, sl in enumerate(self._slices)])

    def _collect(self, env, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Add one AEC step's rewards and end flags to a copy's row (N,), read at once: the pass of an agent
        out of the game (`_was_dead_step`) removes its entries and clears the rewards."""
        for n, agent in enumerate(self.agents):
            reward[n] += env.rewards.get(agent, 0.0)
            terminated[n] |= env.terminations.get(agent, False)
            truncated[n] |= env.truncations.get(agent, False)

    @staticmethod
    def _over(env) -> bool:
        return not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)

    # ---------------------------------------------------------------- public API
    def reset(self):
        """Reset every copy (copy i with seed + i on the first call). Returns (obs, state, action_mask);
        whose move it is is in `acting`."""
        for i, env in enumerate(self.envs):
            env.reset(seed=None if self._started else self.seed + i)
            self._read(i, env)
        self._started = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._obs.copy(), self._state.copy(), self._mask.copy()

    def action_mask(self) -> np.ndarray:
        return self._mask.copy()

    def step(self, actions) -> VecStep:
        """Play the mover's action in every copy: actions (E, N) ints (numpy or torch); the other
        agents' entries are ignored."""
        E, N = self.num_envs, self.n_agents
        if hasattr(actions, "cpu"):
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions).astype(np.int64, copy=False)
        reward = np.zeros((E, N), np.float32)
        terminated, truncated, alive = np.zeros((E, N), bool), np.zeros((E, N), bool), np.zeros((E, N), bool)
        done = np.zeros(E, bool)
        final_obs, final_state = np.empty_like(self._obs), np.empty_like(self._state)
        final_mask = np.empty_like(self._mask)
        episode_return, episode_length = np.zeros((E, N), np.float32), np.zeros(E, np.int64)
        for i, env in enumerate(self.envs):
            alive[i] = [a in env.agents for a in self.agents]
            mover = self.agents.index(env.agent_selection)
            env.step(int(actions[i, mover]))
            self._collect(env, reward[i], terminated[i], truncated[i])
            while env.agents and not self._over(env) and (env.terminations[env.agent_selection]
                                                         or env.truncations[env.agent_selection]):
                env.step(None)  # an agent out of the game passes (AEC's rule), until a live one moves
                self._collect(env, reward[i], terminated[i], truncated[i])
            self._ep_return[i] += reward[i]
            self._ep_length[i] += 1
            self._read(i, env)
            final_obs[i], final_state[i], final_mask[i] = self._obs[i], self._state[i], self._mask[i]
            if self._over(env):
                done[i] = True
                episode_return[i], episode_length[i] = self._ep_return[i], self._ep_length[i]
                self._ep_return[i], self._ep_length[i] = 0.0, 0
                env.reset()
                self._read(i, env)
        return VecStep(self._obs.copy(), self._state.copy(), reward, terminated, truncated, alive, self._mask.copy(),
                       final_obs, final_state, done, episode_return, episode_length, final_mask,
                       acting=self.acting.copy())

    def sample_actions(self, rng: np.random.Generator) -> np.ndarray:
        """(E, N) uniform random legal moves (every agent gets one; only the mover's is played)."""
        logits = rng.random((self.num_envs, self.n_agents, self.n_actions))
        return np.argmax(np.where(self._mask, logits, -1.0), axis=-1)

    def render(self) -> Optional[np.ndarray]:
        """An RGB frame of copy 0 (built with render_mode='rgb_array')."""
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()
