"""Where the value-based family's gradient step goes (IQL, VDN, QMIX, QPLEX), timed inside the files.

Each algorithm's own `main()` runs unchanged on `torch:simple_spread` with its file's defaults (replay
of whole episodes, batch 32, the GRU agent), evaluation off, while the calls its update (sections 6
and 7) is made of are wrapped with timers; nothing of the update is copied here, so the same script
times any version of the files. Per gradient step (medians over the measured steps, milliseconds):

  step      the whole gradient step, from its replay draw to the next one
  sample    MultiAgentRolloutBuffer.sample_episodes, the replay draw
  agents    QPolicy.q_values with gradients: the online utilities over the drawn episodes
  target    QPolicy.q_values without gradients: the target utilities
  mixer     the mixers' forward passes, online and target (PerGroup; IQL has none)
  td        td_lambda_targets
  backward  loss.backward()
  optim     clip_grad_norm_, Adam's step and the target networks' Polyak update
  other     step minus the parts: batch assembly, masks, the loss, statistics
and `loop SPS`, env steps per second over the measured iterations (rollout and updates).

    python benchmarks/speed_value_based.py                      # all four, about 15 s on 2 cores
    python benchmarks/speed_value_based.py --algos qmix --iterations 20 --json qmix_speed.json
    python benchmarks/speed_value_based.py --algo-flags "--batch-size 64 --updates-per-iteration 4"

One torch thread by default (--torch-threads), as the files' defaults; --cuda runs the files on the GPU
and synchronises it around every timed call. Timings of a shared machine move by 10% or more from run
to run: compare two versions of the files in one command, alternating, several times.
"""
import argparse
import contextlib
import importlib
import io
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # the files of this checkout, whichever is installed

from buffers import MultiAgentRolloutBuffer  # noqa: E402
from common.cli import parse_args  # noqa: E402
from common.run_utils import RunRecorder, write_json_atomic  # noqa: E402
from nets import PerGroup, QPolicy  # noqa: E402

ALGOS = ("iql", "vdn", "qmix", "qplex")
PARTS = ("sample", "agents", "target", "mixer", "td", "backward", "optim")
EPISODE_LEN = 25  # simple_spread's max_cycles: every episode is this long


class StepTimer:
    """Per gradient step, the seconds of each part ("step": the whole of it); per iteration, its
    global_step, rollout and update seconds and number of gradient steps."""

    def __init__(self, cuda: bool):
        self.cuda, self.in_update, self.start = cuda, False, 0.0
        self.steps, self.iterations = [], []

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def start_step(self) -> None:
        """A gradient step begins with its replay draw; the step before it ends there."""
        self.end_step()
        self.in_update, self.start = True, self.now()
        self.steps.append(defaultdict(float))

    def end_step(self) -> None:
        if self.in_update:
            self.steps[-1]["step"] = self.now() - self.start
        self.in_update = False

    def wrap(self, fn, part):
        """fn, its time going to `part` (a name, or a function of the grad mode giving one) inside a step."""
        def timed(*args, **kwargs):
            if not self.in_update:
                return fn(*args, **kwargs)
            start = self.now()
            out = fn(*args, **kwargs)
            self.steps[-1][part(torch.is_grad_enabled()) if callable(part) else part] += self.now() - start
            return out
        return timed


def online_or_target(grad_enabled: bool) -> str:
    """The online utilities are computed with gradients, the target ones without."""
    return "agents" if grad_enabled else "target"


@contextlib.contextmanager
def patched(obj, name: str, new):
    old = getattr(obj, name)
    setattr(obj, name, new)
    try:
        yield
    finally:
        setattr(obj, name, old)


def measure(algo: str, iterations: int, warmup: int, torch_threads: int, flags: str, cuda: bool) -> dict:
    """Run algos/<algo>.py for the iterations that only fill the replay, then `warmup` + `iterations`
    with gradient steps, and return the medians over the last `iterations` of them."""
    module = importlib.import_module(f"algos.{algo}")
    timer = StepTimer(cuda and torch.cuda.is_available())
    base = parse_args(module.Args, ["--env", "torch:simple_spread", *shlex.split(flags)])
    fill = -(-base.batch_size // base.num_envs) - 1  # iterations before the one whose episodes complete a batch
    draw, log, evaluate = MultiAgentRolloutBuffer.sample_episodes, RunRecorder.log_iteration, RunRecorder.maybe_evaluate

    def sample_episodes(self, *args, **kwargs):
        timer.start_step()
        return timer.wrap(draw, "sample")(self, *args, **kwargs)

    def log_iteration(self, global_step, stats, rollout_s, update_s, *args, **kwargs):
        timer.end_step()
        done = sum(n for *_, n in timer.iterations)
        timer.iterations.append((global_step, rollout_s, update_s, len(timer.steps) - done))
        return log(self, global_step, stats, rollout_s, update_s, *args, **kwargs)

    def maybe_evaluate(self, *args, **kwargs):  # evaluation runs the agents too, outside any step
        timer.end_step()
        return evaluate(self, *args, **kwargs)

    argv = ["--env", "torch:simple_spread", "--eval-every", "0", "--eval-episodes", "1", "--eval-num-envs", "1",
            "--checkpoint-every", "0", "--torch-threads", str(torch_threads), "--cuda" if cuda else "--no-cuda",
            "--total-timesteps", str((fill + warmup + iterations) * base.num_envs * EPISODE_LEN), *shlex.split(flags)]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        for obj, name, new in (
                (MultiAgentRolloutBuffer, "sample_episodes", sample_episodes),
                (RunRecorder, "log_iteration", log_iteration),
                (RunRecorder, "maybe_evaluate", maybe_evaluate),
                (QPolicy, "q_values", timer.wrap(QPolicy.q_values, online_or_target)),
                (PerGroup, "forward", timer.wrap(PerGroup.forward, "mixer")),
                (module, "td_lambda_targets", timer.wrap(module.td_lambda_targets, "td")),
                (torch.Tensor, "backward", timer.wrap(torch.Tensor.backward, "backward")),
                (torch.nn.utils, "clip_grad_norm_", timer.wrap(torch.nn.utils.clip_grad_norm_, "optim")),
                (torch.optim.Adam, "step", timer.wrap(torch.optim.Adam.step, "optim")),
                (module, "soft_update", timer.wrap(module.soft_update, "optim"))):
            stack.enter_context(patched(obj, name, new))
        with contextlib.redirect_stdout(io.StringIO()):  # the file's own progress lines
            module.main(parse_args(module.Args, argv + ["--run-dir", tmp]))

    with_steps = [i for i, it in enumerate(timer.iterations) if it[3] > 0]
    if len(with_steps) <= warmup:
        raise SystemExit(f"{algo}: no iteration with gradient steps after the warm-up; raise --iterations")
    first = with_steps[warmup]  # the first measured iteration
    measured = timer.iterations[first:]
    steps = timer.steps[sum(n for *_, n in timer.iterations[:first]):]
    row = {"algo": algo, "gradient_steps": len(steps)}
    for part in ("step",) + PARTS:
        row[part] = 1e3 * statistics.median(s.get(part, 0.0) for s in steps)
    row["other"] = row["step"] - sum(row[p] for p in PARTS)
    env_steps = measured[-1][0] - timer.iterations[first - 1][0]
    row["loop_sps"] = env_steps / sum(rollout_s + update_s for _, rollout_s, update_s, _ in measured)
    return row


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--iterations", type=int, default=6, help="measured iterations with gradient steps")
    parser.add_argument("--warmup", type=int, default=1, help="iterations with gradient steps left out first")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--cuda", action="store_true", help="run the files on the GPU")
    parser.add_argument("--algo-flags", default="", help="more flags for every file, e.g. \"--batch-size 64\"")
    parser.add_argument("--json", help="also write the rows and the settings to this JSON file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.torch_threads)

    rows = [measure(a, opts.iterations, opts.warmup, opts.torch_threads, opts.algo_flags, opts.cuda)
            for a in opts.algos]
    cols = ("step",) + PARTS + ("other",)
    print(f"\nms per gradient step, torch:simple_spread on the {'GPU' if opts.cuda else 'CPU'}, "
          f"{opts.torch_threads} torch thread(s), {opts.algo_flags or 'file defaults'}")
    print(f"{'algo':6s} {'steps':>5s} " + " ".join(f"{c:>8s}" for c in cols) + f" {'loop SPS':>9s}")
    for r in rows:
        print(f"{r['algo']:6s} {r['gradient_steps']:5d} " + " ".join(f"{r[c]:8.2f}" for c in cols)
              + f" {r['loop_sps']:9.0f}")
    if opts.json:
        write_json_atomic(opts.json, {"rows": rows, "torch": torch.__version__, "platform": platform.platform(),
                                      "cpus": os.cpu_count(), **vars(opts)})
    return rows


if __name__ == "__main__":
    main()
