"""Modules shared between policies, and the check that a policy's output fits a loss.

Several policies in one run (one group of agents learned by PPO, another by Q-learning; two
groups' actors trained by one algorithm) may hold *the same* module: an observation encoder,
a centralised critic. `shared_between` puts one module object into several policies, each
under its own attribute name (the `shared_between` entry of the multi-agent design seed:
`{'ppo_policy': 'encoder', 'dqn_policy': 'embedder'}`), so both hold the very same
`nn.Parameter` objects:

- trained (`train=True`): every loss whose policy reads it sends gradients into it, and every
  optimiser built with `trainable_parameters` over that policy steps it;
- frozen (`train=False`): `requires_grad` is off and it stays in eval mode, so no loss reaches
  it and `trainable_parameters` leaves it out of every optimiser.

`trainable_parameters(*modules)` lists each parameter once, however many of the modules hold
it: one optimiser over two policies that share a critic steps that critic once per step
(Adam would otherwise refuse a parameter listed twice, or step it twice).

`check_policy_output` runs a policy once on zeros at construction and fails with a
`ValueError` naming the output a loss expects (an action distribution for PPO, Q-values for
Q-learning) when the policy gives something else, e.g. a deterministic action head given to PPO.
"""
from typing import Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn


def shared_between(module: nn.Module, placements: Sequence[Tuple[nn.Module, str]], train: bool = True) -> nn.Module:
    """Put `module` into every (policy, attribute name) of `placements` and return it.

    The same object is registered as a submodule of each policy under that policy's name for
    it (`(ppo_policy, "encoder"), (dqn_policy, "embedder")`); a policy reads it through
    `getattr(self, name)`. `train=False` freezes it: no gradient reaches its parameters and
    `trainable_parameters` leaves them out of optimisers. Its weights are saved in each
    policy's `state_dict`; loading either restores the one shared module.
    """
    if not train:
        module.requires_grad_(False)
        module.eval()  # layers with train-time behaviour (dropout, batch norm) stay fixed too
    for policy, name in placements:
        if hasattr(policy, name) and getattr(policy, name) is not module and getattr(policy, name) is not None:
            raise ValueError(f"{type(policy).__name__} already has an attribute {name!r}; choose another name "
                             "for the shared module")
        setattr(policy, name, module)  # nn.Module.__setattr__ registers it as a submodule
    return module


def trainable_parameters(*modules: nn.Module) -> List[nn.Parameter]:
    """The parameters of `modules` that require gradients, each once (by identity), in order:
    what an optimiser over several policies that share modules should be given."""
    seen, out = set(), []
    for module in modules:
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    """True when `a` and `b` hold the same parameter objects (not equal copies)."""
    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(x is y for x, y in zip(pa, pb))


# What each loss needs from the object a policy's forward returns, and how to say it.
EXPECTED_OUTPUTS = {
    "distribution": (("log_prob", "entropy"), "an action distribution with log_prob(action) and entropy() "
                                              "(e.g. nets.Actor's MaskedCategorical or MaskedGaussian)"),
    "q_values": (("q",), "Q-values for every action, a GreedyQ with .q (..., n_actions) (e.g. nets.QPolicy)"),
}


@torch.no_grad()
def check_policy_output(policy: nn.Module, obs_shape: Sequence[int], n_agents: int, expected: str,
                        algo: str) -> None:
    """Run `policy` once on a zero observation (1, 1, n_agents, *obs_shape) and check that its
    output is what `algo`'s loss takes (`expected`: "distribution" or "q_values"); otherwise
    raise a ValueError naming the output expected and the one given."""
    attrs, description = EXPECTED_OUTPUTS[expected]
    device = next(iter(policy.buffers()), next(iter(policy.parameters()), torch.empty(0))).device
    obs = torch.zeros(1, 1, n_agents, *obs_shape, device=device)
    starts = torch.ones(1, 1, n_agents, device=device)
    out, _ = policy(obs, policy.initial_state(1, device) if hasattr(policy, "initial_state") else None, starts)
    missing = [a for a in attrs if not hasattr(out, a)]
    if missing:
        raise ValueError(f"{algo}'s loss expects {expected}: {description}; {type(policy).__name__} returns "
                          f"{type(out).__name__}, which has no {', '.join(missing)}")


class EncodedPolicy(nn.Module):
    """A policy that reads its observations through an encoder kept under its own attribute name.

    `EncodedPolicy(policy, "embedder")` has no encoder until `shared_between(encoder,
    [(it, "embedder"), ...])` (or `encoder=`) gives it one; then obs (L, B, N, obs_dim) ->
    encoder -> (L, B, N, enc_dim) -> `policy`, which was built for inputs of size enc_dim.
    It keeps the interface of what it wraps: `forward(obs, state, starts, action_mask)` and
    `initial_state` (the `nets.Actor` interface), `q_values` and `remember` (`nets.QPolicy`).
    """

    def __init__(self, policy: nn.Module, encoder_name: str = "encoder", encoder: Optional[nn.Module] = None):
        super().__init__()
        self.policy, self.encoder_name = policy, encoder_name
        if encoder is not None:
            setattr(self, encoder_name, encoder)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        return getattr(self, self.encoder_name)(obs)  # (..., N, enc_dim)

    def initial_state(self, batch: int, device=None):
        return self.policy.initial_state(batch, device)

    def forward(self, obs, state=None, starts=None, action_mask=None):
        return self.policy(self.encode(obs), state, starts, action_mask)

    def q_values(self, obs, *rest):
        return self.policy.q_values(self.encode(obs), *rest)

    def remember(self, state, action):
        return self.policy.remember(state, action) if hasattr(self.policy, "remember") else state


def gradients_reach(module: nn.Module) -> bool:
    """True when every parameter of `module` has a non-zero gradient (tests, diagnostics)."""
    params: Iterable[nn.Parameter] = list(module.parameters())
    return bool(params) and all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)


__all__ = ["shared_between", "trainable_parameters", "same_parameters", "check_policy_output", "EncodedPolicy",
           "gradients_reach", "EXPECTED_OUTPUTS"]
