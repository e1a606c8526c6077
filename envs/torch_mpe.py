"""MPE in batched torch: E copies stepped as tensors on the CPU or the GPU, step for step mpe2.

    from envs import make_env
    env = make_env("torch:simple_spread", num_envs=1024, seed=0, device="cuda")

Every copy of the world lives in a few tensors with the copies first: positions and velocities
`(E, M, 2)` for the M entities (agents, then landmarks, mpe2's `world.entities` order). One
step is a handful of tensor operations over all copies and all entities at once: no Python
loop over copies or agents. The physics, observations and rewards are mpe2 1.1's, written in
the same order (`mpe2/_mpe_utils/core.py`, `simple_env.py`, `<scenario>.py`);
`tests/test_torch_mpe.py` checks that from the same initial state and the same actions both
give the same observations, rewards and ends to within 1e-5.

The adapter surface is `PettingZooVecEnv`'s (same attributes, same `VecStep`), so every
algorithm runs unchanged; the arrays are torch tensors on `device` instead of numpy arrays.
Differences from the PettingZoo version, on purpose:
- random initial states come from one torch generator per env object (seeded with `seed`),
  not one numpy generator per copy, so the same seed gives other (equally distributed) worlds;
- there is no rendering (render the PettingZoo version of the same scenario instead).
"""
import inspect
from typing import Optional, Union

import numpy as np
import torch

from envs.pettingzoo_vec import VecStep


class TorchMPE:
    """Physics and the batched-adapter plumbing shared by every scenario.

    A scenario subclass sets the world in `__init__` (through `_make_world`) and defines
    `reset_world(idx)`, `observation()` (E, N, obs_dim), `reward()` (E, N) and, where the task
    can end early, `is_terminal()` (E,).
    """

    # world constants (mpe2 core.World)
    dim_p = 2
    dt = 0.1
    damping = 0.25
    contact_force = 1e2
    contact_margin = 1e-3

    def __init__(self, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, max_cycles: int = 25, continuous_actions: bool = False,
                 local_ratio: Optional[float] = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.num_envs, self.seed = num_envs, seed
        self.device, self.dtype = torch.device(device), dtype
        self.max_cycles, self.continuous_actions, self.local_ratio = max_cycles, continuous_actions, local_ratio
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ world description
    def _make_world(self, n_agents: int, n_landmarks: int, agent_size: float, landmark_size: float,
                    agent_collide: bool, landmark_collide: bool, dim_c: int, silent: bool,
                    accel: Optional[float] = None, max_speed: Optional[float] = None):
        """Entities are agents then landmarks; per-entity constants become (M,) tensors."""
        kw = dict(device=self.device, dtype=self.dtype)
        N, L = n_agents, n_landmarks
        self.n_agents, self.n_landmarks, self.n_entities = N, L, N + L
        self.agents = [f"agent_{i}" for i in range(N)]
        self.dim_c, self.silent = dim_c, silent
        self.size = torch.tensor([agent_size] * N + [landmark_size] * L, **kw)  # (M,)
        self.movable = torch.tensor([True] * N + [False] * L, device=self.device)  # (M,)
        collide = torch.tensor([agent_collide] * N + [landmark_collide] * L, device=self.device)
        self.collide_pair = (collide[:, None] & collide[None, :]) & ~torch.eye(N + L, dtype=torch.bool, device=self.device)
        self.mass = 1.0  # mpe2 Entity.initial_mass; no scenario ported here changes it
        self.accel = 5.0 if accel is None else accel  # mpe2's "sensitivity"
        self.max_speed = max_speed
        E, M = self.num_envs, N + L
        self.pos = torch.zeros(E, M, self.dim_p, **kw)  # (E, M, 2)
        self.vel = torch.zeros(E, M, self.dim_p, **kw)  # (E, M, 2)
        self.comm = torch.zeros(E, N, dim_c, **kw)  # (E, N, dim_c) agents' utterances
        self.steps = torch.zeros(E, dtype=torch.long, device=self.device)  # (E,)
        # Adapter attributes (PettingZooVecEnv's names and meanings)
        self.discrete = not self.continuous_actions
        move_dim = self.dim_p * 2 + 1  # no-op, left, right, down, up
        if self.discrete:
            self.action_dims, self.n_actions, self.action_dim = [move_dim] * N, move_dim, 1
        else:
            self.action_dims, self.n_actions, self.action_dim = [move_dim] * N, 0, move_dim
            self.action_low = np.zeros((N, move_dim), np.float32)
            self.action_high = np.ones((N, move_dim), np.float32)
        self.action_dim_mask = np.ones((N, max(self.n_actions, self.action_dim)), bool)
        self.has_action_mask = False

    def _finish_init(self):
        """Sizes that need one observation to exist; call at the end of a scenario's __init__."""
        self.reset_world(torch.arange(self.num_envs, device=self.device))
        obs = self.observation()
        self.obs_dim = obs.shape[-1]
        self.obs_dims = [self.obs_dim] * self.n_agents
        self.state_dim = self.obs_dim * self.n_agents  # mpe2 state(): every agent's observation
        self._ep_return = torch.zeros(self.num_envs, self.n_agents, dtype=torch.float32, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)

    def uniform(self, n: int, *shape) -> torch.Tensor:
        """n draws of U(-1, 1)^shape from this env's generator."""
        u = torch.rand(n, *shape, generator=self.gen, device=self.device, dtype=self.dtype)
        return 2.0 * u - 1.0

    # ------------------------------------------------------------------ physics (mpe2 core.World.step)
    def action_force(self, actions: torch.Tensor) -> torch.Tensor:
        """Discrete (E, N) indices or continuous (E, N, 5) in mpe2 units [0, 1] -> force u (E, N, 2)."""
        if self.discrete:
            # mpe2 simple_env._set_action: 1 -> -x, 2 -> +x, 3 -> -y, 4 -> +y
            table = torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=self.dtype, device=self.device)
            u = table[actions.long()]  # (E, N, 2)
        else:
            a = actions.to(self.dtype)
            u = torch.stack([a[..., 2] - a[..., 1], a[..., 4] - a[..., 3]], dim=-1)  # (E, N, 2)
        return u * self.accel

    def collision_force(self) -> torch.Tensor:
        """Soft contact forces on every entity (E, M, 2): mpe2 get_collision_force summed over pairs."""
        delta = self.pos[:, :, None, :] - self.pos[:, None, :, :]  # (E, M, M, 2) pos_i - pos_j
        dist = torch.sqrt((delta ** 2).sum(-1))  # (E, M, M)
        dist = torch.where(self.collide_pair, dist, torch.ones_like(dist))  # no 0/0 on the diagonal
        dist_min = self.size[:, None] + self.size[None, :]  # (M, M)
        k = self.contact_margin
        penetration = torch.logaddexp(torch.zeros_like(dist), -(dist - dist_min) / k) * k  # softmax penetration
        force = self.contact_force * delta / dist[..., None] * penetration[..., None]  # (E, M, M, 2)
        force = torch.where(self.collide_pair[..., None], force, torch.zeros_like(force))
        return force.sum(2) * self.movable[:, None]  # (E, M, 2) immovable entities feel nothing

    def integrate(self, force: torch.Tensor) -> None:
        """Semi-implicit Euler as in mpe2: position moves with the old velocity, then damping and force."""
        move = self.movable[None, :, None]
        self.pos = torch.where(move, self.pos + self.vel * self.dt, self.pos)
        vel = self.vel * (1 - self.damping) + (force / self.mass) * self.dt
        if self.max_speed is not None:
            speed = torch.sqrt((vel ** 2).sum(-1, keepdim=True))
            vel = torch.where(speed > self.max_speed, vel / speed * self.max_speed, vel)
        self.vel = torch.where(move, vel, self.vel)

    def world_step(self, actions: torch.Tensor) -> None:
        E, N = self.num_envs, self.n_agents
        force = torch.zeros(E, self.n_entities, self.dim_p, dtype=self.dtype, device=self.device)
        force[:, :N] = self.action_force(actions)
        force = force + self.collision_force()
        self.integrate(force)

    # ------------------------------------------------------------------ adapter API
    def reset(self):
        """Reset every copy. Returns (obs (E, N, obs_dim), state (E, state_dim), action_mask or None)."""
        self.reset_world(torch.arange(self.num_envs, device=self.device))
        self._ep_return.zero_()
        self._ep_length.zero_()
        obs = self.observation()
        return obs.float(), self._state(obs), self.action_mask()

    def action_mask(self) -> Optional[torch.Tensor]:
        return None  # every MPE action is always available

    def _state(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(self.num_envs, -1).float()  # (E, N * obs_dim), as mpe2 state()

    def to_env_units(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised continuous actions in [-1, 1] -> mpe2's box [0, 1] (clipped, as mpe2's wrapper)."""
        return (actions.clamp(-1.0, 1.0) + 1.0) * 0.5

    def step(self, actions) -> VecStep:
        """Step every copy. actions: (E, N) int, or (E, N, 5) float in [-1, 1] (tensor or array)."""
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
                       alive=torch.ones(E, N, dtype=torch.bool, device=self.device), action_mask=None,
                       final_obs=final_obs, final_state=self._state(final_obs), done=done,
                       episode_return=episode_return, episode_length=episode_length)

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """Uniform random actions: (E, N) indices, or (E, N, 5) in the normalised box [-1, 1]."""
        E, N = self.num_envs, self.n_agents
        if self.discrete:
            return torch.randint(0, self.n_actions, (E, N), generator=self.gen, device=self.device)
        return self.uniform(E, N, self.action_dim).float()

    def set_world(self, pos: torch.Tensor, vel: torch.Tensor, steps: Optional[torch.Tensor] = None) -> None:
        """Overwrite positions / velocities (E, M, 2) (tests start from mpe2's initial states)."""
        self.pos = torch.as_tensor(pos, dtype=self.dtype, device=self.device).clone()
        self.vel = torch.as_tensor(vel, dtype=self.dtype, device=self.device).clone()
        if steps is not None:
            self.steps = torch.as_tensor(steps, device=self.device).clone()

    def is_terminal(self) -> torch.Tensor:
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def render(self):
        raise NotImplementedError("the torch MPE does not render; render the PettingZoo version of the "
                                  "same scenario (drop the 'torch:' prefix)")

    def close(self) -> None:
        pass


class SimpleSpread(TorchMPE):
    """mpe2 simple_spread_v3: N agents cover N landmarks; shared reward is minus the sum over
    landmarks of the distance to the nearest agent, local reward -1 per collision."""

    def __init__(self, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, N: int = 3,
                 local_ratio: float = 0.5, max_cycles: int = 25, continuous_actions: bool = False,
                 terminate_on_success: bool = False):
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio is a proportion in [0, 1], got {local_ratio}")
        super().__init__(num_envs, seed, device, dtype, max_cycles, continuous_actions, local_ratio)
        self.terminate_on_success = terminate_on_success
        self._make_world(N, N, agent_size=0.15, landmark_size=0.05, agent_collide=True, landmark_collide=False,
                         dim_c=2, silent=True)
        self._finish_init()

    def reset_world(self, idx: torch.Tensor) -> None:
        """Copies `idx` get agents and landmarks uniform in [-1, 1]^2 at rest (mpe2 draws the agents first)."""
        n = idx.numel()
        self.pos[idx] = self.uniform(n, self.n_entities, self.dim_p)
        self.vel[idx] = 0.0
        self.comm[idx] = 0.0
        self.steps[idx] = 0

    def _agent_landmark_dist(self) -> torch.Tensor:
        N = self.n_agents
        delta = self.pos[:, :N, None, :] - self.pos[:, None, N:, :]  # (E, N, L, 2)
        return torch.sqrt((delta ** 2).sum(-1))  # (E, N, L)

    def is_terminal(self) -> torch.Tensor:
        if not self.terminate_on_success:
            return super().is_terminal()
        return (self._agent_landmark_dist().min(1).values < 0.1).all(-1)  # every landmark covered

    def reward(self) -> torch.Tensor:
        N = self.n_agents
        global_reward = -self._agent_landmark_dist().min(1).values.sum(-1)  # (E,)
        agents = self.pos[:, :N]
        dist = torch.sqrt(((agents[:, :, None] - agents[:, None]) ** 2).sum(-1))  # (E, N, N)
        size = self.size[:N]
        hit = (dist < size[:, None] + size[None, :]) & ~torch.eye(N, dtype=torch.bool, device=self.device)
        local = -hit.to(self.dtype).sum(-1)  # (E, N) -1 per other agent touching this one
        return global_reward[:, None] * (1 - self.local_ratio) + local * self.local_ratio

    def observation(self) -> torch.Tensor:
        """[self_vel, self_pos, landmark_rel_positions, other_agent_rel_positions, others' comm] (E, N, obs_dim)."""
        E, N = self.num_envs, self.n_agents
        agents = self.pos[:, :N]  # (E, N, 2)
        landmark_rel = (self.pos[:, None, N:] - agents[:, :, None]).reshape(E, N, -1)  # (E, N, 2L)
        others = ~torch.eye(N, dtype=torch.bool, device=self.device)  # row i: every j != i, in order
        agent_rel = (agents[:, None] - agents[:, :, None])[:, others].reshape(E, N, -1)  # (E, N, 2(N-1))
        comm = self.comm[:, None].expand(E, N, N, self.dim_c)[:, others].reshape(E, N, -1)  # (E, N, dim_c(N-1))
        return torch.cat([self.vel[:, :N], agents, landmark_rel, agent_rel, comm], dim=-1)


TORCH_SCENARIOS = {"simple_spread": SimpleSpread}


def make_torch_mpe(name: str, num_envs: int, seed: int = 0, device="cpu", dtype=torch.float32, **kwargs) -> TorchMPE:
    """Build E copies of a ported scenario; unknown scenario arguments fail with the accepted list."""
    if name not in TORCH_SCENARIOS:
        raise ValueError(f"no torch port of {name!r}; ported scenarios: {', '.join(sorted(TORCH_SCENARIOS))}")
    cls = TORCH_SCENARIOS[name]
    accepted = [k for k in inspect.signature(cls.__init__).parameters
                if k not in ("self", "num_envs", "seed", "device", "dtype")]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ValueError(f"torch:{name} does not take argument(s) {unknown}; accepted: {', '.join(accepted)}")
    return cls(num_envs, seed, device, dtype, **kwargs)


__all__ = ["TorchMPE", "SimpleSpread", "TORCH_SCENARIOS", "make_torch_mpe"]
