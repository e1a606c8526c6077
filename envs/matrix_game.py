"""One-step cooperative matrix games: the smallest test of value factorisation.

Two agents each pick one of A actions; both receive payoff[a_1, a_2] and the episode ends.
Observations and state are constant, so everything a learner must find is in the payoff:

- `coordination`: a unique best joint action (0, 0) worth 10, miscoordination worth 0 and
  two weaker equilibria; VDN and QMIX both learn it under uniform exploration.
- `climbing` (Claus & Boutilier 1998): the optimum (0, 0) = 11 sits next to -30 penalties,
  the classic trap for independent learners.
- `penalty` (QTRAN, Son et al. 2019): the optimum (0, 0) = 8 is surrounded by -12; it is not
  representable by a monotonic mixer, so VDN and QMIX settle on a safe 0 (QPLEX can find 8).

    python algos/qmix.py --env matrix_game --env-kwargs game=coordination
"""
from typing import Optional, Union

import torch

from envs.errors import EnvError, did_you_mean
from envs.pettingzoo_vec import VecStep
from envs.tensor_state import load_tensors, save_tensors

PAYOFFS = {
    "coordination": [[10.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 5.0]],
    "climbing": [[11.0, -30.0, 0.0], [-30.0, 7.0, 6.0], [0.0, 0.0, 5.0]],
    "penalty": [[8.0, -12.0, -12.0], [-12.0, 0.0, 0.0], [-12.0, 0.0, 0.0]],
}


class MatrixGame:
    """E copies of a two-agent one-step game, with the batched-adapter interface (torch tensors)."""

    def __init__(self, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 game: str = "coordination"):
        if game not in PAYOFFS:
            raise EnvError(f"unknown matrix game {game!r}; {did_you_mean(str(game), PAYOFFS)}known: {', '.join(PAYOFFS)}")
        self.device = torch.device(device)
        self.payoff = torch.tensor(PAYOFFS[game], device=self.device)  # (A, A)
        self.num_envs, self.seed, self.game = num_envs, seed, game
        self.agents = ["agent_0", "agent_1"]
        self.n_agents, self.n_actions, self.action_dim, self.discrete = 2, self.payoff.shape[0], 1, True
        self.action_dims = [self.n_actions] * 2
        self.obs_dim, self.obs_dims, self.state_dim = 1, [1, 1], 2
        self.obs_shape, self.state_shape = (1,), (2,)  # flat: what the networks' encoders are built from
        self.action_dim_mask = torch.ones(2, self.n_actions, dtype=torch.bool).numpy()
        self.has_action_mask = False
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def _obs(self):
        return torch.ones(self.num_envs, 2, 1, device=self.device)  # (E, N, 1) nothing to observe

    def reset(self):
        obs = self._obs()
        return obs, obs.reshape(self.num_envs, -1), None

    def step(self, actions) -> VecStep:
        actions = torch.as_tensor(actions, device=self.device).long()  # (E, 2)
        reward = self.payoff[actions[:, 0], actions[:, 1]][:, None].expand(self.num_envs, 2).clone()  # (E, N)
        E, obs = self.num_envs, self._obs()
        ones = torch.ones(E, 2, dtype=torch.bool, device=self.device)
        return VecStep(obs=obs, state=obs.reshape(E, -1), reward=reward, terminated=ones, truncated=~ones,
                       alive=ones, action_mask=None, final_obs=obs, final_state=obs.reshape(E, -1),
                       done=torch.ones(E, dtype=torch.bool, device=self.device), episode_return=reward,
                       episode_length=torch.ones(E, dtype=torch.long, device=self.device))

    def state_dict(self) -> dict:
        """The generator's state: observations are constant and every episode lasts one step, so
        nothing else is in flight."""
        return save_tensors(self, ())

    def load_state_dict(self, state: dict) -> None:
        load_tensors(self, state, "matrix_game", "")  # only the generator, from the same kind of device

    def observe(self):
        """(obs, state, action_mask) as every reset and step returns them."""
        return self.reset()

    def sample_actions(self, rng=None) -> torch.Tensor:
        return torch.randint(0, self.n_actions, (self.num_envs, 2), generator=self.gen, device=self.device)

    def render(self) -> Optional[object]:
        raise NotImplementedError("matrix games have nothing to draw")

    def close(self) -> None:
        pass
