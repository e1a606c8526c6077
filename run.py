"""Launch algorithms over seeds and collect their results (no algorithm logic lives here).

    python run.py --algo mappo ippo --env simple_spread --seeds 3 --workers 2 -- --total-timesteps 2000000

Each run calls `algos.<algo>.main(args)`, in a pool of `--workers` processes (in this process
when there is one worker or one run); everything after `--` is passed to every run as
algorithm flags, except --env, --seed and --run-dir, which the launcher sets per run. A results table (final greedy evaluation return, mean over
seeds) is printed at the end and written to <run-dir>/results.json.
"""
import argparse
import glob
import importlib
import multiprocessing as mp
import os
import sys
from typing import List, Optional, Sequence

import numpy as np

from common.cli import parse_args
from common.run_utils import write_json_atomic
from envs import known_envs

ALGOS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "algos")
ALGOS = tuple(sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ALGOS_DIR, "*.py"))
                     if not p.endswith("__init__.py")))  # every algorithm file


def run_one(job) -> dict:
    algo, env, seed, run_dir, extra = job
    module = importlib.import_module(f"algos.{algo}")
    args = parse_args(module.Args, ["--env", env, "--seed", str(seed), "--run-dir", run_dir, *extra])
    return module.main(args)


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", default=["mappo"], choices=ALGOS, help="algorithm files to run")
    parser.add_argument("--env", nargs="+", default=["simple_spread"], help=f"env names; known: {', '.join(known_envs())}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..SEEDS per (algo, env)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs at a time (processes)")
    parser.add_argument("--run-dir", default="runs", help="runs go to RUN_DIR/<env>/<algo>/")
    opts = parser.parse_args(own)
    for flag in ("--env", "--seed", "--run-dir"):
        if any(a == flag or a.startswith(flag + "=") for a in extra):
            parser.error(f"{flag} is set by the launcher per run; give it before '--' (--env, --seeds, --run-dir)")
    jobs = [(algo, env, seed, os.path.join(opts.run_dir, env, algo), extra)
            for env in opts.env for algo in opts.algo for seed in range(1, opts.seeds + 1)]
    if opts.workers > 1 and len(jobs) > 1:
        with mp.get_context("spawn").Pool(min(opts.workers, len(jobs))) as pool:
            results = pool.map(run_one, jobs, chunksize=1)
    else:
        results = [run_one(job) for job in jobs]
    print(f"\n{'algo':<8} {'env':<26} {'seeds':>5} {'eval return (mean +- std)':>27} {'env steps':>11} {'SPS':>7}")
    for env in opts.env:
        for algo in opts.algo:
            rs = [r for r in results if r["algo"] == algo and r["env"] == env]
            ret = np.array([r["eval_return_mean"] for r in rs])
            print(f"{algo:<8} {env:<26} {len(rs):>5} {ret.mean():>18.2f} +- {ret.std():<6.2f} "
                  f"{rs[0]['global_step']:>11,d} {np.mean([r['sps'] for r in rs]):>7.0f}")
    write_json_atomic(os.path.join(opts.run_dir, "results.json"), {"runs": results})
    return results


if __name__ == "__main__":
    main()
