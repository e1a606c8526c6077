"""VMAS (Bettini et al. 2022): E copies in one vectorised torch simulator, on the CPU or the GPU.

    from envs import make_env
    env = make_env("vmas:balance", num_envs=1024, seed=0, device="cuda")

VMAS already steps every copy at once: observations come as one `(E, obs_dim_i)` tensor per
agent, rewards as one `(E,)` tensor per agent, `terminated` / `truncated` as `(E,)` tensors.
`VMASVecEnv` stacks them into the shape every family has (obs `(E, N, obs_dim)`, rewards
`(E, N)`, ...) and hands the tensors on where VMAS made them (`device`), with no Python loop
over copies; the only loops are over the N agents, VMAS's own per-agent lists.

- Names: `vmas:<scenario>` for every scenario VMAS 1.5 ships (`vmas.scenarios`, its MPE
  ports `vmas.mpe_scenarios` such as `vmas:simple_spread`, and `vmas.debug_scenarios`).
- Episodes: `max_steps` (default 100, BenchMARL's horizon) truncates; a scenario's own `done()`
  terminates. Everything else in `--env-kwargs` goes to the scenario (`n_agents=4`, ...);
  VMAS's warning about an argument the scenario did not read is turned into an error.
- Actions: `continuous_actions=true` (the default, as VMAS) gives each agent a Box (force,
  then communication); the policy's normalised [-1, 1] is mapped onto each agent's bounds.
  `continuous_actions=false` gives VMAS's Discrete actions (all of them always available).
- Auto-reset: copies that end together (every copy reaches `max_steps` at the same step when
  they started together) reset in one vectorised call; copies that a scenario terminates
  early reset one by one through `reset_at`, VMAS's only partial reset.
- Seeding: the simulator draws from one random state seeded with `seed` (VMAS keeps it apart
  from the global torch/numpy/random state), not one seed per copy: same seed, same worlds.
- Global state: every agent's true-size observation, concatenated (VMAS defines no state).
"""
import ast
import importlib
import inspect
import warnings
from typing import Any, Dict, Optional, Union

import numpy as np
import torch

from envs.errors import EnvError, EnvPackageMissing, did_you_mean
from envs.pettingzoo_vec import VecStep

PIP_LINE = "pip install vmas==1.5.2"
DEFAULT_MAX_STEPS = 100


def _vmas():
    try:
        import vmas
    except ImportError as err:
        raise EnvPackageMissing(f"'vmas:' envs need the vmas package: {PIP_LINE}") from err
    return vmas


def vmas_scenarios() -> list:
    vmas = _vmas()
    return sorted(set(vmas.scenarios) | set(vmas.mpe_scenarios) | set(vmas.debug_scenarios))


def _check_scenario(scenario: str) -> None:
    known = vmas_scenarios()
    if scenario not in known:
        raise EnvError(f"unknown VMAS scenario {scenario!r}; {did_you_mean(scenario, known, 'vmas:')}{len(known)} "
                       f"scenarios, e.g. vmas:balance; all: python -c 'import envs; print(envs.vmas_vec.vmas_scenarios())'")


def _is(space, kind: str) -> bool:
    """VMAS 1.5 builds its spaces with `gym` or `gymnasium`: compare by class name."""
    return type(space).__name__ == kind


class VMASVecEnv:
    """A VMAS environment of E copies behind the batched-adapter interface (torch tensors on `device`).

    Args:
        scenario: a VMAS scenario name (`vmas_scenarios()`).
        num_envs: E, the number of copies simulated together.
        seed: seeds VMAS's random state at the first reset.
        device: where VMAS simulates and where every returned tensor lives.
        max_steps: the time limit in steps (truncation); None: VMAS's infinite horizon.
        continuous_actions: Box actions (True) or VMAS's Discrete actions (False).
        **scenario_kwargs: the scenario's own arguments (n_agents, ...).
    """

    def __init__(self, scenario: str, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 max_steps: Optional[int] = DEFAULT_MAX_STEPS, continuous_actions: bool = True, **scenario_kwargs):
        vmas = _vmas()
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if max_steps is not None and max_steps < 1:
            raise EnvError(f"max_steps must be at least 1 (or None for no limit), got {max_steps}")
        _check_scenario(scenario)
        self.num_envs, self.seed, self.device = num_envs, seed, torch.device(device)
        self.max_steps, self.continuous_actions = max_steps, continuous_actions
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.env = vmas.make_env(scenario, num_envs=num_envs, device=self.device,
                                     continuous_actions=continuous_actions, seed=seed, max_steps=max_steps,
                                     terminated_truncated=True, **scenario_kwargs)
        unused = [str(w.message) for w in caught if "not used by the scenario" in str(w.message)]
        if unused:
            raise EnvError(f"VMAS scenario {scenario!r}: {unused[0]} The adapter itself takes max_steps "
                             "and continuous_actions; the scenario's arguments are read in vmas/scenarios/"
                             f"{scenario}.py (kwargs.pop / get(...))")
        self.agents = [a.name for a in self.env.agents]
        self.n_agents = N = len(self.agents)

        obs_spaces, act_spaces = list(self.env.observation_space), list(self.env.action_space)
        for name, s in zip(self.agents, obs_spaces):
            if not _is(s, "Box") or len(s.shape) != 1:
                raise TypeError(f"agent {name!r} has observation space {s}; the VMAS adapter accepts flat Box "
                                "observations (a scenario with dict observations is not supported)")
        self.obs_dims = [int(s.shape[0]) for s in obs_spaces]
        self.obs_dim = max(self.obs_dims)
        self.state_dim = sum(self.obs_dims)
        self.obs_shape, self.state_shape = (self.obs_dim,), (self.state_dim,)  # flat vectors, never images
        self._state_index = None if all(d == self.obs_dim for d in self.obs_dims) else torch.cat(
            [torch.arange(d, device=self.device) + n * self.obs_dim for n, d in enumerate(self.obs_dims)])

        if all(_is(s, "Discrete") for s in act_spaces):
            self.discrete = True
            self.action_dims = [int(s.n) for s in act_spaces]
            self.n_actions, self.action_dim = max(self.action_dims), 1
        elif all(_is(s, "Box") and len(s.shape) == 1 for s in act_spaces):
            self.discrete = False
            self.action_dims = [int(s.shape[0]) for s in act_spaces]
            self.n_actions, self.action_dim = 0, max(self.action_dims)
            self.action_low = np.zeros((N, self.action_dim), np.float32)  # (N, act_dim)
            self.action_high = np.zeros((N, self.action_dim), np.float32)  # (N, act_dim)
            for n, s in enumerate(act_spaces):
                self.action_low[n, : s.shape[0]] = s.low
                self.action_high[n, : s.shape[0]] = s.high
            self._low_t = torch.as_tensor(self.action_low, device=self.device)
            self._high_t = torch.as_tensor(self.action_high, device=self.device)
        else:
            raise TypeError(f"action spaces {act_spaces} are not supported: the VMAS adapter accepts all-Discrete "
                            "or all-Box (1-D) actions (multidiscrete_actions is not supported)")
        width = self.n_actions if self.discrete else self.action_dim
        self.action_dim_mask = np.arange(width)[None, :] < np.array(self.action_dims)[:, None]  # (N, width)
        self._mask_t = torch.as_tensor(self.action_dim_mask, device=self.device)
        self._dims_t = torch.tensor(self.action_dims, device=self.device)
        self.has_action_mask = False  # every real VMAS action is always available
        self.gen = torch.Generator(device=self.device).manual_seed(seed)  # for sample_actions only
        self._ep_return = torch.zeros(num_envs, N, device=self.device)
        self._ep_length = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._started = False

    # ------------------------------------------------------------------ batching VMAS's lists
    def _stack_obs(self, obs_list) -> torch.Tensor:
        """N tensors (E, obs_dim_i) -> (E, N, obs_dim), zero-padded after each agent's true size."""
        return torch.stack([torch.nn.functional.pad(o.float(), (0, self.obs_dim - o.shape[-1])) for o in obs_list],
                           dim=1)

    def _state(self, obs: torch.Tensor) -> torch.Tensor:
        """(E, state_dim): every agent's true-size observation concatenated."""
        flat = obs.reshape(self.num_envs, -1)
        return flat if self._state_index is None else flat[:, self._state_index]

    # ------------------------------------------------------------------ adapter API
    def reset(self):
        """Reset every copy (VMAS's random state seeded with `seed` the first time).
        Returns (obs (E, N, obs_dim), state (E, state_dim), action_mask or None)."""
        obs = self._stack_obs(self.env.reset(seed=None if self._started else self.seed))
        self._started = True
        self._ep_return.zero_()
        self._ep_length.zero_()
        return obs, self._state(obs), self.action_mask()

    def action_mask(self) -> Optional[torch.Tensor]:
        """(E, N, n_actions) bool, True where the action is real (padding is not); None if continuous."""
        if not self.discrete:
            return None
        return self._mask_t[None].expand(self.num_envs, self.n_agents, self.n_actions)

    def to_env_units(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised continuous actions (E, N, act_dim) in [-1, 1] -> each agent's [low, high]."""
        unit = (actions.clamp(-1.0, 1.0) + 1.0) * 0.5
        return self._low_t + unit * (self._high_t - self._low_t)

    def step(self, actions) -> VecStep:
        """Step every copy. actions: (E, N) int, or (E, N, act_dim) float in [-1, 1] (tensor or array)."""
        actions = torch.as_tensor(actions, device=self.device)
        if self.discrete:
            per_agent = [actions[:, n].long() for n in range(self.n_agents)]  # N x (E,)
        else:
            actions = self.to_env_units(actions.float())
            per_agent = [actions[:, n, :d] for n, d in enumerate(self.action_dims)]  # N x (E, act_dim_i)
        obs_list, rew_list, terminated_e, truncated_e, _ = self.env.step(per_agent)
        final_obs = self._stack_obs(obs_list)  # (E, N, obs_dim) before auto-reset
        reward = torch.stack(rew_list, dim=1).float()  # (E, N)
        terminated_e, truncated_e = terminated_e.bool(), truncated_e.bool() & ~terminated_e.bool()
        done = terminated_e | truncated_e  # (E,)
        E, N = self.num_envs, self.n_agents
        self._ep_return += reward
        self._ep_length += 1
        episode_return = torch.where(done[:, None], self._ep_return, torch.zeros_like(self._ep_return))
        episode_length = torch.where(done, self._ep_length, torch.zeros_like(self._ep_length))
        self._ep_return = torch.where(done[:, None], torch.zeros_like(self._ep_return), self._ep_return)
        self._ep_length = torch.where(done, torch.zeros_like(self._ep_length), self._ep_length)
        obs = final_obs
        n_done = int(done.sum())
        if n_done == E:  # the usual case at the time limit: one vectorised reset of every copy
            obs = self._stack_obs(self.env.reset())
        elif n_done:  # copies that the scenario ended early: VMAS resets one index at a time
            for i in torch.nonzero(done).squeeze(1).tolist():
                self.env.reset_at(i, return_observations=False)
            obs = self._stack_obs(self.env.get_from_scenario(get_observations=True, get_rewards=False,
                                                             get_infos=False, get_dones=False)[0])
        return VecStep(obs=obs, state=self._state(obs), reward=reward,
                       terminated=terminated_e[:, None].expand(E, N), truncated=truncated_e[:, None].expand(E, N),
                       alive=torch.ones(E, N, dtype=torch.bool, device=self.device), action_mask=self.action_mask(),
                       final_obs=final_obs, final_state=self._state(final_obs), done=done,
                       episode_return=episode_return, episode_length=episode_length,
                       final_action_mask=self.action_mask())

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """Uniform random real actions: (E, N) indices below each agent's action_dims, or
        (E, N, act_dim) in the normalised box [-1, 1] (zero in an agent's padding)."""
        E, N = self.num_envs, self.n_agents
        if self.discrete:
            u = torch.rand(E, N, generator=self.gen, device=self.device, dtype=torch.float64)
            return (u * self._dims_t).long().clamp(max=self._dims_t - 1)
        u = torch.rand(E, N, self.action_dim, generator=self.gen, device=self.device) * 2.0 - 1.0
        return u * self._mask_t

    def render(self):
        """An RGB frame of copy 0 (VMAS draws with pyglet)."""
        return self.env.render(mode="rgb_array", env_index=0)

    def close(self) -> None:
        pass


def arguments(scenario: str) -> Dict[str, Any]:
    """The adapter's arguments and the ones the scenario reads (every `kwargs.pop("name", default)`
    or `kwargs.get(...)` call in its source: VMAS scenarios declare no signature), with their
    defaults; a default that is an expression (`"n_agents"`) is given as its source text."""
    vmas = _vmas()
    _check_scenario(scenario)
    sub = "" if scenario in vmas.scenarios else "mpe." if scenario in vmas.mpe_scenarios else "debug."
    source = inspect.getsource(importlib.import_module(f"vmas.scenarios.{sub}{scenario}"))
    out: Dict[str, Any] = {"max_steps": DEFAULT_MAX_STEPS, "continuous_actions": True}
    calls = sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)), key=lambda n: n.lineno)
    for node in calls:  # in source order: a name read twice keeps its first default
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("pop", "get") and getattr(func.value, "id", "")
                == "kwargs" and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        default = node.args[1] if len(node.args) > 1 else None
        try:
            out.setdefault(node.args[0].value, None if default is None else ast.literal_eval(default))
        except ValueError:
            out.setdefault(node.args[0].value, ast.unparse(default))  # an expression: shown as written
    return out


def make(scenario: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, Any]] = None,
         render_mode: Optional[str] = None, device=None) -> VMASVecEnv:
    """E copies of a VMAS scenario on `device` (the training device keeps the whole loop there);
    envs.make_env checks env_kwargs against arguments() first."""
    return VMASVecEnv(scenario, num_envs, seed, device or "cpu", **dict(env_kwargs or {}))
