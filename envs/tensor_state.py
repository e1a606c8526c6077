"""Exact resume of the torch envs (the MPE and SMAX ports, connect four): their state is a set of
tensor attributes and a torch generator, saved as plain tensors in the run's checkpoint
(`torch.load(..., weights_only=True)` reads them back) and put back into an env of the same shape."""
from typing import Dict, Sequence

import torch


def save_tensors(env, names: Sequence[str]) -> Dict[str, torch.Tensor]:
    """{name: a copy of env.<name>} for every name, and "gen": the state of env.gen."""
    return {**{name: getattr(env, name).clone() for name in names}, "gen": env.gen.get_state()}


def load_tensors(env, state: Dict[str, torch.Tensor], label: str, mismatch: str) -> None:
    """Put back what `save_tensors` saved, each tensor on the env's device and dtype. Everything is checked
    before anything changes: a tensor whose shape differs from the env's fails as "`label`: saved <name> has
    shape ..., this env ... (`mismatch`)", and so does a generator state saved on another kind of device
    (a CUDA generator's state is not a CPU one's: a run trained on a GPU and resumed on a laptop)."""
    for name, value in state.items():
        current = env.gen.get_state() if name == "gen" else getattr(env, name)
        if name == "gen" and value.numel() != current.numel():
            raise ValueError(f"{label}: its saved random state is not one this env's {env.device.type} generator "
                             f"takes ({value.numel()} bytes, not {current.numel()}: saved on another kind of device)")
        if name != "gen" and value.shape != current.shape:
            raise ValueError(f"{label}: saved {name} has shape {tuple(value.shape)}, this env "
                             f"{tuple(current.shape)} ({mismatch})")
    for name, value in state.items():
        if name == "gen":
            env.gen.set_state(value.cpu())  # a generator's state is a CPU byte tensor, whatever its device
        else:
            setattr(env, name, value.to(device=env.device, dtype=getattr(env, name).dtype).clone())
