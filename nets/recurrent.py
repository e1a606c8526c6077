"""GRU and LSTM cores that carry a hidden state and reset it where an episode starts.

The cell is written out (rather than nn.GRUCell) so that separate-parameter agents run in
one batched matmul through `make_linear`, like every other layer in `nets/`.
"""
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from nets.layers import make_linear

State = Tuple[torch.Tensor, ...]  # (h,) for a GRU, (h, c) for an LSTM; each (B, N, H)


class RecurrentCore(nn.Module):
    """GRU or LSTM over a sequence with per-step episode resets.

    forward(x (L, B, N, in_dim), state, starts (L, B, N)) -> (out (L, B, N, H), new state)
    `starts[t] = 1` zeroes the state before step t: a new episode must not see the last one.
    """

    def __init__(self, in_dim: int, hidden_dim: int, kind: str = "gru", n_agents: Optional[int] = None,
                 set_of_agent: Optional[Sequence[int]] = None):
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"recurrent kind must be 'gru' or 'lstm', got {kind!r}")
        self.kind, self.hidden_dim = kind, hidden_dim
        gates = 3 if kind == "gru" else 4
        self.ih = make_linear(in_dim, gates * hidden_dim, n_agents, gain=1.0, set_of_agent=set_of_agent)
        self.hh = make_linear(hidden_dim, gates * hidden_dim, n_agents, gain=1.0, set_of_agent=set_of_agent)
        self.n_states = 1 if kind == "gru" else 2

    def initial_state(self, batch: int, n_agents: int, device=None) -> State:
        return tuple(torch.zeros(batch, n_agents, self.hidden_dim, device=device) for _ in range(self.n_states))

    def cell(self, x: torch.Tensor, state: State) -> State:
        """One step: x (B, N, in_dim) -> new state."""
        gi, gh = self.ih(x), self.hh(state[0])
        if self.kind == "gru":
            ir, iz, inn = gi.chunk(3, -1)
            hr, hz, hn = gh.chunk(3, -1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            n = torch.tanh(inn + r * hn)
            return ((1 - z) * n + z * state[0],)
        i, f, g, o = (gi + gh).chunk(4, -1)
        c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
        return (torch.sigmoid(o) * torch.tanh(c), c)

    def forward(self, x: torch.Tensor, state: State, starts: torch.Tensor):
        if isinstance(self.ih, nn.Linear) and x.shape[0] > 1 and not bool(starts[1:].any()):
            return self._fused(x, state, starts[0])
        outs = []
        for t in range(x.shape[0]):
            keep = (1.0 - starts[t].float()).unsqueeze(-1)  # (B, N, 1)
            state = self.cell(x[t], tuple(s * keep for s in state))
            outs.append(state[0])
        return torch.stack(outs), state  # (L, B, N, H)

    def _fused(self, x: torch.Tensor, state: State, start: torch.Tensor):
        """The same recurrence through torch's fused GRU/LSTM kernel, for a shared cell on a
        sequence with no episode start after its first step (replayed whole episodes, most
        training chunks). Gate order and equations are nn.GRU's / nn.LSTM's, as in `cell`."""
        L, B, N, _ = x.shape
        keep = (1.0 - start.float()).reshape(1, B * N, 1)
        h0 = tuple(s.reshape(1, B * N, -1) * keep for s in state)
        weights = [self.ih.weight, self.hh.weight, self.ih.bias, self.hh.bias]
        args = (weights, True, 1, 0.0, self.training, False, False)
        flat = x.reshape(L, B * N, -1)
        if self.kind == "gru":
            out, h = torch.gru(flat, h0[0], *args)
            new_state = (h.reshape(B, N, -1),)
        else:
            out, h, c = torch.lstm(flat, h0, *args)
            new_state = (h.reshape(B, N, -1), c.reshape(B, N, -1))
        return out.reshape(L, B, N, -1), new_state
