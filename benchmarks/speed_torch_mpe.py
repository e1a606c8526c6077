"""Throughput of the batched torch MPE (envs/torch_mpe.py) and of training on it.

For each number of env copies E it measures, on simple_spread:
  torch env   `torch:simple_spread` stepped with uniform random actions (no learning)
  algo        an algorithm's whole training loop on `torch:simple_spread` (sampling and
              updates, evaluation off), e.g. MAPPO with --num-envs E
  vmas        VMAS's own simple_spread stepped with random actions, where vmas is installed
and, once, the PettingZoo ceiling (raw mpe2 copies, random actions, one process) that every
trainer on the PettingZoo version is capped by. Figures are env steps per second (one env step
= all agents of one copy act once); ratios to the PettingZoo ceiling are printed beside them.

    python benchmarks/speed_torch_mpe.py                                  # CPU, E = 64 .. 4096
    python benchmarks/speed_torch_mpe.py --device cuda --num-envs 1024 16384 131072 --plot gpu.png
    python benchmarks/speed_torch_mpe.py --algo mappo --algo-flags "--update-epochs 5" --json out.json

The issue's bars: MAPPO whole loop >= 40,000 env steps/s on a 2-core CPU, >= 2,000,000 on one
H100-class GPU with enough copies; the plot shows where throughput saturates.
"""
import argparse
import importlib
import json
import os
import platform
import shlex
import tempfile
import time

import numpy as np
import torch

from common.cli import parse_args
from envs import make_env


def torch_env_sps(num_envs: int, steps: int, device: str) -> float:
    env = make_env("torch:simple_spread", num_envs, seed=0, device=device)
    env.reset()
    for _ in range(5):  # warm-up (CUDA kernels, allocator)
        env.step(env.sample_actions())
    sync(device)
    n = max(1, steps // num_envs)
    start = time.perf_counter()
    for _ in range(n):
        env.step(env.sample_actions())
    sync(device)
    return n * num_envs / (time.perf_counter() - start)


def vmas_sps(num_envs: int, steps: int, device: str):
    """VMAS simple_spread with random actions, or None where vmas is not installed."""
    try:
        import vmas
    except ImportError:
        return None
    env = vmas.make_env("simple_spread", num_envs=num_envs, device=device, continuous_actions=False, seed=0)
    env.reset()
    n_actions = env.action_space[0].n
    n = max(1, steps // num_envs)
    sync(device)
    start = time.perf_counter()
    for _ in range(n):
        env.step([torch.randint(0, n_actions, (num_envs,), device=device) for _ in env.agents])
    sync(device)
    return n * num_envs / (time.perf_counter() - start)


def pettingzoo_ceiling(steps: int) -> float:
    from speed_mpe import ceiling_sps  # benchmarks/ is on sys.path when run as a script

    return ceiling_sps(16, steps)


def algo_sps(algo: str, num_envs: int, steps: int, device: str, flags: str) -> float:
    module = importlib.import_module(f"algos.{algo}")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--env", "torch:simple_spread", "--num-envs", str(num_envs), "--total-timesteps", str(steps),
                "--eval-every", "0", "--eval-episodes", "1", "--eval-num-envs", "1", "--checkpoint-every", "0",
                "--run-dir", tmp, "--cuda" if device.startswith("cuda") else "--no-cuda", *shlex.split(flags)]
        return module.main(parse_args(module.Args, argv))["sps"]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024, 4096], help="E values to sweep")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps per env-only measurement")
    parser.add_argument("--algo", default="mappo", help="algorithm file to time on the torch port ('' to skip)")
    parser.add_argument("--algo-steps", type=int, default=0,
                        help="env steps per algorithm run (default: --algo-iterations of the algorithm's rollout)")
    parser.add_argument("--algo-iterations", type=int, default=40, help="iterations per algorithm run")
    parser.add_argument("--algo-flags", default="", help="extra algorithm flags, one quoted string")
    parser.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--plot", default=None, help="write env steps/s against E to this PNG file")
    opts = parser.parse_args()
    torch.set_num_threads(opts.torch_threads)
    machine = (torch.cuda.get_device_name(0) if opts.device.startswith("cuda")
               else f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores")
    ceiling = pettingzoo_ceiling(20_000)
    rows = []
    print(f"machine: {machine}; PettingZoo ceiling (raw mpe2, 16 copies, 1 process): {ceiling:,.0f} env steps/s")
    print(f"{'E':>8} {'torch env':>14} {'x PZ':>7} {opts.algo or '-':>14} {'x PZ':>7} {'vmas':>14}")
    for E in opts.num_envs:
        env_sps = torch_env_sps(E, opts.steps, opts.device)
        row = {"num_envs": E, "torch_env_sps": env_sps, "vmas_sps": vmas_sps(E, opts.steps, opts.device)}
        if opts.algo:
            module = importlib.import_module(f"algos.{opts.algo}")
            steps = opts.algo_steps or opts.algo_iterations * E * getattr(module.Args(), "num_steps", 25)
            row[f"{opts.algo}_sps"] = algo_sps(opts.algo, E, steps, opts.device, opts.algo_flags)
        rows.append(row)
        a = row.get(f"{opts.algo}_sps")
        v = row["vmas_sps"]
        print(f"{E:>8} {env_sps:>14,.0f} {env_sps / ceiling:>7.1f} "
              f"{(f'{a:,.0f}' if a else '-'):>14} {(f'{a / ceiling:.1f}' if a else '-'):>7} "
              f"{(f'{v:,.0f}' if v else 'not installed'):>14}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": machine, "device": opts.device, "pettingzoo_ceiling_sps": ceiling,
                       "algo": opts.algo, "algo_flags": opts.algo_flags, "rows": rows}, f, indent=2)
    if opts.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.5, 4))
        Es = np.array([r["num_envs"] for r in rows])
        ax.plot(Es, [r["torch_env_sps"] for r in rows], "o-", label="torch:simple_spread (random actions)")
        if opts.algo:
            ax.plot(Es, [r[f"{opts.algo}_sps"] for r in rows], "s-", label=f"{opts.algo} whole loop")
        if any(r["vmas_sps"] for r in rows):
            ax.plot(Es, [r["vmas_sps"] or np.nan for r in rows], "^-", label="VMAS simple_spread (random)")
        ax.axhline(ceiling, color="gray", ls=":", label="PettingZoo mpe2 ceiling")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("env copies E")
        ax.set_ylabel("env steps per second")
        ax.set_title(f"simple_spread on {machine}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
        fig.tight_layout()
        fig.savefig(opts.plot, dpi=120)
        print(f"wrote {opts.plot}")


if __name__ == "__main__":
    main()
