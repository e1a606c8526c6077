"""Plumbing shared by every algorithm file: seeding, devices, run folders, atomic checkpoints,
summary.json, console progress, and greedy evaluation. Nothing here is RL maths."""
import dataclasses
import json
import os
import random
import tempfile
import time
from typing import Any, Dict, Optional

import numpy as np
import torch


# ----------------------------------------------------------------------------- seeding, devices
def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed python, numpy and torch (env copies are seeded by the env adapter: seed + i)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def pick_device(cuda: bool) -> torch.device:
    """The GPU when asked for and present, else the CPU."""
    return torch.device("cuda" if cuda and torch.cuda.is_available() else "cpu")


def rng_state() -> Dict[str, Any]:
    """Every random generator's state, in types that `torch.load(weights_only=True)` accepts."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    version, keys, *rest = state["numpy"]
    random.setstate(_as_tuples(state["python"]))
    np.random.set_state((version, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(x):
    return tuple(_as_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


# ----------------------------------------------------------------------------- files
def new_run_dir(run_dir: str, algo: str, env: str, seed: int, exp_name: Optional[str] = None) -> str:
    """Create and return a fresh folder run_dir/<exp_name or algo>__<env>__<seed>__<unix time>.

    The folder is created exclusively: two runs started in the same second get `_2`, `_3`...
    instead of writing over each other's files.
    """
    base = os.path.join(run_dir, f"{exp_name or algo}__{env}__{seed}__{int(time.time())}")
    path, k = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            k += 1
            path = f"{base}_{k}"


def write_json_atomic(path: str, data: Dict[str, Any]) -> None:
    """Write JSON so that a reader never sees half a file (write a temp file, then rename)."""
    _atomic_write(path, lambda f: f.write(json.dumps(data, indent=2, default=str).encode()))


def save_checkpoint(path: str, payload: Dict[str, Any]) -> None:
    """torch.save to a temp file in the same folder, then rename over the old checkpoint."""
    _atomic_write(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: str, device: Optional[torch.device] = None) -> Dict[str, Any]:
    """Load a checkpoint without running code from it (weights_only=True).

    `path` may be a checkpoint file or a run folder holding `checkpoint.pt`.
    """
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}; pass a run folder or a checkpoint.pt file")
    return torch.load(path, map_location=device or "cpu", weights_only=True)


def _atomic_write(path: str, write) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def args_dict(args) -> Dict[str, Any]:
    """Args as plain python values (lists for tuples), for JSON and checkpoints."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(args).items()}


# ----------------------------------------------------------------------------- console
class Progress:
    """One readable line every few seconds: steps, SPS, training and evaluation returns."""

    def __init__(self, total_steps: int, every_s: float = 10.0):
        self.total, self.every_s, self.last = total_steps, every_s, 0.0

    def maybe_print(self, step: int, sps: float, fields: Dict[str, float], force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        parts = " | ".join(f"{k} {v:.2f}" for k, v in fields.items() if v is not None and np.isfinite(v))
        print(f"step {step:>10,d} / {self.total:,d} ({100 * step / self.total:5.1f}%) | SPS {sps:6.0f} | {parts}",
              flush=True)


# ----------------------------------------------------------------------------- evaluation
def as_numpy(x) -> np.ndarray:
    """A numpy view of an env output, whether the env returned numpy arrays or torch tensors."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@torch.no_grad()
def evaluate(env, actor, n_episodes: int, device: torch.device, greedy: bool = True, frames=None) -> np.ndarray:
    """Run `n_episodes` episodes on `env` (its own copies) and return each one's return summed
    over agents (R_pz3 for mpe2), shape (n_episodes,).

    `actor(obs (1, E, N, d), state, starts (1, E, N), action_mask) -> (dist, state)`, the
    interface of `nets.Actor`; greedy takes `dist.mode()`. Each copy contributes an equal
    share of episodes, so short episodes are not over-represented. If `frames` is a list,
    copy 0's rendered frames are appended to it.
    """
    E, N = env.num_envs, env.n_agents
    quota = np.full(E, n_episodes // E) + (np.arange(E) < n_episodes % E)
    returns = []
    obs, _, mask = env.reset()
    state = actor.initial_state(E, device)
    starts = torch.ones(1, E, N, device=device)
    while quota.sum() > 0:
        mask_t = None if mask is None else torch.as_tensor(mask, device=device)[None]
        dist, state = actor(torch.as_tensor(obs, device=device)[None], state, starts, mask_t)
        action = dist.mode() if greedy else dist.sample()
        if hasattr(actor, "remember"):  # actors that see their previous action (nets.QPolicy)
            state = actor.remember(state, action[0])
        if frames is not None:
            frames.append(env.render())
        step = env.step(action[0])
        done, episode_return = as_numpy(step.done), as_numpy(step.episode_return)
        for e in np.flatnonzero(done):
            if quota[e] > 0:
                returns.append(float(episode_return[e].sum()))
                quota[e] -= 1
        obs, mask = step.obs, step.action_mask
        starts = torch.as_tensor(np.repeat(done[:, None], N, 1), dtype=torch.float32, device=device)[None]
    return np.asarray(returns)


def save_gif(frames, path: str, fps: int = 10) -> None:
    """Write RGB frames (H, W, 3) as an animated GIF (Pillow ships with matplotlib)."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames if f is not None]
    if not images:
        raise ValueError("no frames to save: the env returned no rgb_array frames")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
