"""E copies of a Python-stepped env split into W blocks stepped at once: one batched shape, several cores.

    env = make_env("mamujoco:HalfCheetah-2x3", num_envs=16, seed=1, workers=2)   # or --env-workers 2

The families that step in Python (mpe2, LBF, RWARE, MaMuJoCo, SISL, butterfly, MAgent2, the classic
games) step their copies one after another, so one process uses one core however many the machine
has. Here the copies are split into W contiguous blocks: this process steps the first itself and one
spawned worker process each of the others, every block in the family's own in-process adapter built
with seed + its first index, so that copy i is seeded with seed + i exactly as in one process: the
same copies, seeds and order, hence the same trajectories (tests/test_env_workers.py). Each step the
actions go to the workers through pipes, this process steps its own block meanwhile, and every block
writes what its step returned (observations, rewards, end flags, final observations, masks, whose
move it is) into arrays in shared memory, which are then read back. Auto-reset and final
observations are the adapter's own.

It pays where the env step dominates the loop (mpe2, RWARE, MaMuJoCo with many copies); each step
costs a round trip through the pipes (a fraction of a millisecond), so cheap steps of few copies gain
little. The torch ports, VMAS and the matrix game are batched tensor envs already and refuse workers.
"""
import signal
import traceback
import weakref
from multiprocessing import get_context
from multiprocessing.shared_memory import SharedMemory
from typing import Any, Dict, Optional

import numpy as np

from envs.pettingzoo_vec import VecStep

RESET_FIELDS = ("obs", "state", "action_mask")  # what reset() returns, in this order


def split(num_envs: int, workers: int) -> list:
    """[(start, count)] of each worker's copies: contiguous blocks, the first ones one larger."""
    base, extra = divmod(num_envs, workers)
    out, start = [], 0
    for w in range(workers):
        count = base + (w < extra)
        out.append((start, count))
        start += count
    return out


def _layout(probe: VecStep, num_envs: int) -> Dict[str, tuple]:
    """field -> (shape with E copies, dtype) of every array a step returns (None fields left out)."""
    out = {}
    for name in VecStep.__dataclass_fields__:
        value = getattr(probe, name)
        if value is not None:
            value = np.asarray(value)
            out[name] = ((num_envs, *value.shape[1:]), value.dtype)
    return out


def _views(blocks: Dict[str, SharedMemory], layout: Dict[str, tuple]) -> Dict[str, np.ndarray]:
    return {k: np.ndarray(shape, dtype, buffer=blocks[k].buf) for k, (shape, dtype) in layout.items()}


def _run(env, command: str, data, rows: Dict[str, np.ndarray]) -> None:
    """Reset or step one block of copies, writing what it returns into the block's rows of the shared arrays."""
    if command == "step":
        out = env.step(data)
        for k, view in rows.items():
            view[:] = getattr(out, k)
    else:  # "reset"
        for k, value in zip(RESET_FIELDS, env.reset()):
            if value is not None:
                rows[k][:] = value
        if "acting" in rows:
            rows["acting"][:] = env.acting


def _serve(conn, name: str, count: int, seed: int, env_kwargs: dict, layout: dict, names: dict, start: int) -> None:
    """A worker: build the copies [start, start + count) and reset or step them on request until "close"."""
    # Ctrl-C reaches every process of the terminal's group: the main process saves its checkpoint and
    # closes the workers; a worker that stopped on it would print a traceback and leave its block unstepped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from envs import make_env  # in the worker (spawned: a fresh interpreter)

        env = make_env(name, count, seed + start, env_kwargs)
        blocks = {k: SharedMemory(name=n) for k, n in names.items()}
        rows = {k: v[start:start + count] for k, v in _views(blocks, layout).items()}
        conn.send(None)
    except Exception:  # noqa: BLE001 - the parent raises it with the worker's traceback
        conn.send(traceback.format_exc())
        return
    while True:
        command, data = conn.recv()
        if command == "close":
            env.close()
            conn.send(None)
            return
        try:
            _run(env, command, data, rows)
            conn.send(None)
        except Exception:  # noqa: BLE001
            conn.send(RuntimeError(traceback.format_exc()))


class WorkerVecEnv:
    """The batched env of `name` with its E copies split into `workers` blocks: this process steps the
    first block itself, one worker process each of the others, all at once.

    It has every attribute of the in-process adapter (spaces, sizes, masks, `turn_based`), read from
    a one-copy twin built here, and the same reset/step/action_mask/sample_actions/render/close.
    """

    def __init__(self, name: str, num_envs: int, seed: int, env_kwargs: Optional[Dict[str, Any]], workers: int,
                 spec):
        from envs import make_env

        self._spec, self.num_envs = spec, num_envs
        spec.reset()
        probe = spec.step(spec.sample_actions(np.random.default_rng(0)))
        spec.close()
        layout = _layout(probe, num_envs)
        self._blocks = {k: SharedMemory(create=True, size=max(1, int(np.prod(s)) * np.dtype(d).itemsize))
                        for k, (s, d) in layout.items()}
        self._views = _views(self._blocks, layout)
        self.acting = self._views["acting"].copy() if "acting" in layout else None
        blocks = split(num_envs, workers)
        self._slices = [slice(start, start + count) for start, count in blocks]
        context = get_context("spawn")  # a fresh interpreter: no torch threads or open files forked
        self._conns, self._procs = [], []
        names = {k: b.name for k, b in self._blocks.items()}
        for start, count in blocks[1:]:
            parent, child = context.Pipe()
            proc = context.Process(target=_serve, args=(child, name, count, seed, env_kwargs or {}, layout, names,
                                                        start), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)
        self._closer = weakref.finalize(self, _shut, self._conns, self._procs, self._blocks)
        self._local = make_env(name, blocks[0][1], seed, env_kwargs)  # the first block: stepped here
        self._local_rows = {k: v[self._slices[0]] for k, v in self._views.items()}
        for conn in self._conns:
            try:
                error = conn.recv()
            except EOFError:  # the spawned interpreter died while importing the parent's main script
                error = ("it stopped while starting; a script that builds envs with workers must start its run "
                         "under `if __name__ == \"__main__\":` (the workers import it)")
            if error is not None:
                self.close()
                raise RuntimeError(f"an env worker failed to start: {error}")

    def __getattr__(self, attr):  # spaces, sizes and flags: the one-copy twin's
        if attr.startswith("__") or attr == "_spec":
            raise AttributeError(attr)
        return getattr(self._spec, attr)

    def _ask(self, command: str, data=None) -> None:
        """The command to every block at once: the workers' first, then this process's own block."""
        for conn, rows in zip(self._conns, self._slices[1:]):
            conn.send((command, None if data is None else data[rows]))
        try:
            _run(self._local, command, None if data is None else data[self._slices[0]], self._local_rows)
        finally:  # every worker's reply is read, also when this block failed: none is left for the next step
            replies = []
            for conn, proc in zip(self._conns, self._procs):
                try:
                    replies.append(conn.recv())
                except EOFError:
                    replies.append(f"its process ended (exit code {proc.exitcode})")
        for reply in replies:
            if reply is not None:
                raise RuntimeError(f"an env worker failed: {reply}")

    def reset(self):
        """Reset every copy (copy i with seed + i on the first call). Returns (obs, state, action_mask)."""
        self._ask("reset")
        if self.acting is not None:
            self.acting = self._views["acting"].copy()
        return tuple(self._views[k].copy() if k in self._views else None for k in RESET_FIELDS)

    def action_mask(self) -> Optional[np.ndarray]:
        return self._views["action_mask"].copy() if "action_mask" in self._views else None

    def step(self, actions) -> VecStep:
        """Step every copy: actions (E, N) or (E, N, act_dim), numpy or torch."""
        if hasattr(actions, "cpu"):
            actions = actions.detach().cpu().numpy()
        self._ask("step", np.asarray(actions))
        out = VecStep(**{k: (self._views[k].copy() if k in self._views else None) for k in VecStep.__dataclass_fields__})
        if self.acting is not None:
            self.acting = out.acting.copy()
        return out

    def sample_actions(self, rng: np.random.Generator) -> np.ndarray:
        """Uniform random valid actions, drawn as the in-process adapters draw them (same rng, same actions)."""
        if self.discrete:
            logits = rng.random((self.num_envs, self.n_agents, self.n_actions))
            return np.argmax(np.where(self.action_mask(), logits, -1.0), axis=-1)
        return rng.uniform(-1.0, 1.0, (self.num_envs, self.n_agents, self.action_dim)).astype(np.float32)

    def render(self) -> np.ndarray:
        """A frame of copy 0, which this process steps (the env must be built with render_mode='rgb_array')."""
        return self._local.render()

    def close(self) -> None:
        if self._closer.alive:
            self._local.close()
        self._closer()


def _shut(conns, procs, blocks) -> None:
    """Stop the workers and free the shared memory (at close(), or when the env is collected)."""
    for conn, proc in zip(conns, procs):
        try:
            if proc.is_alive():
                conn.send(("close", None))
                conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            pass
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()
    for block in blocks.values():
        block.close()
        block.unlink()
