"""Linear layers and MLPs that run all agents in one batched operation.

Every module here takes inputs with the agent axis just before the feature axis:
(..., N, in_dim). With shared parameters the agent axis is just one more batch axis; with
separate parameters (`n_agents` given) each agent has its own weight matrix and all agents
run in one batched matmul, never a Python loop over agents. Groups of agents (a team sharing
one policy) are the same machinery: `n_agents` parameter sets, and `set_of_agent[n]` the set
agent n uses.
"""
import math
from typing import Optional, Sequence

import torch
from torch import nn


class _SigmoidTanh(torch.autograd.Function):
    """tanh(x) = 2 sigmoid(2x) - 1, with torch's own tanh gradient (1 - y^2) g."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)  # an output: a second derivative (TRPO's Fisher products) goes through it
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Tanh):
    """nn.Tanh, three times as fast on the CPU: torch's CPU kernel for tanh (2.13) runs one element
    at a time, about 2.6 ns each on one core, where sigmoid's is vectorised (about 0.4 ns), so on the
    CPU the value is computed as 2 sigmoid(2x) - 1. It differs from torch.tanh by at most 2e-7 (the
    rounding of sigmoid near 1/2), which is also where the two disagree most in relative terms
    (|x| < 1e-3). The gradient is torch's own tanh_backward of the output, so first and second
    derivatives are those of tanh. On CUDA, torch.tanh runs as it is (one fused kernel).
    Measured on a 2-core AMD EPYC (AVX-512), 14,400 x 64 floats: forward 2.50 -> 0.85 ms on one
    thread, forward and backward 2.71 -> 1.25 ms on two; MAPPO's throughput preset spent a fifth of
    its time in tanh's forward (BENCHMARKS.md, speed issue)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SigmoidTanh.apply(x) if x.device.type == "cpu" else torch.tanh(x)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU}  # the hidden layers' activation, --activation


class AgentLinear(nn.Module):
    """One linear map per agent: y[..., n, :] = x[..., n, :] @ W[s(n)] + b[s(n)].

    `n_agents` parameter sets; agent n uses set s(n) = n, or `set_of_agent[n]` when given
    (agents of one group share a matrix, groups keep their own: still one batched matmul).
    Input (..., N, in_dim) -> output (..., N, out_dim).

    Sets of different true sizes (agents whose observations or actions the env pads to a common
    width): `in_mask` (n_agents, in_dim) and `out_mask` (n_agents, out_dim), True on the inputs
    and outputs that set really has. Each set's matrix is then its true-size matrix (orthogonal
    init of that block alone, as a network built for that size) in a fixed-zero frame: the rest
    of the weights and biases are multiplied by 0 in every forward pass, so padded inputs cannot
    reach the set's outputs, padded outputs are 0, and the frame gets no gradient.
    """

    def __init__(self, n_agents: int, in_dim: int, out_dim: int, gain: float = math.sqrt(2),
                 set_of_agent: Optional[Sequence[int]] = None, in_mask: Optional[torch.Tensor] = None,
                 out_mask: Optional[torch.Tensor] = None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_agents, in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(n_agents, 1, out_dim))
        self.weight_mask: Optional[torch.Tensor]
        self.bias_mask: Optional[torch.Tensor]
        if in_mask is None and out_mask is None:
            self.register_buffer("weight_mask", None, persistent=False)
            self.register_buffer("bias_mask", None, persistent=False)
            for n in range(n_agents):  # orthogonal init of each agent's matrix, as nn.Linear below
                nn.init.orthogonal_(self.weight.data[n].T, gain)
        else:
            rows = torch.ones(n_agents, in_dim, dtype=torch.bool) if in_mask is None else in_mask.bool().cpu()
            cols = torch.ones(n_agents, out_dim, dtype=torch.bool) if out_mask is None else out_mask.bool().cpu()
            self.weight.data.zero_()
            for n in range(n_agents):  # orthogonal init of the true block only
                block = torch.empty(int(rows[n].sum()), int(cols[n].sum()))
                nn.init.orthogonal_(block.T, gain)
                self.weight.data[n][rows[n].nonzero()[:, 0, None], cols[n].nonzero()[:, 0]] = block
            self.register_buffer("weight_mask", (rows[:, :, None] & cols[:, None, :]).float(), persistent=False)
            self.register_buffer("bias_mask", cols[:, None, :].float(), persistent=False)
        self.set_of_agent: Optional[torch.Tensor]
        if set_of_agent is None:
            self.set_of_agent = None
        else:
            self.register_buffer("set_of_agent", torch.as_tensor(list(set_of_agent), dtype=torch.long),
                                 persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-2]
        N, D = x.shape[-2:]
        weight, bias = self.weight, self.bias
        if self.weight_mask is not None:  # sets of different true sizes: the padding frame stays 0
            weight, bias = weight * self.weight_mask, bias * self.bias_mask
        if self.set_of_agent is not None:  # gradients of a shared set add up over its agents
            weight, bias = weight[self.set_of_agent], bias[self.set_of_agent]  # (N, in, out), (N, 1, out)
        flat = x.reshape(-1, N, D).transpose(0, 1)  # (N, B, in)
        y = torch.baddbmm(bias, flat, weight)  # (N, B, out)
        return y.transpose(0, 1).reshape(*lead, N, -1)  # (..., N, out)


def make_linear(in_dim: int, out_dim: int, n_agents: Optional[int] = None, gain: float = math.sqrt(2),
                set_of_agent: Optional[Sequence[int]] = None, in_mask: Optional[torch.Tensor] = None,
                out_mask: Optional[torch.Tensor] = None) -> nn.Module:
    """A shared nn.Linear when n_agents is None, else one AgentLinear with n_agents matrices
    (agent n uses matrix n, or set_of_agent[n]; in_mask / out_mask: each set's true sizes)."""
    if n_agents is not None:
        return AgentLinear(n_agents, in_dim, out_dim, gain, set_of_agent, in_mask, out_mask)
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """Stack of linear layers with an activation between them (and after the last hidden one).

    Input (..., N, in_dim) -> output (..., N, out_dim), or (..., N, hidden_sizes[-1]) when
    out_dim is None. `n_agents` given means separate parameters per agent (or per parameter
    set, agent n using set_of_agent[n]).
    """

    def __init__(self, in_dim: int, hidden_sizes: Sequence[int], out_dim: Optional[int] = None,
                 n_agents: Optional[int] = None, activation: str = "tanh", out_gain: float = 1.0,
                 set_of_agent: Optional[Sequence[int]] = None, in_mask: Optional[torch.Tensor] = None):
        super().__init__()
        act = ACTIVATIONS[activation]
        layers = []
        last = in_dim
        for h in hidden_sizes:  # in_mask (n_agents, in_dim): each set's true inputs (AgentLinear)
            layers += [make_linear(last, h, n_agents, set_of_agent=set_of_agent, in_mask=in_mask), act()]
            last, in_mask = h, None
        if out_dim is not None:
            layers.append(make_linear(last, out_dim, n_agents, gain=out_gain, set_of_agent=set_of_agent,
                                      in_mask=in_mask))
            last = out_dim
        self.net = nn.Sequential(*layers)
        self.out_dim = last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
