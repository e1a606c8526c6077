"""MAPPO on the batched torch simple_spread against the clock: the speed issue's whole-loop bars.

Each seed trains as its own process, alone on the machine, with a preset (by default
`configs/mappo/torch_simple_spread_fast_cpu.yaml`: 1,024 copies, 2 epochs x 16 minibatches, 2 torch
threads), and the script reads back from the run's own files:

    SPS                 env steps per second over the whole run (summary.json; sampling, updates and
                        the greedy evaluations all inside)
    minutes to target   wall-clock from the moment the process was started (imports included) to the
                        first greedy evaluation at or above --target (the TensorBoard event's time)

beside the bars: on a 2-core CPU at least 40,000 env steps/s and -25 R_pz3 within 10 minutes. On a
GPU (`--device cuda` passes --cuda, the preset's env copies are then stepped on the device too) the
speed issue asks for 2,000,000 env steps/s with many copies; `benchmarks/speed_torch_mpe.py --device
cuda` sweeps the number of copies.

    python benchmarks/wallclock_mappo.py --seeds 3 \
        --json benchmarks/results/wallclock_mappo/mappo_simple_spread-torch_24m_fast-cpu-preset.json
    python benchmarks/wallclock_mappo.py --from-runs runs/bench_wallclock      # re-read finished runs
    python benchmarks/wallclock_mappo.py --seeds 1 --flags "--num-envs 2048"   # a variation
"""
import argparse
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join("configs", "mappo", "torch_simple_spread_fast_cpu.yaml")


def device_name(device: str) -> str:
    """"cpu", or the GPU's name (the card goes beside its figures)."""
    if device != "cuda":
        return device
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda (none found)"


def first_time_at(events_dir: str, target: float, started: float):
    """(env step, seconds since `started`) of the first greedy evaluation >= target, or (None, None)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(events_dir)
    events.Reload()
    for e in events.Scalars("eval/episodic_return"):
        if e.value >= target:
            return int(e.step), e.wall_time - started
    return None, None


def read(run_path: str, target: float) -> dict:
    """One finished run: its summary, the start time this script wrote beside it, and the time to target."""
    with open(os.path.join(run_path, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_path, "wallclock.json")) as f:
        started = json.load(f)["process_started"]
    step, seconds = first_time_at(run_path, target, started)
    return {"seed": summary["seed"], "global_step": summary["global_step"], "sps": summary["sps"],
            "wall_time_s": summary["wall_time_s"], "final_eval": summary["eval_return_mean"],
            "eval_history": summary["eval_history"], "steps_to_target": step, "seconds_to_target": seconds,
            "run_dir": run_path}


def train(seed: int, opts) -> str:
    """Train one seed as its own process; returns its run folder (with wallclock.json written into it)."""
    parent = os.path.join(opts.run_dir, f"seed{seed}")
    os.makedirs(parent, exist_ok=True)
    cmd = [sys.executable, os.path.join(REPO, "algos", "mappo.py"), "--config", opts.config, "--seed", str(seed),
           "--run-dir", parent, "--checkpoint-every", "0", *(["--cuda"] if opts.device == "cuda" else ["--no-cuda"]),
           *shlex.split(opts.flags)]
    print("$", " ".join(cmd), flush=True)
    started = time.time()
    subprocess.run(cmd, check=True, cwd=REPO)
    run_path = max((os.path.dirname(p) for p in glob.glob(os.path.join(parent, "*", "summary.json"))),
                   key=os.path.getmtime)  # the run just made (an earlier one may sit beside it)
    with open(os.path.join(run_path, "wallclock.json"), "w") as f:
        json.dump({"process_started": started, "command": cmd}, f)
    return run_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="MAPPO preset to train with")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS, one after another")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--flags", default="", help="extra algos/mappo.py flags, one quoted string")
    parser.add_argument("--run-dir", default="runs/bench_wallclock")
    parser.add_argument("--from-runs", default=None, help="read the finished runs under this folder instead")
    parser.add_argument("--target", type=float, default=-25.0, help="greedy evaluation return to reach (R_pz3)")
    parser.add_argument("--minutes", type=float, default=10.0, help="bar: reach --target within this many minutes")
    parser.add_argument("--sps-bar", type=float, default=40_000.0, help="bar: whole-loop env steps per second")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    opts = parser.parse_args(argv)

    if opts.from_runs:
        paths = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(opts.from_runs, "**", "wallclock.json"),
                                                             recursive=True))
        if not paths:
            raise SystemExit(f"error: no run with wallclock.json under {opts.from_runs}")
    else:
        paths = [train(seed, opts) for seed in range(1, opts.seeds + 1)]
    runs = [read(p, opts.target) for p in paths]

    print(f"\n{'seed':>4} {'env steps':>12} {'SPS':>8} {'wall s':>7} {'final eval':>11} "
          f"{'first >= ' + format(opts.target, 'g'):>14} {'minutes':>8}")
    for r in runs:
        reached = f"{r['steps_to_target']:,d}" if r["steps_to_target"] is not None else "never"
        minutes = f"{r['seconds_to_target'] / 60:.1f}" if r["seconds_to_target"] is not None else "-"
        print(f"{r['seed']:>4} {r['global_step']:>12,d} {r['sps']:>8,.0f} {r['wall_time_s']:>7.0f} "
              f"{r['final_eval']:>11.1f} {reached:>14} {minutes:>8}")
    sps = np.array([r["sps"] for r in runs])
    minutes = [r["seconds_to_target"] / 60 if r["seconds_to_target"] is not None else float("inf") for r in runs]
    sps_met = bool((sps >= opts.sps_bar).all())
    time_met = all(m <= opts.minutes for m in minutes)
    print(f"SPS median {np.median(sps):,.0f} (min {sps.min():,.0f}); bar >= {opts.sps_bar:,.0f} in every seed: "
          f"{'met' if sps_met else 'NOT met'}")
    print(f"minutes to {opts.target:g}: {', '.join(f'{m:.1f}' for m in minutes)}; bar <= {opts.minutes:g} in every "
          f"seed: {'met' if time_met else 'NOT met'}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, device {device_name(opts.device)}",
                       "config": opts.config, "flags": opts.flags, "target": opts.target, "runs": runs,
                       "sps_median": float(np.median(sps)), "sps_bar": opts.sps_bar, "sps_met": sps_met,
                       "minutes_bar": opts.minutes, "minutes_to_target": minutes, "time_met": time_met}, f, indent=2)
    return runs


if __name__ == "__main__":
    main()
