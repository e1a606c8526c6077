"""Plumbing shared by every algorithm file: seeding, devices, run folders, atomic checkpoints,
summary.json, console progress, greedy evaluation, and the bookkeeping of a training run
(`start_or_resume`, `RunRecorder`, `checkpoint_for_evaluation`, `report_greedy_evaluation`).
Nothing here is RL maths: what is trained, logged as a loss or saved in a checkpoint is decided
in the algorithm files."""
import dataclasses
import json
import os
import random
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.tensorboard import SummaryWriter

from common.cli import ConfigError, saved_args
from common.results import scalar_history
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
def evaluate(env, actor, n_episodes: int, device: torch.device, greedy: bool = True, frames=None,
             per_agent: bool = False) -> np.ndarray:
    """Run `n_episodes` episodes on `env` (its own copies) and return each one's return summed
    over agents (R_pz3 for mpe2), shape (n_episodes,); with `per_agent`, every agent's own
    return instead, shape (n_episodes, N).

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
                returns.append(episode_return[e].copy() if per_agent else float(episode_return[e].sum()))
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
    if ckpt["args"]["env"] != args.env or ckpt["algo"] != algo:
        raise ConfigError(f"--resume {args.resume} holds a {ckpt['algo']} run on {ckpt['args']['env']}, "
                          f"not {algo} on {args.env}")
    set_rng_state(ckpt["rng"])
    return ckpt, args.resume if os.path.isdir(args.resume) else os.path.dirname(args.resume)


def _next_multiple(step: int, every: int) -> Optional[int]:
    """The first multiple of `every` after `step` (None when `every` is 0: never)."""
    return (step // every + 1) * every if every else None


class RunRecorder:
    """What every training run records besides its losses, kept in one place.

    Made when training starts (it starts the clock): opens the TensorBoard writer in the run
    folder and writes `args.json`. Then, once per iteration, `maybe_evaluate` runs the greedy
    evaluation every `--eval-every` env steps, `log_iteration` writes the TensorBoard scalars
    and the console line, and `checkpoint_due` says when to save. At the end,
    `final_evaluation` and `finish` write `summary.json`. SPS counts env steps taken by this
    process per second of wall-clock time, evaluation time left out.

    `groups` ({group name: agent indices}, which files with groups of agents pass to
    `maybe_evaluate`, `final_evaluation` and `log_iteration`) adds each group's
    return, summed over its agents, to the training and evaluation charts (when there is more
    than one group) and to `summary.json`'s `eval_group_returns`.
    """

    def __init__(self, args, algo: str, run_path: str, global_step: int, device: torch.device):
        self.args, self.algo, self.run_path, self.device = args, algo, run_path, device
        self.checkpoint_path = os.path.join(run_path, "checkpoint.pt")
        self.writer = SummaryWriter(run_path)
        write_json_atomic(os.path.join(run_path, "args.json"), args_dict(args))
        self.progress = Progress(args.total_timesteps)
        # (global_step, mean greedy return) of each evaluation; a resumed run starts from those made
        # before its checkpoint, read back from the folder's event files (float32 there)
        self.eval_history: List[Tuple[int, float]] = [] if global_step == 0 else [
            (step, value) for step, value in scalar_history(run_path, ("eval/episodic_return",))["eval/episodic_return"]
            if step <= global_step]
        self.eval_returns = np.array([np.nan])  # the returns of the latest evaluation, one per episode
        self.eval_group_returns: Dict[str, float] = {}  # the latest evaluation's mean return of each group
        self.next_eval = _next_multiple(global_step, args.eval_every)
        self.next_ckpt = _next_multiple(global_step, args.checkpoint_every)
        self.start_time, self.eval_time, self.start_step = time.time(), 0.0, global_step

    def evaluate(self, eval_envs, policy, global_step: int,
                 groups: Optional[Dict[str, Sequence[int]]] = None) -> np.ndarray:
        """Run `--eval-episodes` greedy episodes now, log `eval/episodic_return` (and each group's
        return when `groups` holds more than one), return the returns."""
        t_eval = time.time()
        agent_returns = evaluate(eval_envs, policy, self.args.eval_episodes, self.device, greedy=greedy_eval(self.args),
                                 per_agent=True)
        self.eval_returns = agent_returns.sum(-1).astype(np.float64)  # (episodes,)
        self.eval_time += time.time() - t_eval
        self.eval_history.append((global_step, float(self.eval_returns.mean())))
        self.writer.add_scalar("eval/episodic_return", self.eval_returns.mean(), global_step)
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
        """The evaluation `summary.json` reports: `evaluate` now, unless one just ran at this step."""
        if not self.eval_history or self.eval_history[-1][0] != global_step:
            self.evaluate(eval_envs, policy, global_step, groups)
        return self.eval_returns

    def sps(self, global_step: int) -> float:
        """Env steps per second since this process started training, evaluation time left out."""
        return (global_step - self.start_step) / max(time.time() - self.start_time - self.eval_time, 1e-9)

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
        `losses/<key>` for every entry of `stats`, and `timers/rollout_s`, `timers/update_s`. The
        console line shows the training and latest evaluation returns, then `console`'s fields.
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
        w.add_scalar("charts/SPS", sps, global_step)
        for key, value in (charts or {}).items():
            w.add_scalar(f"charts/{key}", value, global_step)
        for key, value in stats.items():
            w.add_scalar(f"losses/{key}", value, global_step)
        w.add_scalar("timers/rollout_s", rollout_s, global_step)
        w.add_scalar("timers/update_s", update_s, global_step)
        self.progress.maybe_print(global_step, sps, {
            "train_return": np.mean(train_returns) if train_returns else None,
            "eval_return": self.eval_history[-1][1] if self.eval_history else None, **(console or {})})
        return sps

    def checkpoint_due(self, global_step: int) -> bool:
        """True once every `--checkpoint-every` env steps (never when it is 0); the schedule then moves on."""
        if self.next_ckpt is None or global_step < self.next_ckpt:
            return False
        self.next_ckpt += self.args.checkpoint_every
        return True

    def finish(self, global_step: int, final_losses: Dict[str, float], close: Iterable = ()) -> Dict[str, Any]:
        """Write `summary.json` (after `final_evaluation`), print the last console line, close the
        writer and the envs in `close`; return the summary, which `main` returns too."""
        returns = self.eval_returns
        summary = {"algo": self.algo, "env": self.args.env, "seed": self.args.seed, "global_step": global_step,
                   "wall_time_s": time.time() - self.start_time, "sps": self.sps(global_step),
                   "eval_return_mean": float(returns.mean()), "eval_return_std": float(returns.std()),
                   "eval_episodes": int(len(returns)), "eval_policy": eval_policy(self.args),
                   "eval_history": self.eval_history, "run_dir": self.run_path,
                   "final_losses": final_losses}
        if self.eval_group_returns:  # files with groups of agents (MAPPO, IPPO)
            summary["eval_group_returns"] = self.eval_group_returns
        write_json_atomic(os.path.join(self.run_path, "summary.json"), summary)
        self.progress.maybe_print(global_step, summary["sps"], {"eval_return": summary["eval_return_mean"]},
                                  force=True)
        self.writer.close()
        for env in close:
            env.close()
        return summary


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


def report_greedy_evaluation(args, saved, env, policy, device: torch.device) -> Dict[str, Any]:
    """Play `--eval-episodes` greedy episodes with the loaded `policy` (one episode, saved as a
    GIF, with `--render-gif`), print the returns' mean, std, min and max, close `env`,
    and return {"eval_return_mean", "eval_episodes"}."""
    frames = [] if args.render_gif else None
    greedy = greedy_eval(args)
    returns = evaluate(env, policy, 1 if args.render_gif else args.eval_episodes, device, greedy=greedy, frames=frames)
    if args.render_gif:
        save_gif(frames, args.render_gif)
        print(f"saved {len(frames)} frames to {args.render_gif}")
    print(f"{saved.env}: {'greedy' if greedy else 'sampled'} return over {len(returns)} episodes: mean {returns.mean():.2f}, "
          f"std {returns.std():.2f}, min {returns.min():.2f}, max {returns.max():.2f}")
    env.close()
    return {"eval_return_mean": float(returns.mean()), "eval_episodes": int(len(returns))}
