"""Observation encoders, chosen from the observation's shape: flat vectors pass through, images
(H, W, C) go through a small CNN. Every network that reads observations (Actor, Critic, QPolicy,
the DDPG-family actors, through `AgentNet`) builds its encoder with `encoder_for`, so image envs
need no other change.

Input (..., N, *in_shape) -> output (..., N, out_dim). An image input may also arrive flattened,
(..., N, H * W * C) (a centralised critic's state, which the adapters keep flat), and is reshaped.
A network with several inputs (a critic on the state and the joint action) gives one shape per
input, and gets them as a tuple of tensors: each is encoded on its own, then they are concatenated.
"""
import math
from typing import Optional, Sequence, Union

import torch
from torch import nn

from nets.layers import make_linear

# The conv stack's output is average-pooled to at most this many cells a side, so the linear
# layer after it stays small whatever the screen size (a 457 x 120 pistonball strip included).
MAX_CELLS = 8


class FlatEncoder(nn.Module):
    """Vectors pass through unchanged: (..., N, in_dim) -> (..., N, in_dim)."""

    def __init__(self, in_dim: int):
        super().__init__()
        self.out_dim = in_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.out_dim:
            raise ValueError(f"a network built for flat inputs of size {self.out_dim} got inputs shaped "
                             f"{tuple(x.shape)}; image observations need the env's obs_shape (H, W, C) at "
                             "construction (nets.encoder_for): pass env.obs_shape (or env.state_shape), not obs_dim")
        return x if x.dtype.is_floating_point else x.float()


class CNNEncoder(nn.Module):
    """A small CNN for images (H, W, C), channels last as the envs give them: (..., N, H, W, C) ->
    (..., N, feature_dim). uint8 pixels are scaled to [0, 1]; float images are used as they are.

    Large images (both sides at least 36): the Nature-CNN stack with half its filters (Mnih et al.
    2015: 8x8 stride 4, 4x4 stride 2, 3x3 stride 1; 16-32-32 channels). Small ones (a 7 x 7 pursuit
    view, a 13 x 13 MAgent2 view, a downsampled screen): two padded 3x3 convolutions, 16 then 32
    channels, the second with stride 2, the first too where both sides are at least 16 (a CPU
    pays for every multiply-add of a rollout's images, ten times over in PPO's epochs). Then
    average pooling down to at most MAX_CELLS a side, a linear layer and a ReLU.

    n_agents given: separate weights per agent, as grouped convolutions (one group per agent) and
    an `AgentLinear`, so all agents still run in one batched call. With set_of_agent, n_agents is
    the number of parameter sets and agent n uses set set_of_agent[n] (a team's agents share
    filters): each agent's filters are gathered from its set's, still one grouped call.
    """

    def __init__(self, in_shape: Sequence[int], feature_dim: int = 128, n_agents: Optional[int] = None,
                 set_of_agent: Optional[Sequence[int]] = None):
        super().__init__()
        H, W, C = (int(v) for v in in_shape)
        self.in_shape, self.n_agents, self.out_dim = (H, W, C), n_agents, feature_dim
        G = n_agents or 1  # groups: the agents' channels are stacked, G * C in, G * out
        if min(H, W) >= 36:
            spec = [(16, 8, 4, 0), (32, 4, 2, 0), (32, 3, 1, 0)]  # (channels, kernel, stride, padding)
        else:
            first = 2 if min(H, W) >= 16 else 1  # a 7 x 7 or 13 x 13 view keeps its resolution
            spec = [(16, 3, first, 1), (32, 3, 2, 1)]
        layers, ch, h, w = [], C, H, W
        for out_ch, k, s, p in spec:
            layers += [nn.Conv2d(G * ch, G * out_ch, k, s, p, groups=G), nn.ReLU()]
            ch, h, w = out_ch, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        ph, pw = math.ceil(h / MAX_CELLS), math.ceil(w / MAX_CELLS)
        if ph > 1 or pw > 1:
            layers.append(nn.AvgPool2d((ph, pw)))
            h, w = h // ph, w // pw
        for layer in layers:
            if isinstance(layer, nn.Conv2d):
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
                nn.init.zeros_(layer.bias)
        self.convs = nn.Sequential(*layers)
        self.flat_dim = ch * h * w
        self.fc = make_linear(self.flat_dim, feature_dim, n_agents, set_of_agent=set_of_agent)
        self.register_buffer("set_of_agent", None if set_of_agent is None else torch.as_tensor(list(set_of_agent)),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W, C = self.in_shape
        if tuple(x.shape[-3:]) != self.in_shape:  # flattened image: (..., N, H * W * C)
            x = x.reshape(*x.shape[:-1], H, W, C)
        lead, N = x.shape[:-4], x.shape[-4]
        x = x.reshape(-1, N, H, W, C)
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        if self.n_agents is None:  # shared weights: agents are one more batch axis
            h = self.convs(x.reshape(-1, H, W, C).permute(0, 3, 1, 2))  # (B * N, ch, h, w)
            h = h.reshape(-1, N, self.flat_dim)  # (B, N, flat)
        else:  # one group of channels per agent
            h = x.permute(0, 1, 4, 2, 3).reshape(-1, N * C, H, W)  # (B, N * C, H, W)
            h = self.convs(h) if self.set_of_agent is None else self._per_agent(h, N)  # (B, N * ch, h, w)
            h = h.reshape(-1, N, self.flat_dim)  # (B, N, flat): group n is agent n's channels
        return torch.relu(self.fc(h)).reshape(*lead, N, self.out_dim)  # (..., N, feature_dim)

    def _per_agent(self, h: torch.Tensor, N: int) -> torch.Tensor:
        """The convolutions with agent n's filters taken from its set's: (B, N * C, H, W) in."""
        sets = self.set_of_agent
        for layer in self.convs:
            if isinstance(layer, nn.Conv2d):
                G = self.n_agents
                weight = layer.weight.view(G, -1, *layer.weight.shape[1:])[sets].flatten(0, 1)  # (N * out, in, k, k)
                bias = layer.bias.view(G, -1)[sets].flatten()
                h = nn.functional.conv2d(h, weight, bias, layer.stride, layer.padding, groups=N)
            else:
                h = layer(h)
        return h


class MultiEncoder(nn.Module):
    """Several inputs, each encoded by the encoder its own shape needs, then concatenated:
    (x_1 (..., N, *shape_1), x_2 (..., N, *shape_2), ...) -> (..., N, sum of the parts' out_dim).

    What a critic on an image and a vector needs (a state image and the joint action, an image
    observation and the agent's action): the image goes through its CNN before the vector joins
    it, and each part keeps its own dtype (uint8 pixels are scaled, as alone). Flat parts alone
    give exactly their concatenation, so a flat-input network computes what one fed
    torch.cat(parts, -1) computes.
    """

    def __init__(self, shapes: Sequence[Union[int, Sequence[int]]], n_agents: Optional[int] = None,
                 feature_dim: int = 128, set_of_agent: Optional[Sequence[int]] = None):
        super().__init__()
        self.parts = nn.ModuleList(encoder_for(shape, n_agents, feature_dim, set_of_agent) for shape in shapes)
        self.out_dim = sum(part.out_dim for part in self.parts)

    def forward(self, xs: Sequence[torch.Tensor]) -> torch.Tensor:
        if isinstance(xs, torch.Tensor) or len(xs) != len(self.parts):
            raise ValueError(f"a network built for {len(self.parts)} inputs (a tuple of tensors) got "
                             f"{'one tensor' if isinstance(xs, torch.Tensor) else f'{len(xs)} inputs'}")
        return torch.cat([part(x) for part, x in zip(self.parts, xs)], dim=-1)  # (..., N, out_dim)


def encoder_for(in_shape, n_agents: Optional[int] = None, feature_dim: int = 128,
                set_of_agent: Optional[Sequence[int]] = None) -> nn.Module:
    """The encoder an input shape needs: an int or (D,) -> FlatEncoder; (H, W, C) -> CNNEncoder;
    a tuple of shapes, each itself a tuple, ((H, W, C), (D,)) -> MultiEncoder (several inputs, given
    as a tuple of tensors). Its `out_dim` is the width of what it returns. Any other shape fails,
    naming it."""
    if not isinstance(in_shape, int) and len(in_shape) and all(isinstance(v, (tuple, list)) for v in in_shape):
        return MultiEncoder(in_shape, n_agents, feature_dim, set_of_agent)
    shape = (in_shape,) if isinstance(in_shape, int) else tuple(int(v) for v in in_shape)
    if len(shape) == 1:
        return FlatEncoder(shape[0])
    if len(shape) == 3:
        return CNNEncoder(shape, feature_dim, n_agents, set_of_agent)
    raise ValueError(f"no encoder for inputs of shape {shape}: accepted are flat vectors (D,), images "
                     "(H, W, C), and a tuple of such shapes for several inputs")


__all__ = ["CNNEncoder", "FlatEncoder", "MultiEncoder", "encoder_for", "MAX_CELLS"]
