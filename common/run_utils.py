"""Plumbing shared by every algorithm file: seeding, devices, run folders, atomic checkpoints,
summary.json, console progress, greedy evaluation, the W&B copy of `--track`, and the bookkeeping
of a training run (`start_or_resume`, `RunRecorder`, `checkpoint_for_evaluation`, `report_greedy_evaluation`).
Nothing here is RL maths: what is trained, logged as a loss or saved in a checkpoint is decided
in the algorithm files."""
import csv
import dataclasses
import hashlib
import json
import math
import os
import pickle
import random
import re
import signal
import sys
import tempfile
import threading
import time
import zipfile
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams as tb_hparams

from common.cli import ConfigError, RunDiverged, RunInterrupted, StopNow, saved_args, upgraded
from common.results import EVAL_EPISODES, SCALARS_CSV, scalar_history
from envs import make_env, parse_env_kwargs


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
def safe_name(text: str) -> str:
    """`text` with the characters some file systems refuse (`:` on Windows and macOS Finder,
    `<>"/\\|?*`) written '-': 'torch:simple_spread' -> 'torch-simple_spread'."""
    return re.sub(r'[:<>"/\\|?*]', "-", text)


def new_run_dir(run_dir: str, algo: str, env: str, seed: int, exp_name: Optional[str] = None) -> str:
    """Create and return a fresh folder run_dir/<exp_name or algo>__<env>__<seed>__<unix time>
    (the env name through `safe_name`).

    The folder is created exclusively: two runs started in the same second get `_2`, `_3`...
    instead of writing over each other's files. A --run-dir that is a file or not writable is a
    ConfigError saying so.
    """
    base = os.path.join(run_dir, safe_name(f"{exp_name or algo}__{env}__{seed}__{int(time.time())}"))
    path, k = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            if not os.path.isdir(os.path.dirname(path)):
                raise ConfigError(f"--run-dir {run_dir}: {_blocking_file(path)} is a file, not a folder") from None
            k += 1
            path = f"{base}_{k}"
        except NotADirectoryError:
            raise ConfigError(f"--run-dir {run_dir}: {_blocking_file(path)} is a file, not a folder") from None
        except PermissionError:
            raise ConfigError(f"--run-dir {run_dir} is not writable (permission denied); pick another "
                              "--run-dir") from None


def _blocking_file(path: str) -> str:
    """The first existing non-folder on the way to `path`."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        head = os.sep.join(parts[:i])
        if os.path.exists(head) and not os.path.isdir(head):
            return head
    return path


def json_safe(x):
    """`x` with every NaN or infinite float written None, so that the JSON is valid everywhere
    (Python's json would write bare NaN, which other readers reject)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return json_safe(x.item())
    return x


def write_json_atomic(path: str, data: Dict[str, Any]) -> None:
    """Write JSON so that a reader never sees half a file (write a temp file, then rename); valid
    JSON always: non-finite numbers are written null (`json_safe`)."""
    text = json.dumps(json_safe(data), indent=2, default=str, allow_nan=False)
    atomic_write(path, lambda f: f.write(text.encode()))


def save_checkpoint(path: str, payload: Dict[str, Any]) -> None:
    """torch.save to a temp file in the same folder, then rename over the old checkpoint."""
    atomic_write(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: str, device: Optional[torch.device] = None) -> Dict[str, Any]:
    """Load a checkpoint without running code from it (weights_only=True).

    `path` may be a checkpoint file or a run folder holding `checkpoint.pt`. Anything else is a
    ConfigError that says what the path holds: nothing, a run folder with no checkpoint yet, a
    file this project did not write, or a file holding code (refused).
    """
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "checkpoint.pt")):
            if os.path.isfile(os.path.join(path, "args.json")):
                raise ConfigError(f"{path} holds no checkpoint.pt yet: a run writes one every --checkpoint-every env "
                                  "steps and when Ctrl-C or SIGTERM stops it; start it again without --resume")
            raise ConfigError(f"{path} is not a run folder (it holds no checkpoint.pt); pass a run folder made by "
                              "an algorithm file, or its checkpoint.pt")
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.exists(path):
        raise ConfigError(f"no run folder or checkpoint at {path!r}")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive
        raise ConfigError(f"{path} is not a checkpoint written by this project (not a torch.save archive: another kind "
                          "of file, or one cut short)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only" in str(err).lower():
            raise ConfigError(f"refused: {path} holds code, not only weights (pickled Python objects); checkpoints are "
                              "loaded with weights_only=True so that a downloaded file cannot run code") from None
        raise ConfigError(f"{path} is not a checkpoint written by this project ({_first_line(err)})") from None
    except Exception as err:  # a zip cut short, a text file, an empty file...
        raise ConfigError(f"{path} is not a checkpoint written by this project, or it was cut short "
                          f"({_first_line(err)})") from None
    if not isinstance(ckpt, dict) or not {"algo", "args"} <= set(ckpt):
        raise ConfigError(f"{path} is not a checkpoint written by this project (it has no 'algo' and 'args')")
    # Everything to `device` but the random generators' states, which torch takes only on the CPU.
    return {k: v if k.endswith("rng") else _to_device(v, device) for k, v in ckpt.items()} if device else ckpt


def _to_device(x, device: torch.device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    return x


def _first_line(err: Exception) -> str:
    """The first sentence of an exception's message, for a one-line error."""
    text = (str(err).strip().splitlines() or [""])[0].split(". ")[0]
    return f"{type(err).__name__}: {text}"[:160]


def atomic_write(path: str, write) -> None:
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
CONSOLE_LABEL = ""  # put before every console line of a run; run.py sets it when several runs share a console


def set_console_label(label: str) -> None:
    global CONSOLE_LABEL
    CONSOLE_LABEL = f"[{label}] " if label else ""


def say(text: str) -> None:
    """Print one console line of this run (labelled when run.py runs several at once)."""
    print("\n".join(CONSOLE_LABEL + line for line in text.splitlines()), flush=True)


def duration(seconds: float) -> str:
    """3725 -> '1h02m', 125 -> '2m05s', 9 -> '9s'."""
    seconds = int(max(seconds, 0))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """One readable line every few seconds: steps, SPS, elapsed time and ETA, training and
    evaluation returns (and win rates, for envs with a winner)."""

    def __init__(self, total_steps: int, start_step: int = 0, every_s: float = 10.0):
        self.total, self.start_step, self.every_s, self.last = total_steps, start_step, every_s, 0.0
        self.start = time.time()

    def maybe_print(self, step: int, sps: float, fields: Dict[str, float], force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        elapsed = now - self.start
        done = step - self.start_step
        eta = f" | ETA {duration(elapsed / done * (self.total - step))}" if 0 < done and step < self.total else ""
        parts = " | ".join(f"{k} {v:.2f}" for k, v in fields.items() if v is not None and np.isfinite(v))
        say(f"step {step:>10,d} / {self.total:,d} ({100 * min(step / self.total, 1):5.1f}%) | SPS {sps:6.0f} | "
            f"{duration(elapsed)}{eta} | {parts}")


# ----------------------------------------------------------------------------- evaluation
def as_numpy(x) -> np.ndarray:
    """A numpy view of an env output, whether the env returned numpy arrays or torch tensors."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def episode_quota(copies: int, episodes: int) -> np.ndarray:
    """(copies,) how many of `episodes` each env copy plays: an equal share (one more for the first
    copies when they do not divide), so that copies whose episodes end quickly are not over-counted."""
    return np.full(copies, episodes // copies) + (np.arange(copies) < episodes % copies)


@torch.no_grad()
def evaluate(env, actor, n_episodes: int, device: torch.device, greedy: bool = True, frames=None,
             per_agent: bool = False, wins: Optional[List[bool]] = None) -> np.ndarray:
    """Run `n_episodes` episodes on `env` (its own copies) and return each one's return summed
    over agents (R_pz3 for mpe2), shape (n_episodes,); with `per_agent`, every agent's own
    return instead, shape (n_episodes, N).

    `actor(obs (1, E, N, d), state, starts (1, E, N), action_mask) -> (dist, state)`, the
    interface of `nets.Actor`; greedy takes `dist.mode()`. Each copy contributes an equal
    share of episodes, so short episodes are not over-represented. If `frames` is a list,
    copy 0's rendered frames are appended to it. If `wins` is a list, whether each counted
    episode was won is appended to it, in the order of the returns, for envs that say
    (`VecStep.episode_won`, SMAX); for others it stays empty.
    """
    E, N = env.num_envs, env.n_agents
    quota = episode_quota(E, n_episodes)
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
        won = None if wins is None or step.episode_won is None else as_numpy(step.episode_won)
        for e in np.flatnonzero(done):
            if quota[e] > 0:
                returns.append(episode_return[e].copy() if per_agent else float(episode_return[e].sum()))
                if won is not None:
                    wins.append(bool(won[e]))
                quota[e] -= 1
        obs, mask = step.obs, step.action_mask
        starts = torch.as_tensor(np.repeat(done[:, None], N, 1), dtype=torch.float32, device=device)[None]
    return np.asarray(returns)


def eval_policy(args) -> str:
    """How evaluation acts: "greedy" (the policy's mode; every file's default) or "sampled"
    (`--eval-policy sampled`, in the files that have the flag)."""
    return getattr(args, "eval_policy", "greedy")


def greedy_eval(args) -> bool:
    """Whether evaluation takes the policy's mode rather than sampling from it."""
    return eval_policy(args) == "greedy"


def centralised_input_shape(args, env) -> Tuple[int, ...]:
    """The shape of what a centralised critic reads with `--critic-input`: the global state (an
    image state keeps its (H, W, C), for a CNN) or all agents' observations concatenated (flat
    observations only: images are refused, naming --critic-input state)."""
    if args.critic_input == "state":
        return tuple(env.state_shape) if len(env.state_shape) == 3 else (env.state_dim,)
    if len(env.obs_shape) > 1:
        raise ConfigError(f"--critic-input concat_obs needs flat observations; {args.env} has images {env.obs_shape}: "
                          "use --critic-input state")
    return (env.n_agents * env.obs_dim,)


def save_gif(frames, path: str, fps: int = 10) -> None:
    """Write RGB frames (H, W, 3) as an animated GIF (Pillow ships with matplotlib)."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames if f is not None]
    if not images:
        raise ValueError("no frames to save: the env returned no rgb_array frames")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


# ----------------------------------------------------------------------------- a training run
def start_or_resume(args, algo: str, device: torch.device) -> Tuple[Optional[Dict[str, Any]], str]:
    """The run folder and, with `--resume`, the checkpoint to continue from: (checkpoint or None, path).

    A fresh run gets a new folder (`new_run_dir`). A resumed run writes on into its old folder;
    the checkpoint must hold the same algorithm on the same env, and every global random
    generator (Python, NumPy, torch) is put back where it was when it was saved. Restoring
    networks, optimisers, counters and the algorithm's own generators from the returned
    checkpoint is left to the algorithm file, which alone knows what it saved.
    """
    if not args.resume:
        return None, new_run_dir(args.run_dir, algo, args.env, args.seed, args.exp_name)
    ckpt = load_checkpoint(args.resume, device)
    if ckpt["algo"] != algo:
        raise ConfigError(f"--resume {args.resume} holds a {ckpt['algo']} run on {ckpt['args']['env']}, not a {algo} "
                          f"run: resume it with python algos/{ckpt['algo']}.py --resume {args.resume}")
    if ckpt["args"]["env"] != args.env:
        raise ConfigError(f"--resume {args.resume} holds a run on {ckpt['args']['env']}; it cannot go on with --env "
                          f"{args.env} (drop --env: a resumed run keeps its settings)")
    # They size the iterations, the replay, the saved envs and the networks.
    for name in ("num_envs", "num_steps", "env_kwargs", "share_params", "agent_groups", "share_critic"):
        saved, now = upgraded(name, ckpt["args"].get(name)), args_dict(args).get(name)
        if saved is not None and saved != now:
            raise ConfigError(f"--resume {args.resume}: the run was made with --{name.replace('_', '-')} "
                              f"{' '.join(map(str, saved)) if isinstance(saved, list) else saved}, and a resumed run "
                              "keeps it; drop that flag")
    set_rng_state(ckpt["rng"])
    return ckpt, args.resume if os.path.isdir(args.resume) else os.path.dirname(args.resume)


def resume_envs(ckpt: Optional[Dict[str, Any]], envs, eval_envs) -> Tuple[Any, Any, Any, bool]:
    """What the training envs show when the loop starts: (obs, state, action_mask, restored).

    A fresh run resets `envs`. A resumed run puts `envs` and `eval_envs` back as its checkpoint
    saved them (`env.load_state_dict`: the torch: ports and matrix_game) and takes the
    observations their last step returned (`env.observe()`): the run goes on bitwise as if it had
    never stopped, and with `restored` True the algorithm file puts back what its loop carried
    from one iteration to the next (episode starts, recurrent states). Envs that cannot save their
    state (PettingZoo-backed, VMAS), or whose saved state does not fit (another --num-envs or
    --env-kwargs), are reset instead, which is said once: every copy starts a new episode, the
    env's random state reseeded as at the run's start (copy i with seed + i), so from there on the
    run differs from an uninterrupted one.
    """
    if ckpt is None:
        return (*envs.reset(), False)
    why = None  # why the envs cannot go on where they were
    if "envs" not in ckpt:
        why = "the checkpoint holds no env states (it predates exact resume)"
    elif ckpt["envs"][0] is None:
        why = f"{ckpt['args']['env']} cannot save the episodes in flight"
    else:
        try:
            for env, state in zip((envs, eval_envs), ckpt["envs"]):
                if state is not None:
                    env.load_state_dict(state)
        except ValueError as err:  # saved with other --num-envs, --eval-num-envs or --env-kwargs
            why = str(err)
    if why is not None:
        say(f"resuming: {why}; every env copy starts a new episode, its random state reseeded as at the run's "
            "start, so from here on the run differs from an uninterrupted one")
        return (*envs.reset(), False)
    return (*envs.observe(), True)


def _next_multiple(step: int, every: int) -> Optional[int]:
    """The first multiple of `every` after `step` (None when `every` is 0: never)."""
    return (step // every + 1) * every if every else None


def _saved_history(ckpt: Optional[Dict[str, Any]], key: str, tag: str, run_path: str) -> List[Tuple[int, float]]:
    """The (global_step, value) pairs a checkpoint keeps under `key` (full precision); a checkpoint
    that predates the key gives the run's logged `tag` up to its step instead (float32, from the
    event files); a fresh run (no checkpoint) starts with none."""
    if not ckpt:
        return []
    if key in ckpt:
        return [(int(step), float(value)) for step, value in ckpt[key]]
    return [(step, value) for step, value in scalar_history(run_path, (tag,))[tag] if step <= ckpt["global_step"]]


# Statistics that are NaN by definition in some iterations (explained variance of constant returns), not divergence.
UNDEFINED_OK = ("explained_variance",)


# ----------------------------------------------------------------------------- Weights & Biases (--track)
def wandb_id(run_path: str) -> str:
    """The W&B run id of a run folder, made from the folder's name (W&B ids take no ',' or '='): the same folder
    always logs into the same W&B run, whether it is trained, resumed or evaluated."""
    name = os.path.basename(os.path.normpath(os.path.abspath(run_path)))
    return hashlib.sha1(name.encode()).hexdigest()[:16]


def start_wandb(args, run_path: str, group: Optional[str] = None, config: Optional[Dict[str, Any]] = None):
    """The W&B run of the run folder `run_path` (`--track`), new or continued (resume="allow", id `wandb_id`), in
    `args.wandb_project_name` and `args.wandb_entity`, its files in <run_path>/wandb/. Every metric is plotted
    against `global_step`, which each logged dict holds, rather than W&B's own step: that one only grows, and a
    resumed run logs again from its checkpoint's step. W&B failing to start (online, not logged in) is a
    ConfigError."""
    import wandb

    try:
        run = wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, id=wandb_id(run_path),
                         name=os.path.basename(os.path.normpath(os.path.abspath(run_path))), resume="allow",
                         dir=run_path, group=group, config=config, reinit="create_new")
    except wandb.errors.Error as err:
        raise ConfigError(f"--track: Weights & Biases did not start ({_first_line(err)}); run `wandb login`, or "
                          "set WANDB_MODE=offline to keep the W&B run in the run folder and `wandb sync` it "
                          "later") from None
    run.define_metric("global_step")
    run.define_metric("*", step_metric="global_step")
    return run


def track_evaluation(args, run_path: str, result: Dict[str, Any], video: Optional[str] = None) -> None:
    """`--track` with `--evaluate-checkpoint` (and `run.py evaluate --track`): log the evaluation's mean return as
    `evaluate/episodic_return` (and its win rate as `evaluate/win_rate`, when `result` has one) at the checkpoint's
    env step (`result` holds both), and the GIF or MP4 `video` as `evaluate/video`, into the W&B run of the run
    folder `run_path`: in the project and entity it was trained under when it was tracked (its args.json says), else
    in those of `args`, with args.json as the config."""
    import wandb

    try:
        with open(os.path.join(run_path, "args.json")) as f:
            saved = json.load(f)
    except (OSError, ValueError):  # a checkpoint.pt away from its run folder
        saved = {}
    where = (dataclasses.replace(args, wandb_project_name=saved["wandb_project_name"],
                                 wandb_entity=saved.get("wandb_entity")) if saved.get("track") else args)
    run = start_wandb(where, run_path, config=saved or None)
    run.log({"evaluate/episodic_return": result["eval_return_mean"], "global_step": result["global_step"],
             **({"evaluate/win_rate": result["eval_win_rate"]} if "eval_win_rate" in result else {}),
             **({"evaluate/video": wandb.Video(video)} if video else {})})  # a file: no encoding, no moviepy
    run.finish()
    say(f"logged to W&B run {wandb_id(run_path)} in {os.path.join(run_path, 'wandb')}")


class ScalarWriter:
    """TensorBoard's writer that also appends every scalar to `scalars.csv` beside the event files
    (step, tag, value, wall_time: the curves readable without TensorBoard, by `run.py plot` too),
    and puts the run's args in TensorBoard's HParams view, with the evaluation return as its metric.
    A resumed run appends to the same file. With `wandb_run` (`--track`), every scalar also goes to
    W&B, those of one env step in one `log` call (sent when the step changes, at `end_step` and at `close`)."""

    def __init__(self, run_path: str, hparams: Dict[str, Any], wandb_run=None):
        self.tb = SummaryWriter(run_path)
        self.wandb, self.pending, self.pending_step = wandb_run, {}, None  # W&B: the scalars of one env step
        path = os.path.join(run_path, SCALARS_CSV)
        new = not os.path.exists(path)
        self.file = open(path, "a", newline="")
        self.csv = csv.writer(self.file)
        if new:
            self.csv.writerow(["step", "tag", "value", "wall_time"])
        shown = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
        for summary in tb_hparams(shown, {"eval/episodic_return": 0.0}):  # experiment, session start, session end
            self.tb.file_writer.add_summary(summary)

    def add_scalar(self, tag: str, value, step: int) -> None:
        value = float(value)
        self.tb.add_scalar(tag, value, step)
        self.csv.writerow([int(step), tag, repr(value), f"{time.time():.3f}"])
        if self.wandb is not None:
            if step != self.pending_step:
                self._send()
            self.pending[tag], self.pending_step = value, int(step)

    def _send(self) -> None:
        if self.wandb is not None and self.pending:
            self.wandb.log({**self.pending, "global_step": self.pending_step})
            self.pending = {}

    def end_step(self) -> None:
        """An iteration's scalars are all written: scalars.csv to disk, W&B sent (whatever stops the run later)."""
        self.file.flush()
        self._send()

    def flush(self) -> None:
        self.tb.flush()
        self.end_step()

    def close(self, exit_code: int = 0) -> None:
        """Close the files; finish the W&B run with the process's `exit_code` (0 finished, 1 diverged, 130 / 143
        interrupted)."""
        self.tb.close()
        self.file.close()
        self._send()
        if self.wandb is not None:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None


class RunRecorder:
    """What every training run records besides its losses, kept in one place.

    Made when training starts (it starts the clock): prints the start banner (or "resuming ...
    from env step N"), opens the TensorBoard writer in the run folder and writes `args.json`.
    Then, once per iteration, `maybe_evaluate` runs the greedy evaluation every `--eval-every`
    env steps, `log_iteration` writes the TensorBoard scalars and the console line, and
    `checkpoint_due` says when to `save_checkpoint`. At the end, `final_evaluation` and `finish`
    write `summary.json` with "status": "finished". SPS counts env steps taken by this process
    per second of wall-clock time, evaluation time left out.

    Failing well lives here too, so that no algorithm file repeats it:
    - Ctrl-C (SIGINT) or SIGTERM: the iteration under way finishes, `checkpoint_due` turns
      true, `save_checkpoint` writes the checkpoint and summary.json ("status": "interrupted"),
      prints the --resume command and raises RunInterrupted (exit 130 / 143). A second signal
      stops at once (StopNow, a KeyboardInterrupt), the last checkpoint kept.
    - Divergence: `log_iteration` checks every loss statistic and the parameters of the modules
      in `watch`; a NaN or infinity writes summary.json ("status": "diverged") and raises
      RunDiverged naming the loss and the env step, before the checkpoint could be overwritten
      (`save_checkpoint` refuses non-finite weights too).
    - Exact resume: `save_checkpoint` adds the evaluation history (full precision) and the state
      of every env in `envs` that can save one (`env.state_dict()`: the torch: ports).

    Envs with a winner (SMAX) also get win rates, with no change to the algorithm files: the
    evaluation env's steps say which episodes were won (`VecStep.episode_won`), giving
    `eval/win_rate`, and the training env (`envs[0]`) counts its won and finished episodes
    (`take_episode_wins()`), which `log_iteration` drains into `charts/win_rate`. `summary.json`
    then holds `eval_win_rate` and `eval_win_history`; for other envs none of these is written.

    `groups` ({group name: agent indices}, which files with groups of agents pass to
    `maybe_evaluate`, `final_evaluation` and `log_iteration`) adds each group's
    return, summed over its agents, to the training and evaluation charts (when there is more
    than one group) and to `summary.json`'s `eval_group_returns`.
    """

    def __init__(self, args, algo: str, run_path: str, ckpt: Optional[Dict[str, Any]], device: torch.device,
                 envs: Sequence[Any] = (), watch: Sequence[torch.nn.Module] = ()):
        self.args, self.algo, self.run_path, self.device = args, algo, run_path, device
        self.envs, self.watch = tuple(envs), tuple(m for m in watch if m is not None)
        global_step = ckpt["global_step"] if ckpt else 0
        self.checkpoint_path = os.path.join(run_path, "checkpoint.pt")
        self.checkpoint_step = global_step if ckpt else None  # env step of the last checkpoint written
        tracked = (start_wandb(args, run_path, group=f"{args.exp_name or algo}__{args.env}", config=args_dict(args))
                   if getattr(args, "track", False) else None)  # one W&B group per label and env: its seeds
        self.writer = ScalarWriter(run_path, args_dict(args), tracked)  # TensorBoard, scalars.csv, HParams, W&B
        write_json_atomic(os.path.join(run_path, "args.json"), args_dict(args))
        self.progress = Progress(args.total_timesteps, global_step)
        # (global_step, mean greedy return) of each evaluation, and (global_step, win rate) of each on an env with a
        # winner; a resumed run starts from those made before its checkpoint
        self.eval_history = _saved_history(ckpt, "eval_history", "eval/episodic_return", run_path)
        self.eval_win_history = _saved_history(ckpt, "eval_win_history", "eval/win_rate", run_path)
        self.eval_returns = np.array([np.nan])  # the returns of the latest evaluation, one per episode
        self.eval_win_rate = float("nan")  # the latest evaluation's fraction of episodes won (envs with a winner)
        self.train_win_rate: Optional[float] = None  # the last `charts/win_rate` logged, for the console
        self.eval_group_returns: Dict[str, float] = {}  # the latest evaluation's mean return of each group
        self.next_eval = _next_multiple(global_step, args.eval_every)
        self.next_ckpt = _next_multiple(global_step, args.checkpoint_every)
        self.start_time, self.eval_time, self.start_step = time.time(), 0.0, global_step
        # the time spent before the checkpoint a resumed run starts from (None: a checkpoint too old to hold it)
        self.prior_wall_s = ckpt.get("wall_time_s") if ckpt else 0.0
        self.prior_train_s = ckpt.get("train_time_s") if ckpt else 0.0
        self.last_stats: Dict[str, float] = {}
        self.training_over = False  # set by final_evaluation: a signal then no longer stops the run
        self.stop_signal: Optional[int] = None
        self._old_handlers = self._catch_signals()
        say(self.banner() if not ckpt else f"resuming {run_path} from env step {global_step:,}" + (
            f"; it has reached --total-timesteps {args.total_timesteps:,} already (a larger one trains it on)"
            if global_step >= args.total_timesteps else ""))

    def banner(self) -> str:
        """Algorithm, env, seed, device, how many env steps the run takes, and where it writes."""
        a = self.args
        planned = ""
        per_iteration = getattr(a, "num_steps", 0) * getattr(a, "num_envs", 0)
        if hasattr(a, "num_iterations") and per_iteration and a.num_iterations * per_iteration != a.total_timesteps:
            planned = (f" (runs {a.num_iterations * per_iteration:,}: {a.num_iterations:,} whole iterations of "
                       f"{per_iteration:,} = num_steps x num_envs)")
        when = (f"every {a.checkpoint_every:,} env steps" if 0 < a.checkpoint_every < a.total_timesteps
                else "at the end")
        return (f"{self.algo} on {a.env} | seed {a.seed} | {self.device} | {a.total_timesteps:,} env steps{planned}\n"
                f"writing to {self.run_path} (checkpoint {when}, and on Ctrl-C or SIGTERM)")

    # ------------------------------------------------------------------ signals
    def _catch_signals(self) -> Dict[int, Any]:
        """SIGINT and SIGTERM ask the run to stop after this iteration (only the main thread can
        take signals: elsewhere, e.g. in a Ray worker thread, they keep their handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _on_signal(self, signum, frame) -> None:
        if self.stop_signal is not None:  # a second signal: stop now
            self._restore_signals()
            raise StopNow(signum)
        self.stop_signal = signum  # no printing here: a handler may interrupt a print in progress

    def _restore_signals(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers = {}

    def _close(self, exit_code: int = 0) -> None:
        self.writer.close(exit_code)
        self._restore_signals()

    @property
    def has_wins(self) -> bool:
        """Whether the run's env has a winner: its training env counts wins, or an evaluation (this
        process's or one before a resume) saw them."""
        counts_wins = bool(self.envs) and hasattr(self.envs[0], "take_episode_wins")
        return counts_wins or bool(self.eval_win_history)

    def evaluate(self, eval_envs, policy, global_step: int,
                 groups: Optional[Dict[str, Sequence[int]]] = None) -> np.ndarray:
        """Run `--eval-episodes` greedy episodes now, log `eval/episodic_return` (and each group's
        return when `groups` holds more than one; and `eval/win_rate` when the env says which
        episodes were won), return the returns."""
        t_eval = time.time()
        wins: List[bool] = []  # one per episode, for envs with a winner
        agent_returns = evaluate(eval_envs, policy, self.args.eval_episodes, self.device, greedy=greedy_eval(self.args),
                                 per_agent=True, wins=wins)
        self.eval_returns = agent_returns.sum(-1).astype(np.float64)  # (episodes,)
        self.eval_time += time.time() - t_eval
        with open(os.path.join(self.run_path, EVAL_EPISODES), "a") as f:  # every episode's return (marl-eval's unit)
            f.write(json.dumps({"step": int(global_step), "returns": self.eval_returns.tolist()}) + "\n")
        self.eval_history.append((global_step, float(self.eval_returns.mean())))
        self.writer.add_scalar("eval/episodic_return", self.eval_returns.mean(), global_step)
        if wins:
            self.eval_win_rate = float(np.mean(wins))
            self.eval_win_history.append((global_step, self.eval_win_rate))
            self.writer.add_scalar("eval/win_rate", self.eval_win_rate, global_step)
        self.eval_group_returns = {name: float(agent_returns[:, list(members)].sum(-1).mean())
                                   for name, members in (groups or {}).items()}
        if groups and len(groups) > 1:
            for name in groups:
                self.writer.add_scalar(f"eval/team_{name}/episodic_return", self.eval_group_returns[name], global_step)
        return self.eval_returns

    def maybe_evaluate(self, eval_envs, policy, global_step: int,
                       groups: Optional[Dict[str, Sequence[int]]] = None) -> Optional[np.ndarray]:
        """`evaluate` once every `--eval-every` env steps (never when it is 0); None when not due."""
        if not self.args.eval_every or global_step < self.next_eval:
            return None
        self.next_eval += self.args.eval_every
        return self.evaluate(eval_envs, policy, global_step, groups)

    def final_evaluation(self, eval_envs, policy, global_step: int,
                         groups: Optional[Dict[str, Sequence[int]]] = None) -> np.ndarray:
        """The evaluation `summary.json` reports: `evaluate` now, unless one just ran at this step.
        Training is over: a first Ctrl-C from here on lets the run finish (a second stops it at once)."""
        self.training_over = True
        if not self.eval_history or self.eval_history[-1][0] != global_step:
            self.evaluate(eval_envs, policy, global_step, groups)
        return self.eval_returns

    def wall_time_s(self) -> float:
        """Seconds the run has taken, the processes before a resume included (a resumed run from a checkpoint
        that does not say: this process's only)."""
        return (self.prior_wall_s or 0.0) + time.time() - self.start_time

    def train_time_s(self) -> float:
        """wall_time_s without the time spent evaluating."""
        return (self.prior_train_s or 0.0) + time.time() - self.start_time - self.eval_time

    def sps(self, global_step: int) -> float:
        """Env steps per second over the whole run, evaluation time left out (a resumed run from a checkpoint
        that does not hold its earlier time: since this process started)."""
        steps = global_step - (self.start_step if self.prior_train_s is None else 0)
        return steps / max(self.train_time_s(), 1e-9)

    def log_iteration(self, global_step: int, stats: Dict[str, float], rollout_s: float, update_s: float,
                      train_returns: Sequence[float], train_lengths: Sequence[int],
                      agent_returns: Optional[Sequence[Sequence[float]]] = None,
                      charts: Optional[Dict[str, float]] = None, console: Optional[Dict[str, float]] = None,
                      groups: Optional[Dict[str, Sequence[int]]] = None) -> float:
        """Write one iteration's TensorBoard scalars and (every few seconds) the console line; return SPS.

        `train_returns`, `train_lengths` and `agent_returns` (per agent, `(episodes, N)`) are those
        of the training episodes that ended in this iteration: their means go to
        `charts/episodic_return`, `charts/episodic_length` and `charts/agent_<i>/episodic_return`,
        unless no episode ended; with `groups` ({name: agent indices}, more than one) and
        `agent_returns`, also `charts/team_<name>/episodic_return`, the group's agents' returns
        summed (the total is `charts/episodic_return`). Then `charts/SPS`, `charts/<key>` for every entry of `charts`,
        `losses/<key>` for every entry of `stats`, and `timers/rollout_s`, `timers/update_s`. A
        training env with a winner (`take_episode_wins()`, SMAX) is asked how many episodes it
        finished and won since the last call: `charts/win_rate`, when it finished any. The console
        line shows the training and latest evaluation returns (and win rates), then `console`'s fields.
        """
        w, sps = self.writer, self.sps(global_step)
        if train_returns:
            w.add_scalar("charts/episodic_return", np.mean(train_returns), global_step)
            w.add_scalar("charts/episodic_length", np.mean(train_lengths), global_step)
            if agent_returns:
                for i, agent_return in enumerate(np.mean(agent_returns, axis=0)):
                    w.add_scalar(f"charts/agent_{i}/episodic_return", agent_return, global_step)
                if groups and len(groups) > 1:
                    for name, members in groups.items():
                        team_return = np.asarray(agent_returns)[:, list(members)].sum(-1).mean()
                        w.add_scalar(f"charts/team_{name}/episodic_return", team_return, global_step)
        take_wins = getattr(self.envs[0], "take_episode_wins", None) if self.envs else None
        if take_wins is not None:
            won, finished = take_wins()  # since the last call: the episodes of this iteration
            if finished:
                self.train_win_rate = won / finished
                w.add_scalar("charts/win_rate", self.train_win_rate, global_step)
        w.add_scalar("charts/SPS", sps, global_step)
        for key, value in (charts or {}).items():
            w.add_scalar(f"charts/{key}", value, global_step)
        for key, value in stats.items():
            w.add_scalar(f"losses/{key}", value, global_step)
        w.add_scalar("timers/rollout_s", rollout_s, global_step)
        w.add_scalar("timers/update_s", update_s, global_step)
        w.end_step()  # scalars.csv (and W&B) hold every finished iteration, whatever stops the run later
        self.last_stats = dict(stats)
        self.check_finite(global_step, stats)
        self.progress.maybe_print(global_step, sps, {
            "train_return": np.mean(train_returns) if train_returns else None,
            "eval_return": self.eval_history[-1][1] if self.eval_history else None,
            "train_win_rate": self.train_win_rate,
            "eval_win_rate": self.eval_win_history[-1][1] if self.eval_win_history else None, **(console or {})})
        return sps

    def check_finite(self, global_step: int, stats: Dict[str, float]) -> None:
        """Raise RunDiverged (after writing summary.json) if a loss statistic or a parameter of the
        watched modules is NaN or infinite."""
        bad = next((k for k, v in stats.items() if not math.isfinite(float(v)) and k not in UNDEFINED_OK), None)
        if bad is not None:
            raise self._diverged(global_step, f"losses/{bad} is {float(stats[bad])}")
        params = [(module, name, p) for module in self.watch for name, p in module.named_parameters()]
        # one device sync per iteration, not one per tensor; the culprit is looked for only when there is one
        if params and not torch.stack([torch.isfinite(p).all() for _, _, p in params]).all():
            module, name, _ = next(entry for entry in params if not torch.isfinite(entry[2]).all())
            raise self._diverged(global_step, f"the parameter {type(module).__name__}.{name} holds NaN or "
                                              "infinite values")

    def _diverged(self, global_step: int, what: str) -> RunDiverged:
        self._write_summary(global_step, self.last_stats, "diverged", {"diverged": what})
        self._close(exit_code=RunDiverged.exit_code)
        kept = (f"the last finite checkpoint ({self.checkpoint_path}, env step {self.checkpoint_step:,}) is kept"
                if self.checkpoint_step is not None else "no checkpoint had been written")
        return RunDiverged(f"error: the run diverged at env step {global_step:,}: {what}. Training stopped; {kept}; "
                           f"summary.json says \"status\": \"diverged\". Try a lower --learning-rate or "
                           "--max-grad-norm, and look for NaN in the env's observations and rewards.", self.run_path)

    def checkpoint_due(self, global_step: int) -> bool:
        """True once every `--checkpoint-every` env steps (never when it is 0), and at once after
        Ctrl-C or SIGTERM asked the run to stop; the schedule then moves on."""
        if self.stop_signal is not None and not self.training_over:
            return True
        if self.next_ckpt is None or global_step < self.next_ckpt:
            return False
        self.next_ckpt = _next_multiple(global_step, self.args.checkpoint_every)
        return True

    def save_checkpoint(self, payload: Dict[str, Any]) -> None:
        """Write the algorithm's `payload` (which holds "global_step") atomically, with the
        evaluation history and the envs' states added. Refuses non-finite weights (RunDiverged:
        the previous checkpoint stays). After Ctrl-C or SIGTERM: writes summary.json ("status":
        "interrupted"), prints the command that resumes the run and raises RunInterrupted."""
        global_step = payload["global_step"]
        bad = _nonfinite_entry(payload)
        if bad is not None:
            raise self._diverged(global_step, f"the checkpoint's {bad} holds NaN or infinite values")
        payload = {**payload, "eval_history": [[step, value] for step, value in self.eval_history],
                   "eval_win_history": [[step, value] for step, value in self.eval_win_history],
                   "wall_time_s": self.wall_time_s(), "train_time_s": self.train_time_s(),
                   "envs": [env.state_dict() if hasattr(env, "state_dict") else None for env in self.envs]}
        save_checkpoint(self.checkpoint_path, payload)
        self.checkpoint_step = global_step
        if self.stop_signal is None or self.training_over:
            return
        name = signal.Signals(self.stop_signal).name
        self._write_summary(global_step, self.last_stats, "interrupted", {"stopped_by": name})
        self._close(exit_code=128 + self.stop_signal)
        script = sys.argv[0] if sys.argv[0].endswith(".py") and "algos" in sys.argv[0] else f"algos/{self.algo}.py"
        raise RunInterrupted(f"\nstopped by {name} at env step {global_step:,}: checkpoint saved in "
                             f"{self.checkpoint_path}"
                             f", summary.json says \"status\": \"interrupted\"\nresume with: python {script} --resume "
                             f"{self.run_path}" + (" --track" if getattr(self.args, "track", False) else ""),
                             self.run_path, self.stop_signal)

    def _write_summary(self, global_step: int, final_losses: Dict[str, float], status: str,
                       extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        returns = self.eval_returns
        summary = {"algo": self.algo, "env": self.args.env, "seed": self.args.seed, "status": status,
                   "global_step": global_step, "wall_time_s": self.wall_time_s(),
                   "sps": self.sps(global_step),
                   "eval_return_mean": float(returns.mean()), "eval_return_std": float(returns.std()),
                   "eval_episodes": int(len(returns)), "eval_policy": eval_policy(self.args),
                   "eval_history": self.eval_history, "run_dir": self.run_path,
                   "final_losses": final_losses, **(extra or {})}
        if self.eval_group_returns:  # files with groups of agents (MAPPO, IPPO)
            summary["eval_group_returns"] = self.eval_group_returns
        if self.has_wins:  # envs with a winner (SMAX)
            summary["eval_win_rate"] = self.eval_win_rate
            summary["eval_win_history"] = self.eval_win_history
        write_json_atomic(os.path.join(self.run_path, "summary.json"), summary)
        return json_safe(summary)

    def finish(self, global_step: int, final_losses: Dict[str, float], close: Iterable = ()) -> Dict[str, Any]:
        """Write `summary.json` (after `final_evaluation`; "status": "finished"), print the last
        console lines, close the writer and the envs in `close`; return the summary, which `main`
        returns too."""
        summary = self._write_summary(global_step, final_losses, "finished")
        self.progress.maybe_print(global_step, summary["sps"], {"eval_return": summary["eval_return_mean"],
                                                                "eval_win_rate": summary.get("eval_win_rate")},
                                  force=True)
        say(f"finished in {duration(summary['wall_time_s'])}: {os.path.join(self.run_path, 'summary.json')}\n"
            f"curves: tensorboard --logdir {self.run_path}")
        self._close()
        for env in close:
            env.close()
        return summary


def _nonfinite_entry(payload: Dict[str, Any], skip=("replay", "envs", "rng", "args", "eval_history",
                                                   "eval_win_history")) -> Optional[str]:
    """The name of the first weight or optimiser entry of a checkpoint payload that is not finite, or None."""
    def walk(x, where):
        if isinstance(x, torch.Tensor):
            return where if x.is_floating_point() and not torch.isfinite(x).all() else None
        if isinstance(x, dict):
            return next((found for k, v in x.items() if (found := walk(v, f"{where}.{k}")) is not None), None)
        if isinstance(x, (list, tuple)):
            return next((found for i, v in enumerate(x) if (found := walk(v, f"{where}[{i}]")) is not None), None)
        return None
    return next((found for k, v in payload.items() if k not in skip and (found := walk(v, k)) is not None), None)


# ----------------------------------------------------------------------------- --evaluate-checkpoint
def checkpoint_for_evaluation(args, algo: str, args_cls) -> Tuple[Dict[str, Any], Any, Any, torch.device]:
    """For `--evaluate-checkpoint`: (checkpoint, the run's saved Args, an evaluation env, device).

    A checkpoint written by another algorithm is refused with the file to use. The env is the
    run's env (its saved `--env` and `--env-kwargs`), seeded `seed + 10_000 + i`: `--eval-num-envs`
    copies, or one copy that renders when `--render-gif` asks for a GIF.
    """
    device = pick_device(args.cuda)
    ckpt = load_checkpoint(args.evaluate_checkpoint, device)
    if ckpt["algo"] != algo:
        raise ConfigError(f"{args.evaluate_checkpoint} holds a {ckpt['algo']} run; "
                          f"evaluate it with algos/{ckpt['algo']}.py")
    saved = args_cls(**saved_args(args_cls, ckpt["args"]))
    env = make_env(saved.env, 1 if args.render_gif else args.eval_num_envs, args.seed + 10_000,
                   parse_env_kwargs(saved.env_kwargs), render_mode="rgb_array" if args.render_gif else None,
                   device=device)
    return ckpt, saved, env, device


def report_greedy_evaluation(args, saved, env, policy, device: torch.device,
                             groups: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Play `--eval-episodes` greedy episodes with the loaded `policy` (one episode, saved as a
    GIF, with `--render-gif`), print the returns' mean, std, min and max (and the win rate, on an
    env with a winner; and each group's mean return where `groups`, every agent's group name, has
    several: a zero-sum game's total says nothing), close `env`, and return {"eval_return_mean",
    "eval_episodes"} (and "eval_win_rate", "eval_group_returns")."""
    frames = [] if args.render_gif else None
    greedy = greedy_eval(args)
    wins: List[bool] = []  # one per episode, for envs with a winner
    per_agent = evaluate(env, policy, 1 if args.render_gif else args.eval_episodes, device, greedy=greedy,
                         frames=frames, per_agent=True, wins=wins)
    returns = per_agent.sum(-1)
    by_group = {g: float(per_agent[:, [n for n, h in enumerate(groups) if h == g]].sum(-1).mean())
                for g in dict.fromkeys(groups)} if groups and len(set(groups)) > 1 else {}
    if args.render_gif:
        save_gif(frames, args.render_gif)
        print(f"saved {len(frames)} frames to {args.render_gif}")
    won = f"; won {sum(wins)} (win rate {np.mean(wins):.2f})" if wins else ""
    print(f"{saved.env}: {'greedy' if greedy else 'sampled'} return over {len(returns)} episodes: "
          f"mean {returns.mean():.2f}, std {returns.std():.2f}, min {returns.min():.2f}, max {returns.max():.2f}{won}"
          + ("; by group: " + ", ".join(f"{g} {v:.2f}" for g, v in by_group.items()) if by_group else ""))
    env.close()
    result = {"eval_return_mean": float(returns.mean()), "eval_episodes": int(len(returns))}
    if wins:
        result["eval_win_rate"] = float(np.mean(wins))
    if by_group:
        result["eval_group_returns"] = by_group
    return result


def evaluate_checkpoint(args, algo: str, args_cls, acting_policy) -> Dict[str, Any]:
    """`--evaluate-checkpoint`: the run's acting network, from the file's own
    `acting_policy(saved_args, env, ckpt, device)` (the function `--load-group` also builds another
    algorithm's run with), plays `--eval-episodes` episodes; prints the returns and returns their mean (and the win
    rate, on an env with a winner) with the checkpoint's env step. With `--track`, they (and the `--render-gif`) go
    to the run's W&B run (`track_evaluation`)."""
    ckpt, saved, env, device = checkpoint_for_evaluation(args, algo, args_cls)
    policy = acting_policy(saved, env, ckpt, device)
    if getattr(saved, "load_group", ()):  # groups that acted as another algorithm's run act as it again
        from common.groups import policy_map  # (common.groups builds on this module)
        # (turn_based: evaluation learns nothing, so a turn-based game needs no file that learns from moves)
        policy = policy_map(saved, env, algo, device, turn_based=True).policy(policy)
    result = {**report_greedy_evaluation(args, saved, env, policy, device, ckpt.get("agent_groups")),
              "global_step": int(ckpt["global_step"])}
    if getattr(args, "track", False):
        path = args.evaluate_checkpoint
        track_evaluation(args, path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)), result,
                         args.render_gif)
    return result
