"""Where one training iteration's time goes: MAPPO (or another actor-critic file) split into its parts.

The algorithm file runs unchanged; for the run's duration the script wraps the calls each part is
made of and adds up their wall-clock time (a call inside another timed call counts to the outer one):

    env step            the training env's step (the torch port's tensors, or mpe2's Python copies)
    actor / critic      nets.Actor and nets.Critic forward passes, in the rollout (no gradient) and in
                        the update (with gradient)
    storage             the rollout buffer: add_transition, end_episode, batch
    GAE                 the file's compute_gae
    backward, clip, optimiser   Tensor.backward, clip_grad_norm_, Adam.step
    evaluation, logging the recorder's greedy evaluation and its console/TensorBoard writes
    other               the rest of the loop: sampling and log-probabilities, the losses' arithmetic,
                        masks, normalisation, chunking, Python

Times are from the recorder's start (after the networks and envs are built) to the end of the run.
On a GPU (--cuda in the flags) each timed call synchronises the device, which slows the run a little
but puts the time where the work is.

    python benchmarks/profile_iteration.py --flags "--config configs/mappo/torch_simple_spread_fast_cpu.yaml --total-timesteps 1024000 --eval-every 0 --torch-threads 2"
    python benchmarks/profile_iteration.py --flags "--env simple_spread --num-envs 256 --total-timesteps 256000 --eval-every 0"
"""
import argparse
import contextlib
import functools
import importlib
import os
import shlex
import sys
import tempfile
import time
from collections import defaultdict

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import nets  # noqa: E402
from buffers import MultiAgentRolloutBuffer  # noqa: E402
from common import run_utils  # noqa: E402
from common.cli import parse_args  # noqa: E402
from common.run_utils import write_json_atomic  # noqa: E402
from speed_value_based import patched  # noqa: E402  (benchmarks/ is on sys.path, as for a script)

ORDER = ["env step", "actor forward, rollout", "critic forward, rollout", "storage", "GAE", "actor forward, update",
         "critic forward, update", "backward", "clip", "optimiser", "evaluation", "logging"]


class Clock:
    """Exclusive wall-clock per part: only the outermost timed call is counted."""

    def __init__(self, cuda: bool):
        self.cuda, self.depth, self.totals = cuda, 0, defaultdict(float)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def wrap(self, fn, part):
        """fn timed as `part` (a name, or a function of no arguments giving it at call time)."""
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.sync()
            self.depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                name = part() if callable(part) else part
                self.totals[name] += time.perf_counter() - start
                self.depth -= 1
        return timed


def profile(algo: str, argv: list) -> dict:
    module = importlib.import_module(f"algos.{algo}")
    args = parse_args(module.Args, argv)
    clock = Clock(cuda=args.cuda and torch.cuda.is_available())
    phase = lambda what: lambda: f"{what}, {'update' if torch.is_grad_enabled() else 'rollout'}"  # noqa: E731
    started, built = {}, []

    def make_env(*a, **k):  # the first env built is the training env: its step is timed
        env = module_make_env(*a, **k)
        if not built:
            env.step = clock.wrap(env.step, "env step")
        built.append(env)
        return env

    def recorder_init(self, *a, **k):
        recorder_init_orig(self, *a, **k)
        clock.sync()
        started["t"] = time.perf_counter()

    module_make_env, recorder_init_orig = module.make_env, run_utils.RunRecorder.__init__
    Recorder, Buffer = run_utils.RunRecorder, MultiAgentRolloutBuffer
    timed = [(module, "make_env", make_env), (Recorder, "__init__", recorder_init),
             (nets.Actor, "forward", clock.wrap(nets.Actor.forward, phase("actor forward"))),
             (nets.Critic, "forward", clock.wrap(nets.Critic.forward, phase("critic forward"))),
             *[(Buffer, name, clock.wrap(getattr(Buffer, name), "storage"))
               for name in ("add_transition", "end_episode", "batch")],
             *([(module, "compute_gae", clock.wrap(module.compute_gae, "GAE"))] if hasattr(module, "compute_gae")
               else []),
             (torch.Tensor, "backward", clock.wrap(torch.Tensor.backward, "backward")),
             (torch.nn.utils, "clip_grad_norm_", clock.wrap(torch.nn.utils.clip_grad_norm_, "clip")),
             (torch.optim.Adam, "step", clock.wrap(torch.optim.Adam.step, "optimiser")),
             (Recorder, "maybe_evaluate", clock.wrap(Recorder.maybe_evaluate, "evaluation")),
             (Recorder, "log_iteration", clock.wrap(Recorder.log_iteration, "logging"))]
    with contextlib.ExitStack() as stack:
        for target, attr, replacement in timed:
            stack.enter_context(patched(target, attr, replacement))
        summary = module.main(args)
        clock.sync()
        total = time.perf_counter() - started["t"]
    iterations = summary["global_step"] // (args.num_envs * getattr(args, "num_steps", 1))
    parts = {name: clock.totals.get(name, 0.0) for name in ORDER}
    parts["other"] = total - sum(parts.values())
    return {"algo": algo, "env": args.env, "argv": argv, "iterations": iterations, "total_s": total,
            "env_steps_per_s": summary["global_step"] / total, "ms_per_iteration": {k: 1000 * v / iterations
                                                                                     for k, v in parts.items()}}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="mappo", help="an actor-critic file built on nets.Actor and nets.Critic")
    parser.add_argument("--flags", default="--env torch:simple_spread --total-timesteps 256000 --eval-every 0",
                        help="the algorithm's flags, one quoted string")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = profile(opts.algo, [*shlex.split(opts.flags), "--run-dir", tmp, "--checkpoint-every", "0"])
    ms = result["ms_per_iteration"]
    total = sum(ms.values())
    print(f"\n{opts.algo} {opts.flags}: {result['iterations']} iterations, {result['env_steps_per_s']:,.0f} env steps/s")
    print(f"{'part':<26} {'ms / iteration':>15} {'share':>7}")
    for name, value in ms.items():
        print(f"{name:<26} {value:>15.2f} {value / total:>7.1%}")
    print(f"{'total':<26} {total:>15.2f}")
    if opts.json:
        write_json_atomic(opts.json, result)
    return result


if __name__ == "__main__":
    main()
