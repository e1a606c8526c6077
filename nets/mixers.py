"""Mixers: combine per-agent utilities Q_i into a team value Q_tot.

All take per-agent values with the agent axis last, `qs (..., N)`, and the global state
`(..., state_dim)`, and return `(..., )`. Leading axes (time, batch) are kept.

- VDNMixer (Sunehag et al. 2018): Q_tot = sum_i Q_i.
- QMixer (Rashid et al. 2018): a two-layer network whose weights come from hypernetworks on the
  state; the weights pass through abs(), so Q_tot is non-decreasing in every Q_i (monotonic
  mixing), which keeps each agent's greedy action consistent with the team's argmax.
- QPLEXMixer (Wang et al. 2021): duplex dueling. Each Q_i is turned into V_i + A_i with a
  positive state-dependent scale, and Q_tot = sum_i V_i + sum_i lambda_i(s, a) A_i with
  lambda_i > 0 from attention over agents; since A_i <= 0 with equality at agent i's greedy
  action, the individually greedy joint action maximises Q_tot (the IGM principle) without
  restricting Q_tot to be monotone. The advantage term carries a stopped gradient, as in the
  authors' code.
- NonMonotonicMixer (Peng et al. 2021, FACMAC): QMixer's architecture with unconstrained weights,
  for actor-critic methods that never take an argmax over Q_tot.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F


def _flat(qs: torch.Tensor, state: torch.Tensor):
    """(..., N), (..., S) -> (B, N), (B, S) and the leading shape to restore."""
    lead = qs.shape[:-1]
    return qs.reshape(-1, qs.shape[-1]), state.reshape(-1, state.shape[-1]), lead


def _mix(qs: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """The two-layer mixing network of QMIX on B rows: qs (B, N), w1 (B, N, embed), b1 (B, embed),
    w2 (B, embed), b2 (B, 1) -> q_tot (B, 1) = elu(qs w1 + b1) w2 + b2. Each row's product is a
    broadcast multiply and a sum, not torch.bmm: B products of (1, N) by (N, embed) cost bmm about
    three times as much on the CPU, forward and backward."""
    hidden = F.elu((qs.unsqueeze(-1) * w1).sum(-2) + b1)  # (B, embed)
    return (hidden * w2).sum(-1, keepdim=True) + b2  # (B, 1)


class VDNMixer(nn.Module):
    """Q_tot = sum_i Q_i. The state is accepted (and ignored) so every mixer has one signature."""

    def forward(self, qs: torch.Tensor, state: torch.Tensor = None) -> torch.Tensor:
        return qs.sum(-1)


class QMixer(nn.Module):
    """Monotonic mixing network with hypernetworks on the state (QMIX).

    forward(qs (..., N), state (..., state_dim)) -> q_tot (...)
    """

    def __init__(self, n_agents: int, state_dim: int, embed_dim: int = 32, hypernet_hidden: int = 64):
        super().__init__()
        self.n_agents, self.embed_dim = n_agents, embed_dim
        self.hyper_w1 = nn.Sequential(nn.Linear(state_dim, hypernet_hidden), nn.ReLU(),
                                      nn.Linear(hypernet_hidden, n_agents * embed_dim))
        self.hyper_w2 = nn.Sequential(nn.Linear(state_dim, hypernet_hidden), nn.ReLU(),
                                      nn.Linear(hypernet_hidden, embed_dim))
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    def forward(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        qs, state, lead = _flat(qs, state)
        B = qs.shape[0]
        # abs() makes every mixing weight non-negative: dQ_tot/dQ_i >= 0 (monotonicity).
        w1 = self.hyper_w1(state).abs().view(B, self.n_agents, self.embed_dim)  # (B, N, embed)
        w2 = self.hyper_w2(state).abs()  # (B, embed)
        return _mix(qs, w1, self.hyper_b1(state), w2, self.hyper_b2(state)).view(lead)  # b2: state-dependent V(s)


class QPLEXMixer(nn.Module):
    """Duplex dueling mixer (QPLEX) with multi-head attention weights over agents.

    forward(qs (..., N) chosen-action utilities, state (..., S), actions_onehot (..., N, A),
            max_qs (..., N) each agent's greedy utility) -> q_tot (...)
    """

    def __init__(self, n_agents: int, state_dim: int, n_actions: int, n_heads: int = 4, hidden: int = 64):
        super().__init__()
        self.n_agents, self.n_heads = n_agents, n_heads
        # Individual transformation Q_i -> w_i(s) Q_i + b_i(s), w_i > 0 (keeps each agent's argmax).
        self.weight = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_agents))
        self.bias = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_agents))
        # Attention for lambda_i(s, a): per head a state key, per-agent state and joint-action terms.
        self.key = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_heads))
        self.agents = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_heads * n_agents))
        self.action = nn.Sequential(nn.Linear(state_dim + n_agents * n_actions, hidden), nn.ReLU(),
                                    nn.Linear(hidden, n_heads * n_agents))

    def forward(self, qs, state, actions_onehot, max_qs):
        lead = qs.shape[:-1]
        B, N = math.prod(lead), self.n_agents
        qs, max_qs = qs.reshape(B, N), max_qs.reshape(B, N)
        state = state.reshape(B, -1)
        w = self.weight(state).abs() + 1e-10  # (B, N), positive
        b = self.bias(state)  # (B, N)
        q = w * qs + b  # (B, N) transformed utilities of the actions taken
        v = w * max_qs + b  # V_i = max_a Q_i after the same transformation
        joint = torch.cat([state, actions_onehot.reshape(B, -1)], dim=-1)
        key = self.key(state).abs().view(B, self.n_heads, 1)  # (B, H, 1)
        gate = torch.sigmoid(self.agents(state).view(B, self.n_heads, N) + self.action(joint).view(B, self.n_heads, N))
        lam = (key * gate).sum(1) + 1e-10  # (B, N), lambda_i > 0
        # Q_tot = sum_i V_i + sum_i lambda_i A_i, written as sum_i Q_i + sum_i (lambda_i - 1) A_i with the
        # advantage A_i = Q_i - V_i <= 0 (zero at agent i's greedy action) behind a stopped gradient, as in
        # the QPLEX code (`is_minus_one`): the same value, but the utilities learn through sum_i w_i Q_i (a
        # weighted VDN) and lambda only through A_i. Without the stop every utility's gradient is scaled by
        # lambda_i (about 0.5 at initialisation and free to shrink) and V_i passes none at all.
        adv = (q - v).detach()  # (B, N)
        return (q.sum(-1) + ((lam - 1.0) * adv).sum(-1)).view(lead)


class NonMonotonicMixer(QMixer):
    """QMIX's hypernetwork mixer without the abs() on its weights (FACMAC, Peng et al. 2021):
    Q_tot(s, Q_1..Q_N) may decrease in some Q_i. Monotonicity is what lets value-based agents
    act greedily on their own Q_i; actor-critic methods act through their actors and train them
    through Q_tot's gradient, so they can drop it and represent more joint-action values.

    forward(qs (..., N), state (..., state_dim)) -> q_tot (...)
    """

    def forward(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        qs, state, lead = _flat(qs, state)
        w1 = self.hyper_w1(state).view(qs.shape[0], self.n_agents, self.embed_dim)  # (B, N, embed), any sign
        return _mix(qs, w1, self.hyper_b1(state), self.hyper_w2(state), self.hyper_b2(state)).view(lead)  # any sign


class PerGroup(nn.Module):
    """One mixer per team: team k's mixer mixes only its own agents' utilities (its members
    `members[k]`), so two sides of a competitive env each get their own Q_tot (or V_tot) and
    neither side's value is mixed with its rival's.

    forward(qs (..., N), state (..., S), *more) -> (..., K), one team value per mixer. Tensors in
    `more` shaped like qs (QPLEX's max_qs) are cut on their last axis, those with one more axis
    (one-hot actions (..., N, A)) on their second-last. One team of every agent gives the same
    numbers as its mixer alone, with a trailing axis of 1.
    """

    def __init__(self, mixers, members):
        super().__init__()
        self.mixers = nn.ModuleList(mixers)
        self.members = [list(m) for m in members]
        for k, m in enumerate(self.members):  # index tensors that move with the module (no copy per forward)
            self.register_buffer(f"index_{k}", torch.as_tensor(m, dtype=torch.long), persistent=False)

    def forward(self, qs: torch.Tensor, state: torch.Tensor, *more: torch.Tensor) -> torch.Tensor:
        if len(self.members) == 1 and self.members[0] == list(range(qs.shape[-1])):  # one team of every agent
            return self.mixers[0](qs, state, *more).unsqueeze(-1)
        out = []
        for k, mixer in enumerate(self.mixers):
            m = getattr(self, f"index_{k}")
            cut = [x[..., m] if x.dim() == qs.dim() else x[..., m, :] for x in more]
            out.append(mixer(qs[..., m], state, *cut))
        return torch.stack(out, dim=-1)
