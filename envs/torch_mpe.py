"""MPE in batched torch: E copies stepped as tensors on the CPU or the GPU, step for step mpe2.

    from envs import make_env
    env = make_env("torch:simple_spread", num_envs=1024, seed=0, device="cuda")

Ported scenarios (`TORCH_SCENARIOS`): simple, simple_spread, simple_reference,
simple_speaker_listener, simple_adversary, simple_tag, simple_push.

Every copy of the world lives in a few tensors with the copies first: positions and velocities
`(E, M, 2)` for the M entities (agents, then landmarks, mpe2's `world.entities` order), the
agents' utterances `(E, N, dim_c)` and each scenario's per-episode draws (goal landmarks).
Per-entity constants (size, movable, collide, accel, max_speed) are `(M,)` / `(N,)` tensors, so
agents of different kinds (simple_tag's adversaries and prey, a speaker that cannot move) step
together. One step is a handful of tensor operations over all copies and all entities at once:
no Python loop over copies or agents. The physics, observations and rewards are mpe2 1.1's,
written in the same order (`mpe2/_mpe_utils/core.py`, `simple_env.py`, `<scenario>.py`);
`tests/test_torch_mpe.py` checks that from the same initial state and the same actions both
give the same observations, rewards and ends to within 1e-5.

The adapter surface is `PettingZooVecEnv`'s (same attributes, same `VecStep`), so every
algorithm runs unchanged; the arrays are torch tensors on `device` instead of numpy arrays.
It adds `state_dict()` / `load_state_dict()` / `observe()`, so that a resumed run goes on bitwise.
Agents whose observation or action sizes differ are padded to the largest (zeros after the
true entries); the true sizes are in `obs_dims` / `action_dims`, `action_dim_mask` (N, n_actions
or act_dim) is True where an action is real, and for discrete actions `action_mask()` is that
mask for every copy. Actions follow mpe2's spaces: an agent that moves and speaks has
Discrete(5 * dim_c) (`a % 5` moves, `a // 5` says) or a Box of 5 + dim_c; one that only speaks
has Discrete(dim_c) / Box(dim_c). Differences from the PettingZoo version, on purpose:
- random initial states come from one torch generator per env object (seeded with `seed`),
  not one numpy generator per copy, so the same seed gives other (equally distributed) worlds;
- there is no rendering (render the PettingZoo version of the same scenario instead);
- mpe2's partial observability (`num_agent_neighbors`, `num_landmark_neighbors`), curricula
  and `benchmark_data` infos are not ported: they are accepted only at their defaults.
"""
import inspect
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from envs.errors import EnvError, check_arguments, did_you_mean
from envs.pettingzoo_vec import VecStep
from envs.tensor_state import load_tensors, save_tensors


def _per(value, n: int, what: str) -> list:
    """A scalar, or one value per item, as a list of n values."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what}: expected {n} values, got {len(value)}")
        return list(value)
    return [value] * n


class TorchMPE:
    """Physics and the batched-adapter plumbing shared by every scenario.

    A scenario subclass sets the world in `__init__` (through `_make_world`), then calls
    `_finish_init(obs_dims)`, and defines `reset_world(idx)`, `observation()` (E, N, obs_dim),
    `reward()` (E, N) and, where the task can end early, `is_terminal()` (E,). Per-episode
    draws that the physics does not hold (goal landmarks) are tensors named in
    `scenario_state_names`, settable with `set_scenario_state`.
    """

    # world constants (mpe2 core.World)
    dim_p = 2
    dt = 0.1
    damping = 0.25
    contact_force = 1e2
    contact_margin = 1e-3
    move_dim = 2 * dim_p + 1  # no-op, left, right, down, up

    # per-episode scenario tensors (E, ...) that `set_scenario_state` may overwrite
    scenario_state_names: Tuple[str, ...] = ()
    # mpe2 arguments the port does not implement: name -> (the only accepted value, why)
    unsupported_args: Dict[str, Tuple[object, str]] = {}

    def __init__(self, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, max_cycles: int = 25, continuous_actions: bool = False,
                 local_ratio: Optional[float] = None):
        if num_envs < 1:
            raise EnvError(f"num_envs must be at least 1, got {num_envs}")
        if max_cycles < 1:
            raise EnvError(f"max_cycles must be at least 1, got {max_cycles}")
        if local_ratio is not None and not 0.0 <= local_ratio <= 1.0:
            raise EnvError(f"local_ratio is a proportion in [0, 1], got {local_ratio}")
        self.num_envs, self.seed = num_envs, seed
        self.device, self.dtype = torch.device(device), dtype
        self.max_cycles, self.continuous_actions, self.local_ratio = max_cycles, continuous_actions, local_ratio
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ world description
    def _make_world(self, n_agents: int, n_landmarks: int, agent_size, landmark_size, agent_collide,
                    landmark_collide, dim_c: int, silent, accel=None, max_speed=None, movable=True,
                    names: Optional[Sequence[str]] = None):
        """Entities are agents then landmarks. Every agent argument (size, collide, silent, accel,
        max_speed, movable) is one value for all agents or a list with one per agent; the
        landmark ones likewise per landmark. accel None is mpe2's default sensitivity 5; max_speed
        None is no limit. Per-entity constants become (M,) / (N,) tensors."""
        kw = dict(device=self.device, dtype=self.dtype)
        N, L = n_agents, n_landmarks
        self.n_agents, self.n_landmarks, self.n_entities = N, L, N + L
        self.agents = list(names) if names is not None else [f"agent_{i}" for i in range(N)]
        self.dim_c = dim_c
        silent = [bool(s) for s in _per(silent, N, "silent")]
        movable = [bool(m) for m in _per(movable, N, "movable")]
        self.size = torch.tensor(_per(agent_size, N, "agent_size") + _per(landmark_size, L, "landmark_size"), **kw)
        self.movable = torch.tensor(movable + [False] * L, device=self.device)  # (M,)
        self.agent_movable = self.movable[:N]  # (N,)
        self.agent_silent = torch.tensor(silent, device=self.device)  # (N,)
        collide = torch.tensor([bool(c) for c in _per(agent_collide, N, "agent_collide")]
                               + [bool(c) for c in _per(landmark_collide, L, "landmark_collide")], device=self.device)
        # contact forces only ever involve entities that collide: keep their indices (K,)
        self._colliders = torch.nonzero(collide).squeeze(1)
        K = self._colliders.numel()
        self.collide_pair = ~torch.eye(K, dtype=torch.bool, device=self.device)  # (K, K) among colliders
        self._collider_size_sum = self.size[self._colliders][:, None] + self.size[self._colliders][None, :]  # (K, K)
        self._collider_movable = self.movable[self._colliders]  # (K,)
        self.mass = 1.0  # mpe2 Entity.initial_mass; no ported scenario changes it
        self.accel = torch.tensor([5.0 if a is None else a for a in _per(accel, N, "accel")], **kw)  # (N,)
        speeds = [float("inf") if s is None else s for s in _per(max_speed, N, "max_speed")]
        self.max_speed = torch.tensor(speeds + [float("inf")] * L, **kw)  # (M,) inf: no limit
        self._limit_speed = bool(torch.isfinite(self.max_speed).any())
        E, M = self.num_envs, N + L
        self.pos = torch.zeros(E, M, self.dim_p, **kw)  # (E, M, 2)
        self.vel = torch.zeros(E, M, self.dim_p, **kw)  # (E, M, 2)
        self.comm = torch.zeros(E, N, dim_c, **kw)  # (E, N, dim_c) agents' utterances (mpe2 state.c)
        self.steps = torch.zeros(E, dtype=torch.long, device=self.device)  # (E,)
        self._move_table = torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], **kw)  # mpe2 _set_action

        # Adapter attributes (PettingZooVecEnv's names and meanings); sizes as mpe2 SimpleEnv
        self.discrete = not self.continuous_actions
        dims = []
        for mv, sl in zip(movable, silent, strict=True):
            d = self.move_dim if mv else (0 if self.continuous_actions else 1)
            if not sl:
                d = d + dim_c if self.continuous_actions else d * dim_c
            dims.append(d)
        if min(dims) < 1:
            raise ValueError("an agent that neither moves nor speaks has no continuous action")
        self.action_dims = dims
        # an agent that moves and speaks picks a (move, word) pair, a = word * move_dim + move: where every agent
        # does, these are the action's factors (nets.Actor's factored head, --factored-actions)
        pairs = self.discrete and dim_c > 1 and all(mv and not sl for mv, sl in zip(movable, silent))
        self.action_factors = (self.move_dim, dim_c) if pairs else None
        width = max(dims)
        if self.discrete:
            self.n_actions, self.action_dim = width, 1
        else:
            self.n_actions, self.action_dim = 0, width
        self.action_dim_mask = np.arange(width)[None, :] < np.array(dims)[:, None]  # (N, width) True where real
        if not self.discrete:
            self.action_low = np.zeros((N, width), np.float32)
            self.action_high = self.action_dim_mask.astype(np.float32)  # [0, 1] where real, 0 in the padding
            self._low_t = torch.as_tensor(self.action_low, device=self.device, dtype=self.dtype)  # (N, width)
            self._high_t = torch.as_tensor(self.action_high, device=self.device, dtype=self.dtype)
            self._act_width = max(width, self.move_dim)  # at least the movement columns
            # column of utterance k of agent i: after the 5 movement entries for agents that move
            offset = torch.tensor([self.move_dim if mv else 0 for mv in movable], device=self.device)
            self._comm_cols = (offset[:, None] + torch.arange(dim_c, device=self.device)[None, :]).clamp(
                max=self._act_width - 1)  # (N, dim_c); silent agents' columns are ignored
        self._mask_t = torch.as_tensor(self.action_dim_mask, device=self.device)
        self._dims_t = torch.tensor(dims, device=self.device)
        self.has_action_mask = False  # every real action is always available

    def _finish_init(self, obs_dims: Optional[List[int]] = None):
        """Sizes that need one observation to exist; call at the end of a scenario's __init__.
        obs_dims: each agent's true observation size (default: all the padded width)."""
        self.reset_world(torch.arange(self.num_envs, device=self.device))
        obs = self.observation()
        self.obs_dim = obs.shape[-1]
        self.obs_dims = list(obs_dims) if obs_dims is not None else [self.obs_dim] * self.n_agents
        if max(self.obs_dims) != self.obs_dim or len(self.obs_dims) != self.n_agents:
            raise RuntimeError(f"obs_dims {self.obs_dims} do not fit observations of width {self.obs_dim}")
        self.state_dim = sum(self.obs_dims)  # mpe2 state(): every agent's observation, concatenated
        self.obs_shape, self.state_shape = (self.obs_dim,), (self.state_dim,)  # flat vectors, never images
        if all(d == self.obs_dim for d in self.obs_dims):
            self._state_index = None  # the padded observations are already the concatenation
        else:
            self._state_index = torch.cat([torch.arange(d, device=self.device) + n * self.obs_dim
                                           for n, d in enumerate(self.obs_dims)])  # (state_dim,)
        self._ep_return = torch.zeros(self.num_envs, self.n_agents, dtype=torch.float32, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)

    def uniform(self, n: int, *shape, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        """n draws of U(low, high)^shape from this env's generator."""
        u = torch.rand(n, *shape, generator=self.gen, device=self.device, dtype=self.dtype)
        return low + (high - low) * u

    def randint(self, high: int, *shape) -> torch.Tensor:
        """Uniform integers in [0, high) from this env's generator."""
        return torch.randint(0, high, shape, generator=self.gen, device=self.device)

    def _reset_entities(self, idx: torch.Tensor, landmark_low: float = -1.0, landmark_high: float = 1.0) -> None:
        """Copies `idx`: agents uniform in [-1, 1]^2, landmarks uniform in [low, high]^2, all at
        rest, silent, step 0 (mpe2 draws the agents first)."""
        n, N = idx.numel(), self.n_agents
        if (landmark_low, landmark_high) == (-1.0, 1.0):
            self.pos[idx] = self.uniform(n, self.n_entities, self.dim_p)  # one draw, agents first
        else:
            self.pos[idx, :N] = self.uniform(n, N, self.dim_p)
            self.pos[idx, N:] = self.uniform(n, self.n_landmarks, self.dim_p, low=landmark_low, high=landmark_high)
        self.vel[idx] = 0.0
        self.comm[idx] = 0.0
        self.steps[idx] = 0

    # ------------------------------------------------------------------ observation helpers
    def _others(self, x: torch.Tensor) -> torch.Tensor:
        """x (E, N, ...) -> (E, N, N-1, ...): row i holds every j != i, in agent order."""
        N = x.shape[1]
        cache = self.__dict__.setdefault("_others_index", {})
        if N not in cache:
            cache[N] = torch.tensor([[j for j in range(N) if j != i] for i in range(N)], device=self.device,
                                    dtype=torch.long).reshape(N, N - 1)
        return x[:, cache[N]]

    def _pad_groups(self, blocks: Sequence[torch.Tensor]) -> torch.Tensor:
        """Observation blocks (E, n_g, d_g) of consecutive agent groups -> (E, N, max d_g), zero-padded."""
        width = max(b.shape[-1] for b in blocks)
        padded = [torch.nn.functional.pad(b, (0, width - b.shape[-1])) for b in blocks]
        return torch.cat(padded, dim=1)

    def _dist(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Euclidean distance over the last axis, as mpe2's sqrt(sum(square(.)))."""
        return torch.sqrt(((a - b) ** 2).sum(-1))

    # ------------------------------------------------------------------ physics (mpe2 core.World.step)
    def decode_actions(self, actions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """mpe2 simple_env._execute_world_step + _set_action, for every agent at once.

        actions: discrete (E, N) indices, or continuous (E, N, act_dim) in mpe2 units [0, 1].
        Returns the movement force u (E, N, 2) (times each agent's accel, zero for agents that
        cannot move) and the utterance c (E, N, dim_c) (zero for silent agents)."""
        E, N, C = self.num_envs, self.n_agents, self.dim_c
        move = self.agent_movable[:, None]  # (N, 1)
        if self.discrete:
            a = actions.long()
            u = self._move_table[a % self.move_dim]  # (E, N, 2); only movers' are kept below
            if C:
                say = torch.where(self.agent_movable, a // self.move_dim, a).clamp(0, C - 1)  # (E, N)
                c = torch.nn.functional.one_hot(say, C).to(self.dtype)
        else:
            a = actions.to(self.dtype)
            if a.shape[-1] < self._act_width:
                a = torch.nn.functional.pad(a, (0, self._act_width - a.shape[-1]))
            u = torch.stack([a[..., 2] - a[..., 1], a[..., 4] - a[..., 3]], dim=-1)  # (E, N, 2)
            if C:
                c = torch.gather(a, 2, self._comm_cols[None].expand(E, N, C))  # (E, N, dim_c)
        u = torch.where(move, u * self.accel[:, None], torch.zeros_like(u))
        if C:
            c = torch.where(self.agent_silent[:, None], torch.zeros_like(c), c)
        else:
            c = torch.zeros(E, N, 0, dtype=self.dtype, device=self.device)
        return u, c

    def action_force(self, actions: torch.Tensor) -> torch.Tensor:
        """Discrete (E, N) or continuous (E, N, act_dim) in mpe2 units -> movement force (E, N, 2)."""
        return self.decode_actions(actions)[0]

    def collision_force(self) -> torch.Tensor:
        """Soft contact forces on every entity (E, M, 2): mpe2 get_collision_force summed over pairs."""
        E, M = self.num_envs, self.n_entities
        out = torch.zeros(E, M, self.dim_p, dtype=self.dtype, device=self.device)
        if self._colliders.numel() < 2:
            return out
        pos = self.pos[:, self._colliders]  # (E, K, 2)
        delta = pos[:, :, None, :] - pos[:, None, :, :]  # (E, K, K, 2) pos_i - pos_j
        dist = torch.sqrt((delta ** 2).sum(-1))  # (E, K, K)
        dist = torch.where(self.collide_pair, dist, torch.ones_like(dist))  # no 0/0 on the diagonal
        k = self.contact_margin
        penetration = torch.logaddexp(torch.zeros_like(dist), -(dist - self._collider_size_sum) / k) * k
        force = self.contact_force * delta / dist[..., None] * penetration[..., None]  # (E, K, K, 2)
        force = torch.where(self.collide_pair[..., None], force, torch.zeros_like(force))
        out[:, self._colliders] = force.sum(2) * self._collider_movable[:, None]  # immovable feel nothing
        return out

    def integrate(self, force: torch.Tensor) -> None:
        """Semi-implicit Euler as in mpe2: position moves with the old velocity, then damping and
        force, then each entity's speed limit."""
        move = self.movable[None, :, None]
        self.pos = torch.where(move, self.pos + self.vel * self.dt, self.pos)
        vel = self.vel * (1 - self.damping) + (force / self.mass) * self.dt
        if self._limit_speed:
            speed = torch.sqrt((vel ** 2).sum(-1, keepdim=True))  # (E, M, 1)
            limit = self.max_speed[:, None]  # (M, 1)
            vel = torch.where(speed > limit, vel / speed * limit, vel)
        self.vel = torch.where(move, vel, self.vel)

    def world_step(self, actions: torch.Tensor) -> None:
        E, N = self.num_envs, self.n_agents
        u, c = self.decode_actions(actions)
        force = torch.zeros(E, self.n_entities, self.dim_p, dtype=self.dtype, device=self.device)
        force[:, :N] = u
        force = force + self.collision_force()
        self.integrate(force)
        self.comm = c  # mpe2 update_agent_state: state.c = action.c, zeros for silent agents

    # ------------------------------------------------------------------ adapter API
    def reset(self):
        """Reset every copy. Returns (obs (E, N, obs_dim), state (E, state_dim), action_mask or None)."""
        self.reset_world(torch.arange(self.num_envs, device=self.device))
        self._ep_return.zero_()
        self._ep_length.zero_()
        obs = self.observation()
        return obs.float(), self._state(obs), self.action_mask()

    def action_mask(self) -> Optional[torch.Tensor]:
        """(E, N, n_actions) bool for discrete actions, True where the action is real (every real
        MPE action is always available; padding is not); None for continuous actions."""
        if not self.discrete:
            return None
        return self._mask_t[None].expand(self.num_envs, self.n_agents, self.n_actions)

    def _state(self, obs: torch.Tensor) -> torch.Tensor:
        """(E, state_dim): every agent's true-size observation concatenated, as mpe2 state()."""
        flat = obs.reshape(self.num_envs, -1)
        if self._state_index is not None:
            flat = flat[:, self._state_index]
        return flat.float()

    def to_env_units(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised continuous actions (E, N, width) in [-1, 1] -> each agent's box [action_low, action_high]
        (mpe2's [0, 1]; clipped, as mpe2's wrapper clips), read from the bounds the env declares."""
        unit = (actions.clamp(-1.0, 1.0) + 1.0) * 0.5
        return self._low_t + unit * (self._high_t - self._low_t)

    def step(self, actions) -> VecStep:
        """Step every copy. actions: (E, N) int, or (E, N, act_dim) float in [-1, 1] (tensor or array)."""
        actions = torch.as_tensor(actions, device=self.device)
        if not self.discrete:
            actions = self.to_env_units(actions.to(self.dtype))
        self.world_step(actions)
        self.steps += 1
        reward = self.reward().float()  # (E, N)
        final_obs = self.observation()  # (E, N, obs_dim) before auto-reset
        truncated_e = self.steps >= self.max_cycles  # (E,)
        terminated_e = self.is_terminal() & ~truncated_e  # mpe2 checks the time limit first
        done = truncated_e | terminated_e
        E, N = self.num_envs, self.n_agents
        self._ep_return += reward
        self._ep_length += 1
        episode_return = torch.where(done[:, None], self._ep_return, torch.zeros_like(self._ep_return))
        episode_length = torch.where(done, self._ep_length, torch.zeros_like(self._ep_length))
        self._ep_return = torch.where(done[:, None], torch.zeros_like(self._ep_return), self._ep_return)
        self._ep_length = torch.where(done, torch.zeros_like(self._ep_length), self._ep_length)
        obs = final_obs
        if bool(done.any()):
            self.reset_world(torch.nonzero(done).squeeze(1))
            obs = self.observation()
        final_obs, obs = final_obs.float(), obs.float()
        return VecStep(obs=obs, state=self._state(obs), reward=reward,
                       terminated=terminated_e[:, None].expand(E, N), truncated=truncated_e[:, None].expand(E, N),
                       alive=torch.ones(E, N, dtype=torch.bool, device=self.device), action_mask=self.action_mask(),
                       final_obs=final_obs, final_state=self._state(final_obs), done=done,
                       episode_return=episode_return, episode_length=episode_length,
                       final_action_mask=self.action_mask())  # MPE masks never change

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """Uniform random real actions: (E, N) indices below each agent's action_dims, or
        (E, N, act_dim) in the normalised box [-1, 1] (zero in an agent's padding)."""
        E, N = self.num_envs, self.n_agents
        if self.discrete:
            if all(d == self.n_actions for d in self.action_dims):
                return torch.randint(0, self.n_actions, (E, N), generator=self.gen, device=self.device)
            u = torch.rand(E, N, generator=self.gen, device=self.device, dtype=torch.float64)
            return (u * self._dims_t).long().clamp(max=self._dims_t - 1)
        return (self.uniform(E, N, self.action_dim) * self._mask_t).float()

    def set_world(self, pos: torch.Tensor, vel: torch.Tensor, steps: Optional[torch.Tensor] = None,
                  comm: Optional[torch.Tensor] = None) -> None:
        """Overwrite positions / velocities (E, M, 2), and optionally step counts (E,) and
        utterances (E, N, dim_c) (tests start from mpe2's initial states)."""
        self.pos = torch.as_tensor(pos, dtype=self.dtype, device=self.device).clone()
        self.vel = torch.as_tensor(vel, dtype=self.dtype, device=self.device).clone()
        if steps is not None:
            self.steps = torch.as_tensor(steps, device=self.device).clone()
        if comm is not None:
            self.comm = torch.as_tensor(comm, dtype=self.dtype, device=self.device).reshape(self.comm.shape).clone()

    def set_scenario_state(self, **state) -> None:
        """Overwrite per-episode scenario draws (names in `scenario_state_names`, e.g. goal
        landmark indices), one row per copy (tests copy them from mpe2's worlds)."""
        unknown = sorted(set(state) - set(self.scenario_state_names))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no scenario state {unknown}; it has "
                             f"{list(self.scenario_state_names) or 'none'}")
        for name, value in state.items():
            current = getattr(self, name)
            setattr(self, name, torch.as_tensor(value, dtype=current.dtype, device=self.device)
                    .reshape(current.shape).clone())

    def is_terminal(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    # ------------------------------------------------------------------ exact resume
    def state_dict(self) -> Dict[str, torch.Tensor]:
        """Everything that decides the next steps and what they report, as tensors that
        `torch.load(weights_only=True)` accepts: every copy's world (positions, velocities,
        utterances, step counts, the scenario's per-episode draws), the returns and lengths of the
        episodes in flight, and the generator's state."""
        names = ("pos", "vel", "comm", "steps", "_ep_return", "_ep_length") + self.scenario_state_names
        return save_tensors(self, names)

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        """Put back what `state_dict()` saved (same scenario and number of copies); the next step is
        then the one the saving env would have taken, and `observe()` gives what its last step returned."""
        load_tensors(self, state, type(self).__name__, "another number of copies or agents")

    def observe(self):
        """(obs, state, action_mask) of the world as it stands: what the last reset or step returned."""
        obs = self.observation().float()
        return obs, self._state(obs), self.action_mask()

    def render(self):
        raise NotImplementedError("the torch MPE does not render; render the PettingZoo version of the "
                                  "same scenario (drop the 'torch:' prefix)")

    def close(self) -> None:
        pass


# mpe2 arguments the port takes only at their default (see make_torch_mpe); Ellipsis: any value, ignored
_RENDER_ONLY = {"dynamic_rescaling": (..., "it only changes how mpe2 draws; the port does not draw")}
_BENCHMARK = {"benchmark_data": (False, "mpe2's benchmark_data infos are not ported")}
_PARTIAL_OBS = {name: (None, "mpe2's partial observability (nearest-neighbour observations) is not ported")
                for name in ("num_agent_neighbors", "num_landmark_neighbors")}
_CURRICULUM = {"curriculum": (False, "mpe2's curriculum stages are not ported")}


class Simple(TorchMPE):
    """mpe2 simple_v3: one agent, one landmark; reward minus the squared distance to it."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK}

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, max_cycles: int = 25,
                 continuous_actions: bool = False):
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions)
        self._make_world(1, 1, agent_size=0.05, landmark_size=0.05, agent_collide=False, landmark_collide=False,
                         dim_c=0, silent=True)
        self._finish_init()

    def reset_world(self, idx: torch.Tensor) -> None:
        self._reset_entities(idx)

    def reward(self) -> torch.Tensor:
        return -((self.pos[:, :1] - self.pos[:, 1:]) ** 2).sum(-1)  # (E, 1)

    def observation(self) -> torch.Tensor:
        """[self_vel, landmark_rel_position] (E, 1, 4)."""
        return torch.cat([self.vel[:, :1], self.pos[:, 1:] - self.pos[:, :1]], dim=-1)


class SimpleSpread(TorchMPE):
    """mpe2 simple_spread_v3: N agents cover N landmarks; shared reward is minus the sum over
    landmarks of the distance to the nearest agent, local reward -1 per collision."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK, **_PARTIAL_OBS, **_CURRICULUM}

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, N: int = 3,
                 local_ratio: float = 0.5, max_cycles: int = 25, continuous_actions: bool = False,
                 terminate_on_success: bool = False):
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions, local_ratio)
        self.terminate_on_success = terminate_on_success
        self._make_world(N, N, agent_size=0.15, landmark_size=0.05, agent_collide=True, landmark_collide=False,
                         dim_c=2, silent=True)
        self._finish_init()

    def reset_world(self, idx: torch.Tensor) -> None:
        """Copies `idx` get agents and landmarks uniform in [-1, 1]^2 at rest (mpe2 draws the agents first)."""
        self._reset_entities(idx)

    def _agent_landmark_dist(self) -> torch.Tensor:
        N = self.n_agents
        return self._dist(self.pos[:, :N, None, :], self.pos[:, None, N:, :])  # (E, N, L)

    def is_terminal(self) -> torch.Tensor:
        if not self.terminate_on_success:
            return super().is_terminal()
        return (self._agent_landmark_dist().min(1).values < 0.1).all(-1)  # every landmark covered

    def reward(self) -> torch.Tensor:
        N = self.n_agents
        global_reward = -self._agent_landmark_dist().min(1).values.sum(-1)  # (E,)
        agents = self.pos[:, :N]
        dist = self._dist(agents[:, :, None], agents[:, None])  # (E, N, N)
        size = self.size[:N]
        hit = (dist < size[:, None] + size[None, :]) & ~torch.eye(N, dtype=torch.bool, device=self.device)
        local = -hit.to(self.dtype).sum(-1)  # (E, N) -1 per other agent touching this one
        return global_reward[:, None] * (1 - self.local_ratio) + local * self.local_ratio

    def observation(self) -> torch.Tensor:
        """[self_vel, self_pos, landmark_rel_positions, other_agent_rel_positions, others' comm] (E, N, obs_dim)."""
        N = self.n_agents
        agents = self.pos[:, :N]  # (E, N, 2)
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).flatten(2)  # (E, N, 2L)
        agent_rel = (self._others(agents) - agents[:, :, None]).flatten(2)  # (E, N, 2(N-1))
        comm = self._others(self.comm).flatten(2)  # (E, N, dim_c(N-1))
        return torch.cat([self.vel[:, :N], agents, landmark_rel, agent_rel, comm], dim=-1)


class SimpleReference(TorchMPE):
    """mpe2 simple_reference_v3: 2 agents that move and speak (dim_c 10), 3 coloured landmarks.
    Agent i knows (sees the colour of) the landmark the other agent should reach; its local
    reward is minus that distance, the global reward the mean over agents."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK}
    scenario_state_names = ("goal",)
    landmark_colors = [[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]]

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, local_ratio: float = 0.5,
                 max_cycles: int = 25, continuous_actions: bool = False):
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions, local_ratio)
        self._make_world(2, 3, agent_size=0.05, landmark_size=0.05, agent_collide=False, landmark_collide=False,
                         dim_c=10, silent=False)
        self.colors = torch.tensor(self.landmark_colors, device=self.device, dtype=dtype)  # (L, 3)
        # goal[e, i]: the landmark agent i wants the OTHER agent to reach (mpe2 agent.goal_b)
        self.goal = torch.zeros(num_envs, 2, dtype=torch.long, device=self.device)
        self._finish_init()

    def reset_world(self, idx: torch.Tensor) -> None:
        self.goal[idx] = self.randint(self.n_landmarks, idx.numel(), 2)
        self._reset_entities(idx)

    def _local_reward(self) -> torch.Tensor:
        N = self.n_agents
        goal_pos = torch.gather(self.pos[:, N:], 1, self.goal[..., None].expand(-1, -1, self.dim_p))  # (E, 2, 2)
        listener = self.pos[:, [1, 0]]  # agent i's goal_a is the other agent
        return -self._dist(listener, goal_pos)  # (E, 2)

    def reward(self) -> torch.Tensor:
        local = self._local_reward()
        global_reward = local.sum(-1, keepdim=True) / self.n_agents
        return global_reward * (1 - self.local_ratio) + local * self.local_ratio

    def observation(self) -> torch.Tensor:
        """[self_vel, landmark_rel_positions, goal_landmark_color, other's comm] (E, 2, 21)."""
        N = self.n_agents
        agents = self.pos[:, :N]
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).flatten(2)  # (E, 2, 6)
        return torch.cat([self.vel[:, :N], landmark_rel, self.colors[self.goal], self.comm[:, [1, 0]]], dim=-1)


class SimpleSpeakerListener(TorchMPE):
    """mpe2 simple_speaker_listener_v4: a speaker that cannot move sees the goal landmark's colour
    and says one of 3 words; a silent listener moves. Both get minus the listener's squared
    distance to the goal."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK}
    scenario_state_names = ("goal",)
    landmark_colors = [[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]]

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, max_cycles: int = 25,
                 continuous_actions: bool = False):
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions)
        self._make_world(2, 3, agent_size=0.075, landmark_size=0.04, agent_collide=False, landmark_collide=False,
                         dim_c=3, silent=[False, True], movable=[False, True], names=["speaker_0", "listener_0"])
        self.colors = torch.tensor(self.landmark_colors, device=self.device, dtype=dtype)  # (L, 3)
        self.goal = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # (E,) the listener's landmark
        self._finish_init(obs_dims=[3, 2 + 2 * self.n_landmarks + self.dim_c])

    def reset_world(self, idx: torch.Tensor) -> None:
        self.goal[idx] = self.randint(self.n_landmarks, idx.numel())
        self._reset_entities(idx)

    def reward(self) -> torch.Tensor:
        goal_pos = self.pos[torch.arange(self.num_envs, device=self.device), self.n_agents + self.goal]  # (E, 2)
        dist2 = ((self.pos[:, 1] - goal_pos) ** 2).sum(-1)
        return -dist2[:, None].expand(self.num_envs, 2)

    def observation(self) -> torch.Tensor:
        """speaker: [goal_color] (3); listener: [self_vel, landmark_rel_positions, speaker's comm] (11)."""
        N = self.n_agents
        speaker = self.colors[self.goal][:, None]  # (E, 1, 3)
        listener = torch.cat([self.vel[:, 1], (self.pos[:, N:] - self.pos[:, 1:2]).flatten(1),
                              self.comm[:, 0]], dim=-1)[:, None]  # (E, 1, 11)
        return self._pad_groups([speaker, listener])


class SimpleAdversary(TorchMPE):
    """mpe2 simple_adversary_v3: 1 adversary and N good agents, N landmarks, one of them the
    goal (known to the good agents only). The adversary gets minus its distance to the goal;
    the good agents minus the nearest good agent's distance plus the adversary's distance."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK, **_PARTIAL_OBS}
    scenario_state_names = ("goal",)

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, N: int = 2,
                 max_cycles: int = 25, continuous_actions: bool = False):
        if N < 1:
            raise EnvError(f"simple_adversary needs N >= 1 good agents, got {N}")
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions)
        self.num_adversaries = 1
        self._make_world(N + 1, N, agent_size=0.15, landmark_size=0.08, agent_collide=False, landmark_collide=False,
                         dim_c=2, silent=True, names=["adversary_0"] + [f"agent_{i}" for i in range(N)])
        self.goal = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # (E,) goal landmark
        self._finish_init(obs_dims=[4 * N] + [4 * N + 2] * N)

    def reset_world(self, idx: torch.Tensor) -> None:
        self.goal[idx] = self.randint(self.n_landmarks, idx.numel())
        self._reset_entities(idx)

    def _goal_pos(self) -> torch.Tensor:
        return self.pos[torch.arange(self.num_envs, device=self.device), self.n_agents + self.goal]  # (E, 2)

    def reward(self) -> torch.Tensor:
        A, N = self.num_adversaries, self.n_agents
        dist = self._dist(self.pos[:, :N], self._goal_pos()[:, None])  # (E, N) every agent to the goal
        adversary = -dist[:, :A]  # (E, A)
        good = -dist[:, A:].min(-1).values + dist[:, :A].sum(-1)  # (E,)
        return torch.cat([adversary, good[:, None].expand(-1, N - A)], dim=1)

    def observation(self) -> torch.Tensor:
        """adversary: [landmark_rel_positions, other_agent_rel_positions];
        good: [goal_rel_position, landmark_rel_positions, other_agent_rel_positions]."""
        N, A = self.n_agents, self.num_adversaries
        agents = self.pos[:, :N]
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).flatten(2)  # (E, N, 2L)
        agent_rel = (self._others(agents) - agents[:, :, None]).flatten(2)  # (E, N, 2(N-1))
        goal_rel = self._goal_pos()[:, None] - agents[:, A:]  # (E, N-A, 2)
        adversary = torch.cat([landmark_rel[:, :A], agent_rel[:, :A]], dim=-1)
        good = torch.cat([goal_rel, landmark_rel[:, A:], agent_rel[:, A:]], dim=-1)
        return self._pad_groups([adversary, good])


class SimpleTag(TorchMPE):
    """mpe2 simple_tag_v3: slower, bigger adversaries chase faster good agents among obstacles
    that collide. Each adversary gets +10 for every (good agent, adversary) contact; a good
    agent gets -10 per adversary touching it and a penalty for leaving [-0.9, 0.9]^2."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK, **_PARTIAL_OBS, **_CURRICULUM}

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, num_good: int = 1,
                 num_adversaries: int = 3, num_obstacles: int = 2, max_cycles: int = 25,
                 continuous_actions: bool = False, terminate_on_success: bool = False):
        if num_good < 1 or num_adversaries < 1 or num_obstacles < 0:
            raise EnvError("simple_tag needs num_good >= 1, num_adversaries >= 1 and num_obstacles >= 0, got "
                             f"{num_good}, {num_adversaries}, {num_obstacles}")
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions)
        self.num_good, self.num_adversaries, self.terminate_on_success = num_good, num_adversaries, terminate_on_success
        A, G = num_adversaries, num_good
        self._make_world(A + G, num_obstacles, agent_size=[0.075] * A + [0.05] * G, landmark_size=0.2,
                         agent_collide=True, landmark_collide=True, dim_c=2, silent=True,
                         accel=[3.0] * A + [4.0] * G, max_speed=[1.0] * A + [1.3] * G,
                         names=[f"adversary_{i}" for i in range(A)] + [f"agent_{i}" for i in range(G)])
        base = 4 + 2 * num_obstacles + 2 * (A + G - 1)
        self._finish_init(obs_dims=[base + 2 * G] * A + [base + 2 * (G - 1)] * G)

    def reset_world(self, idx: torch.Tensor) -> None:
        self._reset_entities(idx, landmark_low=-0.9, landmark_high=0.9)  # obstacles in [-0.9, 0.9]^2

    def _catches(self) -> torch.Tensor:
        """(E, A, G) adversary a touches good agent g (mpe2 is_collision: dist < size sum)."""
        A, N = self.num_adversaries, self.n_agents
        dist = self._dist(self.pos[:, :A, None], self.pos[:, None, A:N])
        return dist < self.size[:A, None] + self.size[None, A:N]

    def is_terminal(self) -> torch.Tensor:
        if not self.terminate_on_success:
            return super().is_terminal()
        return self._catches().any(1).all(-1)  # every good agent touched by some adversary

    def reward(self) -> torch.Tensor:
        A, N = self.num_adversaries, self.n_agents
        hit = self._catches().to(self.dtype)  # (E, A, G)
        adversary = 10.0 * hit.sum((1, 2))  # (E,) the same for every adversary
        x = self.pos[:, A:N].abs()  # (E, G, 2)
        bound = torch.where(x < 0.9, torch.zeros_like(x),
                            torch.where(x < 1.0, (x - 0.9) * 10, torch.clamp(torch.exp(2 * x - 2), max=10.0)))
        good = -10.0 * hit.sum(1) - bound.sum(-1)  # (E, G)
        return torch.cat([adversary[:, None].expand(-1, A), good], dim=1)

    def observation(self) -> torch.Tensor:
        """[self_vel, self_pos, landmark_rel_positions, other_agent_rel_positions, other good agents' vel]."""
        N, A = self.n_agents, self.num_adversaries
        agents = self.pos[:, :N]
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).flatten(2)  # (E, N, 2L)
        agent_rel = (self._others(agents) - agents[:, :, None]).flatten(2)  # (E, N, 2(N-1))
        common = torch.cat([self.vel[:, :N], agents, landmark_rel, agent_rel], dim=-1)
        good_vel = self.vel[:, A:N]  # (E, G, 2)
        adversary = torch.cat([common[:, :A], good_vel.flatten(1)[:, None].expand(-1, A, -1)], dim=-1)
        good = torch.cat([common[:, A:], self._others(good_vel).flatten(2)], dim=-1)
        return self._pad_groups([adversary, good])


class SimplePush(TorchMPE):
    """mpe2 simple_push_v3: a good agent (knowing the goal) and an adversary, 2 landmarks, agents
    collide. The good agent gets minus its distance to the goal; the adversary the good agent's
    distance minus its own."""

    unsupported_args = {**_RENDER_ONLY, **_BENCHMARK}
    scenario_state_names = ("goal",)

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, max_cycles: int = 25,
                 continuous_actions: bool = False):
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions)
        self.num_adversaries = 1
        self._make_world(2, 2, agent_size=0.05, landmark_size=0.05, agent_collide=True, landmark_collide=False,
                         dim_c=2, silent=True, names=["adversary_0", "agent_0"])
        kw = dict(device=self.device, dtype=dtype)
        # mpe2: landmark i is [0.1, 0.1, 0.1] + 0.8 on channel i + 1; the good agent [0.25] * 3 + 0.5
        # on channel goal + 1
        self.landmark_colors = torch.full((2, 3), 0.1, **kw) + 0.8 * torch.eye(3, **kw)[1:]
        self.agent_colors = torch.full((2, 3), 0.25, **kw) + 0.5 * torch.eye(3, **kw)[1:]  # by goal
        self.goal = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # (E,) goal landmark
        self._finish_init(obs_dims=[8, 19])

    def reset_world(self, idx: torch.Tensor) -> None:
        self.goal[idx] = self.randint(self.n_landmarks, idx.numel())
        self._reset_entities(idx)

    def _goal_pos(self) -> torch.Tensor:
        return self.pos[torch.arange(self.num_envs, device=self.device), self.n_agents + self.goal]  # (E, 2)

    def reward(self) -> torch.Tensor:
        dist = self._dist(self.pos[:, :2], self._goal_pos()[:, None])  # (E, 2) adversary, good agent
        return torch.stack([dist[:, 1] - dist[:, 0], -dist[:, 1]], dim=1)

    def observation(self) -> torch.Tensor:
        """adversary: [self_vel, landmark_rel_positions, other_rel_position] (8);
        good: [self_vel, goal_rel, own_color, landmark_rel_positions, landmark_colors, other_rel_position] (19)."""
        E, N = self.num_envs, self.n_agents
        agents = self.pos[:, :N]
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).flatten(2)  # (E, 2, 4)
        other_rel = agents[:, [1, 0]] - agents  # (E, 2, 2)
        adversary = torch.cat([self.vel[:, 0], landmark_rel[:, 0], other_rel[:, 0]], dim=-1)[:, None]
        good = torch.cat([self.vel[:, 1], self._goal_pos() - agents[:, 1], self.agent_colors[self.goal],
                          landmark_rel[:, 1], self.landmark_colors.reshape(1, -1).expand(E, -1), other_rel[:, 1]],
                         dim=-1)[:, None]
        return self._pad_groups([adversary, good])


TORCH_SCENARIOS = {
    "simple": Simple,
    "simple_spread": SimpleSpread,
    "simple_reference": SimpleReference,
    "simple_speaker_listener": SimpleSpeakerListener,
    "simple_adversary": SimpleAdversary,
    "simple_tag": SimpleTag,
    "simple_push": SimplePush,
}


def _scenario(name: str) -> type:
    if name not in TORCH_SCENARIOS:
        raise EnvError(f"no torch port of {name!r}; {did_you_mean(name, TORCH_SCENARIOS)}"
                       f"ported scenarios: {', '.join(TORCH_SCENARIOS)}")
    return TORCH_SCENARIOS[name]


def arguments(name: str) -> Dict[str, object]:
    """A ported scenario's arguments with their defaults (mpe2's, under mpe2's names)."""
    params = inspect.signature(_scenario(name).__init__).parameters
    return {k: p.default for k, p in params.items() if k not in ("self", "num_envs", "seed", "device", "dtype")}


def ported_kwargs(name: str, kwargs: Dict[str, object]) -> Dict[str, object]:
    """kwargs without the mpe2 arguments the port does not implement, which it accepts only at
    mpe2's default (they change nothing then); another value of one fails with the reason."""
    cls, kwargs = _scenario(name), dict(kwargs)
    for key in [k for k in kwargs if k in cls.unsupported_args]:
        default, why = cls.unsupported_args[key]
        if default is ... or kwargs[key] == default:
            kwargs.pop(key)  # mpe2's default: the port already behaves so
        else:
            raise EnvError(f"torch:{name} does not support {key}={kwargs[key]!r} ({why}; only {default!r} "
                           f"is accepted); drop the 'torch:' prefix to run mpe2 itself. accepted: "
                           f"{', '.join(arguments(name))}")
    return kwargs


def make_torch_mpe(name: str, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, **kwargs) -> TorchMPE:
    """Build E copies of a ported scenario. mpe2 arguments the port does not implement are
    accepted only at mpe2's default (ported_kwargs); other values, unknown arguments and values
    of the wrong type or out of range raise EnvError with the reason and what is accepted."""
    kwargs = ported_kwargs(name, kwargs)
    check_arguments(f"torch:{name}", kwargs, arguments(name))
    return TORCH_SCENARIOS[name](num_envs, seed, device, dtype, **kwargs)


__all__ = ["TorchMPE", "TORCH_SCENARIOS", "make_torch_mpe", "Simple", "SimpleSpread", "SimpleReference",
           "SimpleSpeakerListener", "SimpleAdversary", "SimpleTag", "SimplePush"]
