"""Actors, critics and the action distributions they produce.

All take inputs shaped (L, B, N, in_dim): a time axis (L = 1 while acting, a sequence chunk
while training a recurrent model), batch axes, then the agent axis.
"""
import math
from typing import Dict, Optional, Sequence, Union

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from nets.encoders import FlatEncoder, MultiEncoder, encoder_for
from nets.layers import MLP, make_linear
from nets.recurrent import RecurrentCore, State

# Parameter layout of a network over N agents: True (one set for all), False (one per agent), or
# the set of every agent (agents of a group share one); `common.groups.param_layout` picks it.
Sharing = Union[bool, Sequence[int]]


class AgentNet(nn.Module):
    """Per-agent network: encoder -> [extra inputs, agent-id one-hot] -> MLP -> [GRU/LSTM] -> linear head.

    The encoder comes from the input's shape (`nets.encoder_for`): an int or (D,) is a flat vector
    and passes through; (H, W, C) is an image and goes through a small CNN; a tuple of shapes,
    ((H, W, C), (D,)), is several inputs, passed to forward as a tuple of tensors, each encoded
    on its own and concatenated (an image state and the joint action of a centralised critic).
    share_params=True: one set of weights for all agents; an agent-id one-hot is appended to
    the input so that identical observations can still lead to agent-specific outputs (the
    parameter-sharing pitfall: without it, agents in symmetric positions cannot specialise).
    share_params=False: separate weights per agent, run as one batched matmul. A list of ints
    is the same as passing it as param_groups (what `common.groups.param_layout` gives).
    param_groups (overrides share_params): agent n uses parameter set param_groups[n], sets
    numbered 0..G-1: agents of one group (a team) share weights, groups have their own, and
    all of them still run in one batched matmul. The one-hot is appended whenever a set
    serves more than one agent.

    Agents of different true sizes (the adapters pad observations and actions to the largest,
    zeros after each agent's own): in_sizes (N,) the true width of a flat input (for several
    inputs, a tuple with one (N,) or None per input), extra_sizes (N,) that of the extra input,
    out_mask (N, out_dim) True on the outputs agent n really has. With separate sets, each set's
    network is then the network of its agents' true sizes: its first layer reads only their true
    inputs (and the one-hot entries of its own agents), its head writes only their true outputs,
    the padding frame of the stacked weights stays 0 (`nets.layers.AgentLinear`). A network shared
    by all agents keeps the padded width (its one-hot tells the agents apart).

    forward(x (L, B, N, *in_shape) or a tuple of such tensors, state, starts (L, B, N),
            extra (L, B, N, extra_dim) or None) -> (out (L, B, N, out_dim), state)
    """

    def __init__(self, in_dim: Union[int, Sequence[int], Sequence[Sequence[int]]], out_dim: int, n_agents: int,
                 share_params: Sharing = True, hidden_sizes: Sequence[int] = (64, 64), recurrent: str = "none",
                 out_gain: float = 1.0, activation: str = "tanh", param_groups: Optional[Sequence[int]] = None,
                 extra_dim: int = 0, in_sizes: Optional[Sequence[int]] = None,
                 extra_sizes: Optional[Sequence[int]] = None, out_mask: Optional[torch.Tensor] = None):
        super().__init__()
        if not isinstance(share_params, bool):  # a list: every agent's parameter set (common.groups.param_layout)
            share_params, param_groups = False, list(share_params)
        if param_groups is None:
            param_groups = [0] * n_agents if share_params else list(range(n_agents))
            shared = share_params
        else:
            param_groups = [int(g) for g in param_groups]
            if len(param_groups) != n_agents or sorted(set(param_groups)) != list(range(max(param_groups) + 1)):
                raise ValueError(f"param_groups must give each of the {n_agents} agents a set number, using every "
                                 f"number from 0 to G-1; got {param_groups}")
            shared = max(param_groups) == 0
        self.n_agents, self.recurrent = n_agents, recurrent
        self.n_sets = 1 if shared else max(param_groups) + 1
        self.share_params = shared  # one set for every agent: plain nn.Linear layers
        self.agent_id_input = self.n_sets < n_agents or shared  # a set serves several agents: tell them apart
        sep = None if shared else self.n_sets
        index = None if shared or param_groups == list(range(n_agents)) else param_groups
        self.encoder = encoder_for(in_dim, sep, set_of_agent=index)
        body_in = self.encoder.out_dim + extra_dim + (n_agents if self.agent_id_input else 0)
        body_mask = head_mask = None
        if not shared:  # separate sets: each one sized to its agents' true inputs and outputs
            width = self.encoder.out_dim
            in_mask = input_mask(self.encoder, in_sizes, n_agents)
            body_mask, head_mask = true_size_masks(param_groups, width, in_mask, extra_dim,
                                                   size_mask(extra_sizes, extra_dim), self.agent_id_input, out_dim,
                                                   out_mask)
        self.body = MLP(body_in, hidden_sizes, None, sep, activation, set_of_agent=index, in_mask=body_mask)
        last = self.body.out_dim
        self.core = RecurrentCore(last, last, recurrent, sep, index) if recurrent != "none" else None
        self.head = make_linear(last, out_dim, sep, gain=out_gain, set_of_agent=index, out_mask=head_mask)
        # One shared body whose first layer is linear (`shared_body`): it takes an agent axis of 1, one input for
        # every agent, and runs its first layer once per row.
        self.reads_one_input = shared and len(self.body.net) > 0 and isinstance(self.body.net[0], nn.Linear)
        self.register_buffer("agent_ids", torch.eye(n_agents), persistent=False)
        self.register_buffer("set_of_agent", torch.as_tensor(param_groups, dtype=torch.long), persistent=False)

    def initial_state(self, batch: int, device=None) -> Optional[State]:
        return self.core.initial_state(batch, self.n_agents, device) if self.core is not None else None

    def agent_rows(self) -> Dict[str, Optional[torch.Tensor]]:
        """For every parameter: the row of its first axis that agent n uses, (N,), or None when
        one tensor serves every agent (shared weights). What copying or freezing a group needs."""
        rows = None if self.share_params else self.set_of_agent.cpu()
        return {name: rows for name, _ in self.named_parameters()}

    def forward(self, x: torch.Tensor, state: Optional[State] = None, starts: Optional[torch.Tensor] = None,
                extra: Optional[torch.Tensor] = None):
        if self.reads_one_input and extra is None:
            h = self.shared_body(self.encoder(x))
        else:
            x = self.encoder(x)  # (L, B, N, features)
            if extra is not None:
                x = torch.cat([x, extra], dim=-1)
            if self.agent_id_input:
                ids = self.agent_ids.expand(*x.shape[:-2], -1, -1)  # (L, B, N, N)
                x = torch.cat([x, ids], dim=-1)
            h = self.body(x)  # (L, B, N, hidden)
        if self.core is not None:
            h, state = self.core(h, state, starts)
        return self.head(h), state  # (L, B, N, out_dim)

    def shared_body(self, x: torch.Tensor) -> torch.Tensor:
        """The shared body on [x, one-hot of n] without building that input: the first layer's
        one-hot columns W_id add column n to agent n's pre-activation, so
        W [x, e_n] + b = W_x x + b + W_id[:, n], the same numbers up to rounding (and gradients).
        x (L, B, N, D), or (L, B, 1, D) when every agent gets the same input (a centralised
        critic's global state): its first layer then runs once per row, not once per agent."""
        first, D = self.body.net[0], x.shape[-1]
        h = nn.functional.linear(x, first.weight[:, :D], first.bias) + first.weight[:, D:].T  # (L, B, N, H)
        return self.body.net[1:](h)


def true_size_masks(set_of_agent: Sequence[int], in_dim: int, in_mask: Optional[torch.Tensor], extra_dim: int,
                    extra_mask: Optional[torch.Tensor], agent_ids: bool, out_dim: int, out_mask: Optional[torch.Tensor]):
    """Per-agent masks of true sizes -> per-set masks of an AgentNet's first layer input
    [input | extra | agent-id one-hot] (G, in_dim + extra_dim [+ N]) and of its head (G, out_dim):
    what any agent of the set has (a set's one-hot entries are its own agents'). A mask with
    nothing padded is None, so a network of equal-size agents is built as it always was."""
    sets = torch.as_tensor(list(set_of_agent))
    members = nn.functional.one_hot(sets, int(sets.max()) + 1).T.bool()  # (G, N): set g serves agent n

    def per_set(mask, width):
        if mask is None:
            return torch.ones(len(members), width, dtype=torch.bool)
        return (members[:, :, None] & torch.as_tensor(mask, dtype=torch.bool).cpu()[None]).any(1)

    body = torch.cat([per_set(in_mask, in_dim), per_set(extra_mask, extra_dim)] + ([members] if agent_ids else []), -1)
    head = per_set(out_mask, out_dim)
    return (None if body.all() else body), (None if head.all() else head)


def input_mask(encoder: nn.Module, in_sizes, n_agents: int) -> Optional[torch.Tensor]:
    """(N, encoder.out_dim) bool: the encoder outputs that carry agent n's true inputs. A flat input
    (or a flat part of several, `in_sizes` then one entry per input) keeps its first in_sizes[n]
    entries; an image's features and a part given None are kept whole. None when nothing is cut."""
    if in_sizes is None:
        return None
    parts, sizes = (encoder.parts, in_sizes) if isinstance(encoder, MultiEncoder) else ([encoder], [in_sizes])
    masks = [size_mask(n, part.out_dim) if n is not None and isinstance(part, FlatEncoder)
             else torch.ones(n_agents, part.out_dim, dtype=torch.bool) for part, n in zip(parts, sizes)]
    return torch.cat(masks, -1)


def size_mask(sizes: Optional[Sequence[int]], width: int) -> Optional[torch.Tensor]:
    """Every agent's true size -> (N, width) bool, True on its first sizes[n] entries (None -> None)."""
    return None if sizes is None else torch.arange(width)[None, :] < torch.as_tensor(list(sizes))[:, None]


class MaskedCategorical(Categorical):
    """Categorical over discrete actions where masked-out actions get zero probability."""

    def __init__(self, logits: torch.Tensor, mask: Optional[torch.Tensor] = None):
        if mask is not None:
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        super().__init__(logits=logits, validate_args=False)  # validation costs more than the net here

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        """Gumbel-max: argmax(logits + Gumbel noise) is an exact draw from the categorical, and
        on the CPU several times faster than the multinomial sampler for small batches."""
        if sample_shape:
            return super().sample(sample_shape)
        u = torch.rand_like(self.logits)
        return (self.logits - torch.log(-torch.log(u))).argmax(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def agent(self, n: int) -> "MaskedCategorical":
        """The distribution of agent n alone, over (L, B, 1): axis 2 of (L, B, N, n_actions) cut."""
        return MaskedCategorical(self.logits[:, :, n:n + 1])

    def entropy(self) -> torch.Tensor:
        # p*log p with p = 0 is 0; the masked logits would otherwise give 0 * -inf.
        p_log_p = self.probs * self.logits
        return -torch.where(self.probs > 0, p_log_p, torch.zeros_like(p_log_p)).sum(-1)


class MaskedGaussian:
    """Diagonal Gaussian over continuous actions; padded action dimensions are ignored."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, dim_mask: torch.Tensor):
        self.normal = Normal(mean, log_std.exp().expand_as(mean), validate_args=False)
        self.dim_mask = dim_mask.float()  # (N, act_dim), 1 where the agent has that dimension

    def sample(self) -> torch.Tensor:
        return self.normal.sample()

    def mode(self) -> torch.Tensor:
        return self.normal.mean

    def agent(self, n: int) -> "MaskedGaussian":
        """The distribution of agent n alone, over (L, B, 1, act_dim)."""
        one = slice(n, n + 1)
        return MaskedGaussian(self.normal.loc[:, :, one], self.normal.scale[:, :, one].log(), self.dim_mask[one])

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return (self.normal.log_prob(action) * self.dim_mask).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.normal.entropy() * self.dim_mask).sum(-1)


class Actor(nn.Module):
    """Policy: obs (L, B, N, obs_dim) -> action distribution over (L, B, N[, act_dim]).

    Discrete: logits with the action mask applied. Continuous: a Gaussian whose mean comes
    from the network and whose log-std is a learned per-agent parameter (state-independent).
    `net` replaces the default `AgentNet` with another body of the same interface (a
    `nets.gnn.GraphNet` with out_dim = action_size); the other network arguments are then unused.
    obs_dim: an int for flat observations, or the env's `obs_shape`; (H, W, C) images get a CNN.
    obs_sizes: every agent's true observation size (the env's `obs_dims`); with separate
    parameter sets each is sized to its agents' true observations and actions (`AgentNet`).
    action_factors: a discrete action that is a tuple of choices, (5, 10) for simple_reference's
    (move, word) with a = word * 5 + move (the env's `action_factors`, the first factor varying
    fastest): the network gives one logit per choice of each factor, 5 + 10, and the logit of a
    joint action is their sum, so the policy is the product of one categorical per factor (a word's
    preference is learned once for every move) while everything downstream still sees the 50 joint
    actions, their masks, log-probabilities and entropy (the factors' entropies summed).
    """

    def __init__(self, obs_dim: Union[int, Sequence[int]], n_agents: int, discrete: bool, action_size: int,
                 action_dim_mask: torch.Tensor, share_params: Sharing = True, hidden_sizes=(64, 64),
                 recurrent: str = "none", activation: str = "tanh", init_log_std: float = -0.5,
                 param_groups: Optional[Sequence[int]] = None, net: Optional[nn.Module] = None,
                 obs_sizes: Optional[Sequence[int]] = None, action_factors: Optional[Sequence[int]] = None):
        super().__init__()
        self.discrete = discrete
        action_dim_mask = torch.as_tensor(action_dim_mask, dtype=torch.bool)
        self.action_factors = tuple(int(f) for f in action_factors) if action_factors else None
        head, head_mask = action_size, action_dim_mask
        if self.action_factors is not None:
            if not discrete or math.prod(self.action_factors) != action_size or not action_dim_mask.all():
                raise ValueError(f"action_factors {self.action_factors} must multiply to the {action_size} discrete "
                                 "actions every agent has")
            if net is not None:
                raise ValueError("a factored head is built on the actor's own network, not on a given `net`")
            head, head_mask = sum(self.action_factors), None
        self.net = net if net is not None else AgentNet(obs_dim, head, n_agents, share_params, hidden_sizes,
                                                        recurrent, out_gain=0.01, activation=activation,
                                                        param_groups=param_groups, in_sizes=obs_sizes,
                                                        out_mask=head_mask)
        self.register_buffer("action_dim_mask", action_dim_mask)
        self.pads_actions = not bool(action_dim_mask.all())  # some agent has fewer actions than the head
        if not discrete:
            self.log_std = nn.Parameter(torch.full((n_agents, action_size), init_log_std))

    def initial_state(self, batch: int, device=None):
        return self.net.initial_state(batch, device)

    def agent_rows(self) -> Dict[str, Optional[torch.Tensor]]:
        """AgentNet.agent_rows for the whole actor; the log-std has one row per agent."""
        rows = {f"net.{k}": v for k, v in self.net.agent_rows().items()}
        if not self.discrete:
            rows["log_std"] = torch.arange(self.net.n_agents)
        return rows

    def joint_logits(self, out: torch.Tensor) -> torch.Tensor:
        """(..., sum(factors)) logits of each factor's choices -> (..., prod(factors)) logits of the joint
        actions, a = f0 + s0 * (f1 + s1 * (f2 + ...)): each the sum of its choices' logits."""
        pieces = out.split(self.action_factors, dim=-1)
        joint = pieces[0]
        for piece in pieces[1:]:
            joint = (piece[..., :, None] + joint[..., None, :]).flatten(-2)
        return joint

    def forward(self, obs, state=None, starts=None, action_mask=None):
        out, state = self.net(obs, state, starts)  # (L, B, N, action_size), or (..., sum(factors))
        if self.action_factors is not None:
            out = self.joint_logits(out)
        if self.discrete:
            mask = action_mask
            if mask is None and self.pads_actions:  # no env mask: only the head's padded actions are masked
                mask = self.action_dim_mask
            return MaskedCategorical(out, mask), state
        return MaskedGaussian(out, self.log_std, self.action_dim_mask), state


class Critic(nn.Module):
    """State-value network: input (L, B, N, in_dim) -> value (L, B, N), one value per agent.

    A centralised critic is this module fed the global state (or all observations) for every
    agent; a decentralised one is fed each agent's own observation. in_dim: an int, or an image
    shape (H, W, C) for a CNN (the input may then come flattened, like an adapter's state), or a
    tuple of shapes for several inputs, given as a tuple of tensors (a Q critic on the state and
    the joint action, `AgentNet`). `net`
    replaces the default `AgentNet` with another body of the same interface and out_dim 1 (a
    `nets.gnn.GraphNet`). in_sizes: every agent's true input size, for a critic on each agent's own
    observation (the env's `obs_dims`; see `AgentNet`).
    """

    def __init__(self, in_dim: Union[int, Sequence[int], Sequence[Sequence[int]]], n_agents: int,
                 share_params: Sharing = True, hidden_sizes=(64, 64), recurrent: str = "none", activation: str = "tanh",
                 param_groups: Optional[Sequence[int]] = None, net: Optional[nn.Module] = None,
                 in_sizes: Optional[Sequence[int]] = None):
        super().__init__()
        self.n_agents = n_agents
        self.net = net if net is not None else AgentNet(in_dim, 1, n_agents, share_params, hidden_sizes, recurrent,
                                                        out_gain=1.0, activation=activation, param_groups=param_groups,
                                                        in_sizes=in_sizes)

    def initial_state(self, batch: int, device=None):
        return self.net.initial_state(batch, device)

    def agent_rows(self) -> Dict[str, Optional[torch.Tensor]]:
        return {f"net.{k}": v for k, v in self.net.agent_rows().items()}

    def forward(self, x, state=None, starts=None):
        """x (L, B, N, *in_dim), or (L, B, 1, *in_dim): one input that every agent's value reads (the
        global state), which a shared network takes as it is (`AgentNet.shared_body`) and any other
        gets copied to each agent."""
        if torch.is_tensor(x) and x.shape[2] == 1 < self.n_agents and not getattr(self.net, "reads_one_input", False):
            x = x.expand(*x.shape[:2], self.n_agents, *x.shape[3:])
        value, state = self.net(x, state, starts)
        return value.squeeze(-1), state  # (L, B, N)


def forward_agent(module: nn.Module, agent: int, obs, state=None, starts=None, action_mask=None,
                  params: Optional[Dict[str, torch.Tensor]] = None):
    """Run one agent of an `Actor` with separate parameters per agent (share_params=False) on its
    own, for 1/N of the work of the full call.

    Every parameter (or, given, `params`: full-size tensors by name, as torch.func.functional_call
    takes them) and the actor's action_dim_mask are cut to row `agent` of their agent axis (views:
    gradients land in that row), and so is every input: obs, starts and action_mask (L, B, N, ...)
    on axis 2, the recurrent state's (B, N, H) tensors on axis 1. The outputs keep an agent axis of
    length 1 and equal slot `agent` of the full call. The heterogeneous-agent methods (HAPPO,
    HATRPO, HAA2C) need it: they update one agent at a time. An image encoder's grouped
    convolutions (nets.encoders) do not keep the agent on the first axis of their weights; such an
    actor runs in full and its distribution is cut to the agent afterwards (the same numbers).
    """
    rows = module.agent_rows()
    n_agents = module.net.n_agents
    if any(r is None or not torch.equal(r, torch.arange(n_agents)) for r in rows.values()):
        raise ValueError("forward_agent needs one parameter set per agent (share_params=False, no groups)")
    one = slice(agent, agent + 1)
    if any(True for _ in module.net.encoder.parameters()):  # a CNN in front: run every agent, keep one
        dist, state = torch.func.functional_call(module, params or {}, (obs, state, starts, action_mask))
        return dist.agent(agent), None if state is None else tuple(s[:, one] for s in state)
    full = dict(module.named_parameters()) if params is None else params
    mine = {name: tensor[one] for name, tensor in full.items()}
    mine["action_dim_mask"] = module.action_dim_mask[one]
    for name, mask in module.named_buffers():  # true-size frames of the weights (nets.layers.AgentLinear)
        if name.endswith(("weight_mask", "bias_mask")):
            mine[name] = mask[one]

    def cut(x):  # (L, B, N, ...) -> (L, B, 1, ...)
        return None if x is None else x[:, :, one]

    state = None if state is None else tuple(s[:, one] for s in state)
    return torch.func.functional_call(module, mine, (cut(obs), state, cut(starts), cut(action_mask)))


class DeterministicAction:
    """The "distribution" of a deterministic continuous policy: `mode()` and `sample()` are mu(o);
    exploration noise is the algorithm's business."""

    def __init__(self, action: torch.Tensor):
        self.action = action

    def mode(self) -> torch.Tensor:
        return self.action

    sample = mode


class DeterministicActor(nn.Module):
    """Deterministic policy mu(o) of the DDPG family (DDPG, MADDPG, FACMAC, MATD3), feed-forward.

    obs_dim: an int for flat observations, or the env's `obs_shape`; (H, W, C) images get a CNN.
    `output(obs (..., N, obs_dim), action_mask)` ->
      continuous: actions (..., N, act_dim) = tanh(net(o)) in the adapters' normalised box
                  [-1, 1] (the env adapter maps it onto each agent's own bounds), 0 in padded dims;
      discrete:   logits (..., N, n_actions) with unavailable and padded actions at the dtype's
                  minimum; the algorithm turns them into one-hot actions (Gumbel-softmax).
    forward(obs (L, B, N, obs_dim), state, starts, action_mask) -> (policy, None): the `Actor`
    interface that `common.run_utils.evaluate` calls; `policy.mode()` is mu(o) (continuous) or
    the argmax of the logits (discrete). obs_sizes: every agent's true observation size (`Actor`).
    """

    def __init__(self, obs_dim: Union[int, Sequence[int]], n_agents: int, discrete: bool, action_size: int,
                 action_dim_mask: torch.Tensor, share_params: Sharing = True, hidden_sizes=(64, 64),
                 activation: str = "relu", obs_sizes: Optional[Sequence[int]] = None):
        super().__init__()
        self.discrete = discrete
        self.net = AgentNet(obs_dim, action_size, n_agents, share_params, hidden_sizes, "none", out_gain=0.01,
                            activation=activation, in_sizes=obs_sizes, out_mask=action_dim_mask)
        self.register_buffer("action_dim_mask", torch.as_tensor(action_dim_mask, dtype=torch.bool))

    def initial_state(self, batch: int, device=None):
        return None

    def output(self, obs: torch.Tensor, action_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        out, _ = self.net(obs)  # (..., N, action_size)
        if self.discrete:
            mask = self.action_dim_mask if action_mask is None else action_mask.bool()
            return out.masked_fill(~mask, torch.finfo(out.dtype).min)
        return torch.tanh(out) * self.action_dim_mask  # padded dimensions stay 0

    def forward(self, obs, state=None, starts=None, action_mask=None):
        out = self.output(obs, action_mask)
        return (MaskedCategorical(out) if self.discrete else DeterministicAction(out)), None


class SquashedGaussian:
    """tanh(u), u ~ N(mean, std): a Gaussian squashed into [-1, 1] (SAC, Haarnoja et al. 2018,
    appendix C). Padded action dimensions are 0 and do not count in the log-probability."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, dim_mask: torch.Tensor):
        self.mean, self.std, self.dim_mask = mean, log_std.exp(), dim_mask.float()

    def rsample_with_log_prob(self):
        """A reparameterised draw (gradients reach mean and std) and its log-density:
        log pi(a) = sum_d [log N(u_d) - log(1 - tanh(u_d)^2)], the change of variables of eq. 21;
        log(1 - tanh(u)^2) is written as 2 (log 2 - u - softplus(-2u)) for numerical stability."""
        u = self.mean + self.std * torch.randn_like(self.mean)
        log_prob = Normal(self.mean, self.std, validate_args=False).log_prob(u)
        log_prob = log_prob - 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        return torch.tanh(u) * self.dim_mask, (log_prob * self.dim_mask).sum(-1)  # (..., act_dim), (...)

    def sample(self) -> torch.Tensor:
        return self.rsample_with_log_prob()[0].detach()

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean) * self.dim_mask


class SquashedGaussianActor(nn.Module):
    """Stochastic continuous policy of SAC-style methods: obs (..., N, obs_dim) -> SquashedGaussian
    over (..., N, act_dim) with a state-dependent mean and log-std (clamped to [-5, 2]).

    forward(obs (L, B, N, obs_dim), state, starts, action_mask) -> (dist, None), the `Actor`
    interface; `dist.mode()` is tanh(mean), the greedy action used in evaluation.
    obs_dim: an int for flat observations, or the env's `obs_shape`; (H, W, C) images get a CNN.
    obs_sizes: every agent's true observation size (`Actor`).
    """

    def __init__(self, obs_dim: Union[int, Sequence[int]], n_agents: int, action_dim: int,
                 action_dim_mask: torch.Tensor, share_params: Sharing = True, hidden_sizes=(64, 64), activation: str = "relu",
                 obs_sizes: Optional[Sequence[int]] = None):
        super().__init__()
        dims = torch.as_tensor(action_dim_mask, dtype=torch.bool)
        self.net = AgentNet(obs_dim, 2 * action_dim, n_agents, share_params, hidden_sizes, "none", out_gain=0.01,
                            activation=activation, in_sizes=obs_sizes, out_mask=torch.cat([dims, dims], -1))
        self.register_buffer("action_dim_mask", torch.as_tensor(action_dim_mask, dtype=torch.bool))

    def initial_state(self, batch: int, device=None):
        return None

    def forward(self, obs, state=None, starts=None, action_mask=None):
        out, _ = self.net(obs)  # (..., N, 2 * act_dim)
        mean, log_std = out.chunk(2, dim=-1)
        return SquashedGaussian(mean, log_std.clamp(-5.0, 2.0), self.action_dim_mask), None


class GreedyQ:
    """The greedy "distribution" of a Q network: `mode()` is the best available action.

    q (..., A) action values; mask (..., A) True where the action is available. Unavailable
    actions get -inf, so they are never chosen (and never bootstrapped from).
    """

    def __init__(self, q: torch.Tensor, mask: Optional[torch.Tensor] = None):
        self.q = q if mask is None else q.masked_fill(~mask.bool(), float("-inf"))

    def mode(self) -> torch.Tensor:
        return self.q.argmax(-1)

    sample = mode  # acting greedily; epsilon-greedy exploration is the algorithm's business


class QPolicy(nn.Module):
    """Per-agent utilities Q_i(tau_i, .) for value-based methods (IQL, VDN, QMIX, QPLEX).

    Wraps an `AgentNet` whose input is the observation (flat, or an (H, W, C) image read by a
    CNN: obs_dim is then the env's `obs_shape`), optionally followed by the one-hot of
    the agent's previous action (zeros at an episode start): with a recurrent core the agent
    then conditions on its own action-observation history, as in DRQN-style MARL agents.

    q_values(obs (L, B, N, obs_dim), last_onehot (L, B, N, A) or None, state, starts (L, B, N))
        -> (q (L, B, N, A), state)   for training on whole sequences.
    forward(obs, state, starts, action_mask) -> (GreedyQ, state)   the `Actor` interface used to
        act and by `common.run_utils.evaluate`; the previous action rides in the state tuple
        and is written there by `remember(state, action)` once the action is chosen.
    obs_sizes, action_sizes: every agent's true observation size and action count (the env's
    `obs_dims`, `action_dims`); with separate parameter sets each is sized to them (`AgentNet`).
    hidden_layers: linear layers of width hidden_dim before the core (one in PyMARL's agents).
    """

    def __init__(self, obs_dim: Union[int, Sequence[int]], n_actions: int, n_agents: int, share_params: Sharing = True,
                 hidden_dim: int = 64, recurrent: str = "gru", last_action_input: bool = False,
                 obs_sizes: Optional[Sequence[int]] = None, action_sizes: Optional[Sequence[int]] = None,
                 hidden_layers: int = 1):
        super().__init__()
        self.n_actions, self.n_agents, self.last_action_input = n_actions, n_agents, last_action_input
        self.net = AgentNet(obs_dim, n_actions, n_agents, share_params, (hidden_dim,) * hidden_layers, recurrent,
                            out_gain=1.0, activation="relu", extra_dim=n_actions if last_action_input else 0,
                            in_sizes=obs_sizes, extra_sizes=action_sizes if last_action_input else None,
                            out_mask=size_mask(action_sizes, n_actions))

    def q_values(self, obs, last_onehot, state, starts):
        return self.net(obs, state, starts, last_onehot if self.last_action_input else None)

    def initial_state(self, batch: int, device=None):
        core = self.net.initial_state(batch, device) or ()
        last = (torch.zeros(batch, self.n_agents, self.n_actions, device=device),) if self.last_action_input else ()
        return (core + last) or None

    def forward(self, obs, state=None, starts=None, action_mask=None):
        core, last = self._split(state)
        if self.last_action_input:
            keep = 1.0 - starts[0].unsqueeze(-1).float()  # a new episode has no previous action
            last = last * keep
        q, core = self.q_values(obs, None if last is None else last[None], core, starts)
        new_state = ((core or ()) + ((last,) if self.last_action_input else ())) or None
        return GreedyQ(q, action_mask), new_state

    def remember(self, state, action: torch.Tensor):
        """Record the chosen action (B, N) as the next step's previous action."""
        if not self.last_action_input:
            return state
        core, _ = self._split(state)
        return (core or ()) + (nn.functional.one_hot(action.long(), self.n_actions).float(),)

    def _split(self, state):
        if state is None:
            return None, None
        if self.last_action_input:
            return (state[:-1] or None), state[-1]
        return state, None


class ValueNorm(nn.Module):
    """Running mean and variance of value targets (MAPPO's ValueNorm, Yu et al. 2022).

    The critic predicts normalised values; targets are normalised with the running
    statistics, and predictions are denormalised before they enter GAE. The statistics are
    debiased exponential moving averages (beta close to 1), kept as buffers so that they are
    saved in checkpoints with the networks.

    groups: None keeps one set of statistics for every value. Given (agent n in group
    groups[n]), each group keeps its own: `update(x (..., N), mask (..., N))` and
    `normalize`/`denormalize` act on tensors whose last axis is the agent, so competing teams'
    returns (a predator's +10 is a prey's -10) never share a mean.
    """

    def __init__(self, beta: float = 0.99999, epsilon: float = 1e-5, groups: Optional[Sequence[int]] = None):
        super().__init__()
        self.beta, self.epsilon = beta, epsilon
        shape = () if groups is None else (max(groups) + 1,)
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_mean_sq", torch.zeros(shape))
        self.register_buffer("debiasing_term", torch.zeros(shape))
        self.group_onehot: Optional[torch.Tensor]
        if groups is None:
            self.group_onehot = None
        else:  # (N, G): agent n's row is the one-hot of its group
            self.register_buffer("group_onehot", nn.functional.one_hot(torch.as_tensor(list(groups))).float(),
                                 persistent=False)

    def stats(self):
        """(mean, var): scalars, or (N,) with every agent's group's statistics."""
        debias = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.running_mean / debias
        var = (self.running_mean_sq / debias - mean**2).clamp(min=1e-2)
        if self.group_onehot is not None:
            return self.group_onehot @ mean, self.group_onehot @ var  # (N,), (N,)
        return mean, var

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> None:
        """Fold a batch into the statistics: without groups every entry of x counts; with
        groups x and mask are (..., N) and a group with no entry under the mask keeps its
        statistics as they were."""
        if self.group_onehot is None:
            batch_mean, batch_mean_sq, keep = x.mean(), (x**2).mean(), self.beta
        elif self.group_onehot.shape[1] == 1:  # one group: the same sums as the ungrouped statistics of x[mask]
            x = x if mask is None else x[mask.bool()]
            if x.numel() == 0:
                return
            batch_mean, batch_mean_sq, keep = x.mean(), (x**2).mean(), self.beta
        else:
            N = self.group_onehot.shape[0]
            m = (torch.ones_like(x) if mask is None else mask.float()).reshape(-1, N)
            x = x.reshape(-1, N)
            counts = m.sum(0) @ self.group_onehot  # (G,)
            batch_mean = (x * m).sum(0) @ self.group_onehot / counts.clamp(min=1.0)  # (G,)
            batch_mean_sq = (x**2 * m).sum(0) @ self.group_onehot / counts.clamp(min=1.0)  # (G,)
            keep = torch.where(counts > 0, self.beta, 1.0)  # (G,) 1: a group without data keeps its statistics
        self.running_mean.mul_(keep).add_(batch_mean * (1 - keep))
        self.running_mean_sq.mul_(keep).add_(batch_mean_sq * (1 - keep))
        self.debiasing_term.mul_(keep).add_(1 - keep)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.stats()
        return (x - mean) / var.sqrt()

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.stats()
        return x * var.sqrt() + mean


class RunningNorm(nn.Module):
    """Per-feature running mean and variance of an input, and the input standardised with them
    (gymnasium's NormalizeObservation, kept as buffers so that checkpoints hold it).

    update(x (..., D)) folds a batch in with exact counts (the parallel form of Welford's algorithm);
    forward(x (..., D)) = clip((x - mean) / sqrt(var + epsilon), -clip, clip). A feature that has
    been constant so far maps to 0.
    """

    def __init__(self, dim: int, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__()
        self.clip, self.epsilon = clip, epsilon
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.tensor(0.0))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).to(self.mean.dtype)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.var.copy_((self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total)
        self.mean.add_(delta * n / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + self.epsilon)).clamp(-self.clip, self.clip)


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - pred] / Var[target]; 1 is perfect, 0 no better than a constant."""
    var = target.var()
    return float("nan") if var == 0 else float(1 - (target - pred).var() / var)


__all__ = ["AgentNet", "Actor", "Critic", "ValueNorm", "MaskedCategorical", "MaskedGaussian",
           "explained_variance", "DeterministicAction", "DeterministicActor", "SquashedGaussian",
           "SquashedGaussianActor"]
