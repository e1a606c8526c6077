"""The Multi-Agent Transformer (Wen et al. 2022, "Multi-Agent Reinforcement Learning is a Sequence
Modeling Problem", arXiv:2205.14953): the agents of one step form a sequence.

- The encoder embeds every agent's observation and lets the agents attend to each other (no
  mask): each agent gets a representation rep_i of the whole situation, and a value V(o)_i from it.
- The decoder emits the agents' actions in order. Its input is the action sequence shifted right by
  one, with a start token first: position i holds agent i-1's action. Causal self-attention over
  that input, then attention from rep_i (the queries) to it, again causal, so agent i's action
  depends on every agent's observation (through rep) and on the actions of agents 0..i-1 only.
  Acting (`act`) runs it once per agent, feeding each chosen action to the next; training
  (`evaluate`) runs it once over the whole shifted sequence of the stored actions, which gives
  every agent the same distribution as acting did.
- decoder="dec" (MAT-Dec): each agent's action from its own observation alone (one MLP shared by
  the agents); the encoder is then only a centralised critic.

Sizes follow the authors' code: post-LayerNorm blocks with a GELU MLP as wide as the embedding,
orthogonal initialisation with gain sqrt(2) for the layers a GELU follows and 0.01 for all others
(attention projections, heads). A discrete start token is an
extra one-hot entry in front of the action one-hot. Continuous actions keep the same extra entry
(the authors' start token there is an all-zero action, which a real action can equal). The
continuous Gaussian has a learned log standard deviation per action dimension, starting at -0.5
(std 0.61 in units of the [-1, 1] action box), as MAPPO's actor here; the authors bound the std by
0.5 sigmoid(p), which learned slower on continuous simple_spread (docs/algorithms/mat.md). The authors
also put a LayerNorm on each agent's raw observation; here it is optional (obs_layernorm) and off:
it divides every observation by the spread of its own features, so an agent far from the landmarks
and one near them can look alike, and the values (explained variance) and returns suffer.

Inputs put the agent axis before the features, after any batch axes: obs (..., N, obs_dim).
"""
import math
from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from nets.policy import MaskedCategorical, MaskedGaussian

GELU_GAIN = math.sqrt(2)  # the authors' gain for layers followed by an activation (PyTorch's ReLU gain)


def linear(in_dim: int, out_dim: int, gain: float = 0.01, bias: bool = True) -> nn.Linear:
    """nn.Linear with an orthogonal weight of this gain and a zero bias."""
    layer = nn.Linear(in_dim, out_dim, bias=bias)
    nn.init.orthogonal_(layer.weight, gain)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def block_mlp(n_embd: int) -> nn.Sequential:
    return nn.Sequential(linear(n_embd, n_embd, GELU_GAIN), nn.GELU(), linear(n_embd, n_embd))


class Attention(nn.Module):
    """Multi-head attention of `query`'s positions over `memory`'s, both (B, n, n_embd) -> (B, n, n_embd).
    causal: position i sees memory positions 0..i only (what keeps the decoder from reading later agents)."""

    def __init__(self, n_embd: int, n_head: int, causal: bool):
        super().__init__()
        self.n_head, self.causal = n_head, causal
        self.query, self.key, self.value = linear(n_embd, n_embd), linear(n_embd, n_embd), linear(n_embd, n_embd)
        self.proj = linear(n_embd, n_embd)

    def forward(self, query: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        B, n, D = query.shape
        y = F.scaled_dot_product_attention(self.heads(self.query(query)), self.heads(self.key(memory)),
                                           self.heads(self.value(memory)), is_causal=self.causal)  # (B, H, n, D/H)
        return self.proj(y.transpose(1, 2).reshape(B, n, D))

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n, D) -> (B, H, n, D / H): the heads side by side as a batch axis."""
        B, n, D = x.shape
        return x.view(B, n, self.n_head, D // self.n_head).transpose(1, 2)


class EncoderBlock(nn.Module):
    """Self-attention over all agents (no mask), then an MLP; residuals with post-LayerNorm."""

    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.attn = Attention(n_embd, n_head, causal=False)
        self.mlp = block_mlp(n_embd)
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, x))
        return self.ln2(x + self.mlp(x))


class DecoderBlock(nn.Module):
    """Causal self-attention over the (shifted) actions; then the agents' representations attend,
    causally, to the result (rep_i is the query: the residual path carries agent i's own encoding);
    then an MLP. x, rep: (B, n, n_embd)."""

    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.self_attn = Attention(n_embd, n_head, causal=True)
        self.cross_attn = Attention(n_embd, n_head, causal=True)
        self.mlp = block_mlp(n_embd)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)

    def forward(self, x: torch.Tensor, rep: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.self_attn(x, x))
        x = self.ln2(rep + self.cross_attn(rep, x))
        return self.ln3(x + self.mlp(x))


def head(n_embd: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(linear(n_embd, n_embd, GELU_GAIN), nn.GELU(), nn.LayerNorm(n_embd), linear(n_embd, out_dim))


class MultiAgentTransformer(nn.Module):
    """Encoder (values and representations) and decoder (actions) over N agents, one set of weights.

    obs_dim: the (padded) observation width; action_size: n_actions (discrete) or act_dim (continuous);
    action_dim_mask (N, action_size): True where agent n really has that action (or dimension).

    encode(obs (..., N, obs_dim)) -> values (..., N), rep (..., N, n_embd)
    evaluate(obs, actions (..., N) or (..., N, act_dim), action_mask) -> values (..., N), distribution over
        (..., N): the training pass, every agent at once from the shifted actions
    act(obs, action_mask, greedy, given) -> actions, log-probs (..., N), values (..., N): agents in order
    forward(obs (L, B, N, obs_dim), state, starts, action_mask) -> (distribution whose mode() and sample()
        decode in order, None): the `nets.Actor` interface that evaluation and --load-group use
    """

    def __init__(self, obs_dim: int, n_agents: int, discrete: bool, action_size: int, action_dim_mask: torch.Tensor,
                 n_block: int = 1, n_embd: int = 64, n_head: int = 1, decoder: str = "mat",
                 obs_layernorm: bool = False):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} must be a multiple of n_head {n_head}")
        self.discrete, self.action_size, self.sequential = discrete, action_size, decoder == "mat"
        self.register_buffer("action_dim_mask", torch.as_tensor(action_dim_mask, dtype=torch.bool).reshape(
            n_agents, action_size))
        def obs_norm():  # the raw observation as it is, or through a LayerNorm over its features (the authors')
            return nn.LayerNorm(obs_dim) if obs_layernorm else nn.Identity()

        self.obs_embed = nn.Sequential(obs_norm(), linear(obs_dim, n_embd, GELU_GAIN), nn.GELU())
        self.encoder_ln = nn.LayerNorm(n_embd)
        self.encoder = nn.ModuleList([EncoderBlock(n_embd, n_head) for _ in range(n_block)])
        self.value_head = head(n_embd, 1)
        if self.sequential:
            # entry 0: the start token; entries 1..: the previous agent's action (one-hot or continuous values)
            self.action_embed = nn.Sequential(linear(action_size + 1, n_embd, GELU_GAIN, bias=False), nn.GELU())
            self.decoder_ln = nn.LayerNorm(n_embd)
            self.decoder = nn.ModuleList([DecoderBlock(n_embd, n_head) for _ in range(n_block)])
            self.action_head = head(n_embd, action_size)
        else:  # MAT-Dec: a decentralised actor on the agent's own observation
            self.actor = nn.Sequential(obs_norm(), linear(obs_dim, n_embd, GELU_GAIN), nn.GELU(),
                                       nn.LayerNorm(n_embd), linear(n_embd, n_embd, GELU_GAIN), nn.GELU(),
                                       nn.LayerNorm(n_embd), linear(n_embd, action_size))
        if not discrete:
            self.log_std = nn.Parameter(torch.full((action_size,), -0.5))  # one per action dimension

    def initial_state(self, batch: int, device=None) -> None:
        return None  # feed-forward over time: nothing carried from one step to the next

    # ------------------------------------------------------------------ the two halves
    def encode(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """obs (..., N, obs_dim) -> values (..., N), rep (..., N, n_embd)."""
        lead, (N, D) = obs.shape[:-2], obs.shape[-2:]
        x = self.encoder_ln(self.obs_embed(obs.reshape(-1, N, D)))  # (B, N, n_embd)
        for block in self.encoder:
            x = block(x)
        return self.value_head(x)[..., 0].reshape(*lead, N), x.reshape(*lead, N, -1)

    def shift(self, actions: torch.Tensor) -> torch.Tensor:
        """The decoder's input: (..., N) indices or (..., N, act_dim) -> (..., N, action_size + 1), the
        start token at position 0 and agent i-1's action at position i (the last agent's is not read)."""
        if self.discrete:
            a = F.one_hot(actions.long(), self.action_size).to(self.encoder_ln.weight.dtype)
        else:
            a = actions * self.action_dim_mask  # padded dimensions (agents with fewer) do not leak in
        start = F.one_hot(torch.zeros_like(a[..., :1, 0], dtype=torch.long), self.action_size + 1).to(a.dtype)
        return torch.cat([start, F.pad(a[..., :-1, :], (1, 0))], dim=-2)  # (..., N, action_size + 1)

    def decode(self, rep: torch.Tensor, obs: torch.Tensor, shifted: torch.Tensor) -> torch.Tensor:
        """Logits or Gaussian means (..., n, action_size) for the first n agents, from their representations
        rep (..., n, n_embd) and the shifted actions (..., n, action_size + 1); MAT-Dec reads obs only."""
        if not self.sequential:
            return self.actor(obs)
        lead, n = rep.shape[:-2], rep.shape[-2]
        x = self.decoder_ln(self.action_embed(shifted.reshape(-1, n, shifted.shape[-1])))  # (B, n, n_embd)
        r = rep.reshape(-1, n, rep.shape[-1])
        for block in self.decoder:
            x = block(x, r)
        return self.action_head(x).reshape(*lead, n, self.action_size)

    def distribution(self, out: torch.Tensor, action_mask: Optional[torch.Tensor] = None, agents=slice(None)):
        """The action distribution of the agents `agents` (a slice of the agent axis) from the decoder's output."""
        if self.discrete:
            return MaskedCategorical(out, self.action_dim_mask[agents] if action_mask is None else action_mask)
        return MaskedGaussian(out, self.log_std, self.action_dim_mask[agents])

    # ------------------------------------------------------------------ training and acting
    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, action_mask: Optional[torch.Tensor] = None):
        """The training pass: values (..., N) and every agent's distribution, agent i's conditioned on
        actions[..., :i] through the shifted input and the causal masks (one decoder pass)."""
        values, rep = self.encode(obs)
        shifted = self.shift(actions) if self.sequential else None  # MAT-Dec reads no actions
        return values, self.distribution(self.decode(rep, obs, shifted), action_mask)

    def act(self, obs: torch.Tensor, action_mask: Optional[torch.Tensor] = None, greedy: bool = False,
            given: Optional[Tuple[torch.Tensor, Sequence[bool]]] = None):
        """Pick the agents' actions one after another: agent i's distribution reads the actions already
        chosen for agents 0..i-1. given = (actions like the output, rows (N,) of bools): those agents'
        actions are taken as given (groups acting as another run) and the later agents condition on them.
        Returns actions (..., N) or (..., N, act_dim), their log-probabilities (..., N), values (..., N).

        Agent i needs the decoder over the first i + 1 positions only (the masks are causal), so the N
        passes cost N(N+1)/2 positions instead of N^2, with the same outputs as a pass over all N.
        """
        values, rep = self.encode(obs)
        lead, N = obs.shape[:-2], obs.shape[-2]
        rows = [False] * N if given is None else [bool(r) for r in given[1]]
        if not self.sequential:  # MAT-Dec: every agent at once from its own observation
            dist = self.distribution(self.decode(rep, obs, None), action_mask)
            actions = dist.mode() if greedy else dist.sample()
            if given is not None:
                keep = torch.as_tensor(rows, device=obs.device).view(N, *([1] * (actions.dim() - len(lead) - 1)))
                actions = torch.where(keep, given[0].to(actions.dtype), actions)
            return actions, dist.log_prob(actions), values
        shape = (*lead, N) if self.discrete else (*lead, N, self.action_size)
        actions = torch.zeros(shape, dtype=torch.long if self.discrete else obs.dtype, device=obs.device)
        log_probs = torch.zeros(*lead, N, dtype=obs.dtype, device=obs.device)
        for i in range(N):
            first, agent = slice(0, i + 1), slice(i, i + 1)
            at = (..., agent) if self.discrete else (..., agent, slice(None))  # agent i in actions (..., 1[, act_dim])
            out = self.decode(rep[..., first, :], None, self.shift(actions)[..., first, :])[..., agent, :]
            dist = self.distribution(out, None if action_mask is None else action_mask[..., agent, :], agent)
            action = given[0][at].to(actions.dtype) if rows[i] else dist.mode() if greedy else dist.sample()
            actions[at] = action
            log_probs[..., agent] = dist.log_prob(action)
        return actions, log_probs, values

    def forward(self, obs, state=None, starts=None, action_mask=None):
        """The `nets.Actor` interface (evaluation, --evaluate-checkpoint, --load-group of a MAT run)."""
        return SequentialDecoding(self, obs, action_mask), None


class SequentialDecoding:
    """What `MultiAgentTransformer.forward` returns: the joint policy of one step, whose `mode()` picks
    every agent's most likely action given the earlier agents' (greedy decoding, as the authors
    evaluate) and `sample()` draws the agents in order."""

    def __init__(self, mat: MultiAgentTransformer, obs: torch.Tensor, action_mask: Optional[torch.Tensor]):
        self.mat, self.obs, self.action_mask = mat, obs, action_mask

    def mode(self) -> torch.Tensor:
        return self.mat.act(self.obs, self.action_mask, greedy=True)[0]

    def sample(self) -> torch.Tensor:
        return self.mat.act(self.obs, self.action_mask, greedy=False)[0]


__all__ = ["MultiAgentTransformer", "SequentialDecoding", "Attention", "EncoderBlock", "DecoderBlock"]
