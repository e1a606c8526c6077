"""Graph neural networks over the agent axis: agents are nodes, messages flow along edges.

Plain torch, no graph library: with a handful of agents every (receiver, sender) pair is one
entry of a dense (..., N, N) adjacency, and a layer is a few batched tensor operations over all
pairs at once, with no Python loop over agents. Inputs are (..., N, in_dim) with the agent axis
just before the features, as everywhere in `nets/`; any leading axes (time, batch) are kept.

Topologies (`adjacency`): "full" (every agent hears every other), "empty" (no edges: the GNN
is a per-agent MLP), "from_pos" (an edge wherever two agents are closer than `edge_radius`,
rebuilt at every forward pass from the positions in the input, so at every env step).
`self_loops` adds the edge i -> i. Where each agent's own position and velocity are known
(index ranges of its input, `pos_slice` / `vel_slice`), messages also carry edge features:
the sender's position relative to the receiver, their distance and the relative velocity.

Parameter sharing (`share_params`): one GNN for all agents, or one whole GNN per agent (agent
i's output is what GNN i computes at node i; the N GNNs run as one batched matmul through
`make_linear`, with a copy axis G = N next to the node axis). A shared GNN has no agent-id
one-hot: it is permutation-equivariant over agents, which is the point of a graph model.
"""
from collections.abc import Sequence

import torch
from torch import nn

from nets.layers import ACTIVATIONS, MLP, make_linear
from nets.recurrent import RecurrentCore, State

TOPOLOGIES = ("full", "empty", "from_pos")
Slice = tuple[int, int] | None  # (start, end) of a feature range in the input, or None


def adjacency(topology: str, n_agents: int, pos: torch.Tensor | None = None, edge_radius: float = 1.0,
              self_loops: bool = False, device=None) -> torch.Tensor:
    """Which agent hears which: adj[..., i, j] = True where agent j sends a message to agent i.

    "full" and "empty" give a constant (N, N); "from_pos" needs positions pos (..., N, P) and
    gives (..., N, N) with an edge wherever ||pos_j - pos_i|| < edge_radius (strictly).
    The diagonal (i hears itself) is set by `self_loops` in every topology.
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; accepted: {', '.join(TOPOLOGIES)}")
    eye = torch.eye(n_agents, dtype=torch.bool, device=device if pos is None else pos.device)  # (N, N)
    if topology == "from_pos":
        if pos is None:
            raise ValueError("topology 'from_pos' needs the agents' positions (pos (..., N, P))")
        adj = torch.cdist(pos, pos) < edge_radius  # (..., N, N), symmetric
    else:
        adj = torch.full_like(eye, topology == "full")  # (N, N)
    return (adj & ~eye) | eye if self_loops else adj & ~eye


def edge_features(pos: torch.Tensor | None, vel: torch.Tensor | None) -> torch.Tensor | None:
    """Features of the edge j -> i from each agent's own position (..., N, P) and velocity
    (..., N, V), either may be None: [pos_j - pos_i, ||pos_j - pos_i||, vel_j - vel_i] as
    (..., N_receivers, N_senders, P + 1 + V); None when neither is known."""
    parts = []
    if pos is not None:
        rel = pos[..., None, :, :] - pos[..., :, None, :]  # (..., N, N, P): sender j relative to receiver i
        parts += [rel, rel.norm(dim=-1, keepdim=True)]
    if vel is not None:
        parts.append(vel[..., None, :, :] - vel[..., :, None, :])  # (..., N, N, V)
    return torch.cat(parts, dim=-1) if parts else None


def edge_dim(pos_dim: int, vel_dim: int) -> int:
    """Size of `edge_features` for positions of pos_dim and velocities of vel_dim (0: unknown)."""
    return (pos_dim + 1 if pos_dim else 0) + vel_dim


class MessagePassing(nn.Module):
    """One message-passing layer over the agent axis, with a copy axis G for per-agent GNNs.

        m_ij = act(W_m h_j + W_e e_ij + b_m)                         message j -> i
        a_i  = mean over the senders j with adj[i, j] of m_ij         (0 where i hears no one)
        h_i' = act(W_s h_i + b_s + [i hears someone] (W_a a_i + b_a))

    An agent without neighbours (every agent with topology "empty" and no self loops) gets
    h_i' = act(W_s h_i + b_s): a plain MLP layer. The mean keeps the scale of a_i the same
    whether an agent hears one neighbour or many ("from_pos" changes that at every step).

    forward(h (..., N, G, in_dim), adj (..., N, N) bool, edges (..., N, N, edge_dim) or None)
        -> (..., N, G, out_dim).  G = 1 shares the weights; G = n_copies gives copy g its own.
    """

    def __init__(self, in_dim: int, out_dim: int, edge_dim: int = 0, n_copies: int | None = None,
                 activation: str = "tanh"):
        super().__init__()
        self.act = ACTIVATIONS[activation]()
        self.self_lin = make_linear(in_dim, out_dim, n_copies)  # W_s, b_s
        self.msg_lin = make_linear(in_dim, out_dim, n_copies)  # W_m, b_m
        self.edge_lin = make_linear(edge_dim, out_dim, n_copies) if edge_dim else None  # W_e (its bias adds to b_m)
        self.agg_lin = make_linear(out_dim, out_dim, n_copies)  # W_a, b_a
        self.n_copies, self.edge_dim = n_copies, edge_dim

    def forward(self, h: torch.Tensor, adj: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
        G = h.shape[-2]
        weight = adj.to(h.dtype)  # (..., N, N)
        degree = weight.sum(-1, keepdim=True)  # (..., N, 1) how many agents i hears
        weight = weight / degree.clamp(min=1.0)  # mean over the senders
        node_msg = self.msg_lin(h)  # (..., N_senders, G, out)
        if self.edge_lin is None:  # messages depend on the sender only: one batched matmul
            agg = torch.einsum("...ij,...jgh->...igh", weight, self.act(node_msg))  # (..., N, G, out)
        else:
            e = edges[..., None, :].expand(*edges.shape[:-1], G, self.edge_dim)  # (..., N, N, G, edge_dim)
            msg = self.act(node_msg[..., None, :, :, :] + self.edge_lin(e))  # (..., N_recv, N_send, G, out)
            agg = (weight[..., None, None] * msg).sum(-3)  # (..., N, G, out)
        hears = (degree > 0).to(h.dtype)[..., None]  # (..., N, 1, 1)
        return self.act(self.self_lin(h) + hears * self.agg_lin(agg))  # (..., N, G, out)


class GraphNet(nn.Module):
    """Per-agent outputs through a graph: message-passing layers -> per-agent MLP layers ->
    [GRU/LSTM] -> linear head, optionally mean-pooled over agents.

    `hidden_sizes` are the widths of all hidden layers, as in `AgentNet`: the first
    `gnn_layers` of them pass messages, the rest are per-agent layers. The graph comes first, so
    the recurrent core (per agent, its state (B, N, H)) gets the agent axis intact.

    in_dim: each agent's input size; its own position and velocity, when known, are the ranges
    `pos_slice` and `vel_slice` of it, e.g. (2, 4) and (0, 2) for simple_spread's observation.
    They build the "from_pos" graph and, with `edge_features`, the edge features.
    pool: "none", one output per agent; "mean", the mean over agents' outputs given to every
    agent (a centralised critic's single value, BenchMARL's pooled GNN critic).

    forward(x (L, B, N, in_dim), state, starts (L, B, N)) -> (out (L, B, N, out_dim), state):
    `AgentNet`'s interface, so `Actor` and `Critic` take either.
    """

    def __init__(self, in_dim: int, out_dim: int, n_agents: int, share_params: bool = True,
                 hidden_sizes: Sequence[int] = (64, 64), gnn_layers: int = 1, topology: str = "full",
                 edge_radius: float = 1.0, self_loops: bool = False, pos_slice: Slice = None, vel_slice: Slice = None,
                 edge_features: bool = True, recurrent: str = "none", out_gain: float = 1.0,
                 activation: str = "tanh", pool: str = "none"):
        super().__init__()
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; accepted: {', '.join(TOPOLOGIES)}")
        if pool not in ("none", "mean"):
            raise ValueError(f"pool must be 'none' or 'mean', got {pool!r}")
        if not 1 <= gnn_layers <= len(hidden_sizes):
            raise ValueError(f"gnn_layers must be between 1 and len(hidden_sizes) = {len(hidden_sizes)} (the first "
                             f"gnn_layers hidden layers pass messages), got {gnn_layers}")
        for name, span in (("pos_slice", pos_slice), ("vel_slice", vel_slice)):
            if span is not None and not (len(span) == 2 and 0 <= span[0] < span[1] <= in_dim):
                raise ValueError(f"{name} must be (start, end) with 0 <= start < end <= in_dim = {in_dim}, got {span}")
        if topology == "from_pos" and pos_slice is None:
            raise ValueError("topology 'from_pos' builds edges from the agents' positions: give pos_slice, the "
                             "(start, end) range of each agent's own position in its input")
        if topology == "from_pos" and edge_radius <= 0:
            raise ValueError(f"edge_radius must be positive with topology 'from_pos', got {edge_radius}")
        self.n_agents, self.share_params, self.pool = n_agents, share_params, pool
        self.topology, self.edge_radius, self.self_loops = topology, edge_radius, self_loops
        self.pos_slice, self.vel_slice, self.edge_features = pos_slice, vel_slice, edge_features
        pos_dim = pos_slice[1] - pos_slice[0] if pos_slice and edge_features else 0
        vel_dim = vel_slice[1] - vel_slice[0] if vel_slice and edge_features else 0
        sep = None if share_params else n_agents
        layers, last = [], in_dim
        for h in hidden_sizes[:gnn_layers]:
            layers.append(MessagePassing(last, h, edge_dim(pos_dim, vel_dim), sep, activation))
            last = h
        self.gnn = nn.ModuleList(layers)
        self.body = MLP(last, hidden_sizes[gnn_layers:], None, sep, activation)  # per-agent layers after the graph
        last = self.body.out_dim
        self.core = RecurrentCore(last, last, recurrent, sep) if recurrent != "none" else None
        self.head = make_linear(last, out_dim, sep, gain=out_gain)

    def agent_rows(self) -> dict:
        """For every parameter: the row of its first axis that agent n uses, (N,), or None when one
        tensor serves every agent (as AgentNet.agent_rows; separate GNNs lead every tensor with N)."""
        rows = None if self.share_params else torch.arange(self.n_agents)
        return {name: rows for name, _ in self.named_parameters()}

    def initial_state(self, batch: int, device=None) -> State | None:
        return self.core.initial_state(batch, self.n_agents, device) if self.core is not None else None

    def graph(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The adjacency (..., N, N) and edge features (..., N, N, edge_dim) or None of input x (..., N, in_dim)."""
        pos = x[..., self.pos_slice[0]:self.pos_slice[1]] if self.pos_slice else None  # (..., N, P)
        vel = x[..., self.vel_slice[0]:self.vel_slice[1]] if self.vel_slice else None  # (..., N, V)
        adj = adjacency(self.topology, self.n_agents, pos, self.edge_radius, self.self_loops, x.device)
        return adj, edge_features(pos, vel) if self.edge_features else None

    def forward(self, x: torch.Tensor, state: State | None = None, starts: torch.Tensor | None = None):
        if x.dim() < 2 or x.shape[-2] != self.n_agents:
            raise ValueError(f"GraphNet input must keep the agent axis just before the features: expected "
                             f"(..., N={self.n_agents}, in_dim), got shape {tuple(x.shape)}")
        adj, edges = self.graph(x)
        G = 1 if self.share_params else self.n_agents
        h = x[..., None, :].expand(*x.shape[:-1], G, x.shape[-1])  # (..., N, G, in_dim): every copy sees every node
        for layer in self.gnn:
            h = layer(h, adj, edges)  # (..., N, G, H)
        # Agent i's features are those of node i in GNN copy i (the one shared copy: G = 1).
        h = h.squeeze(-2) if self.share_params else torch.diagonal(h, dim1=-3, dim2=-2).movedim(-1, -2)  # (..., N, H)
        h = self.body(h)
        if self.core is not None:
            h, state = self.core(h, state, starts)
        out = self.head(h)  # (L, B, N, out_dim)
        if self.pool == "mean":
            out = out.mean(-2, keepdim=True).expand_as(out)  # (L, B, N, out_dim), the same for every agent
        return out, state


__all__ = ["TOPOLOGIES", "GraphNet", "MessagePassing", "adjacency", "edge_dim", "edge_features"]
