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
import functools
import importlib
import json
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

ORDER = ["env step", "actor forward, rollout", "critic forward, rollout", "storage", "GAE", "actor forward, update",
         "critic forward, update", "backward", "clip", "optimiser", "evaluation", "logging"]


class Clock:
    """Exclusive wall-clock per part: only the outermost timed call is counted."""

    def __init__(self, cuda: bool):
        self.cuda, self.depth, self.totals, self.calls = cuda, 0, defaultdict(float), defaultdict(int)

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
                self.calls[name] += 1
                self.depth -= 1
        return timed


def patch(target, attr: str, replacement, undo: list) -> None:
    undo.append((target, attr, getattr(target, attr)))
    setattr(target, attr, replacement)


def profile(algo: str, argv: list) -> dict:
    module = importlib.import_module(f"algos.{algo}")
    args = parse_args(module.Args, argv)
    clock = Clock(cuda=args.cuda and torch.cuda.is_available())
    phase = lambda what: lambda: f"{what}, {'update' if torch.is_grad_enabled() else 'rollout'}"  # noqa: E731
    started, undo, built = {}, [], []

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
    patch(module, "make_env", make_env, undo)
    patch(run_utils.RunRecorder, "__init__", recorder_init, undo)
    patch(nets.Actor, "forward", clock.wrap(nets.Actor.forward, phase("actor forward")), undo)
    patch(nets.Critic, "forward", clock.wrap(nets.Critic.forward, phase("critic forward")), undo)
    for name in ("add_transition", "end_episode", "batch"):
        patch(MultiAgentRolloutBuffer, name, clock.wrap(getattr(MultiAgentRolloutBuffer, name), "storage"), undo)
    if hasattr(module, "compute_gae"):
        patch(module, "compute_gae", clock.wrap(module.compute_gae, "GAE"), undo)
    patch(torch.Tensor, "backward", clock.wrap(torch.Tensor.backward, "backward"), undo)
    patch(torch.nn.utils, "clip_grad_norm_", clock.wrap(torch.nn.utils.clip_grad_norm_, "clip"), undo)
    patch(torch.optim.Adam, "step", clock.wrap(torch.optim.Adam.step, "optimiser"), undo)
    patch(run_utils.RunRecorder, "maybe_evaluate", clock.wrap(run_utils.RunRecorder.maybe_evaluate, "evaluation"),
          undo)
    patch(run_utils.RunRecorder, "log_iteration", clock.wrap(run_utils.RunRecorder.log_iteration, "logging"), undo)
    try:
        summary = module.main(args)
        clock.sync()
        total = time.perf_counter() - started["t"]
    finally:
        for target, attr, value in reversed(undo):
            setattr(target, attr, value)
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
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
