"""A training run with its env copies stepped in worker processes (--env-workers W) against one process.

For each W the same command (same seed) trains as its own process, the W values taking turns for
--repeats rounds; the script reads each run's summary.json and prints the median env steps/s, the
ratio to W=1 and whether the run's final losses and evaluation equal W=1's (they must: the workers
step the same copies with the same seeds). The speed issue's bar: with 2 workers on a 2-core machine,
a family whose env step dominates (MaMuJoCo, RWARE) trains at least 1.6x faster than in one process.

    python benchmarks/speed_env_workers.py --env mamujoco:HalfCheetah-2x3 --workers 1 2 --repeats 3 \
        --json benchmarks/results/speed_env_workers/mappo_halfcheetah-2x3_e16.json
    python benchmarks/speed_env_workers.py --env rware:rware-tiny-2ag-v2 --algo mappo --flags "--num-envs 16"
"""
import argparse
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from common.run_utils import write_json_atomic  # noqa: E402


def train(algo: str, env: str, workers: int, flags: str, run_dir: str) -> dict:
    """One run as its own process; its summary.json."""
    cmd = [sys.executable, os.path.join(REPO, "algos", f"{algo}.py"), "--env", env, "--env-workers", str(workers),
           "--run-dir", run_dir, "--checkpoint-every", "0", "--no-cuda", *shlex.split(flags)]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    (path,) = glob.glob(os.path.join(run_dir, "*", "summary.json"))
    with open(path) as f:
        return json.load(f)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="mamujoco:HalfCheetah-2x3")
    parser.add_argument("--algo", default="mappo")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="W values; the first is the baseline")
    parser.add_argument("--flags", default="--num-envs 16 --num-steps 100 --total-timesteps 96000 --eval-every 0 "
                        "--eval-episodes 2 --eval-num-envs 2 --torch-threads 1",
                        help="the algorithm's flags, one quoted string (the same for every W)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each round runs every W once")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    opts = parser.parse_args(argv)
    runs = {w: [] for w in opts.workers}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.repeats):
            for w in opts.workers:
                summary = train(opts.algo, opts.env, w, opts.flags, os.path.join(tmp, f"w{w}_r{r}"))
                runs[w].append(summary)
                print(f"round {r + 1}: {w} worker(s) {summary['sps']:,.0f} env steps/s", flush=True)
    base = opts.workers[0]
    rows = []
    print(f"\n{opts.algo} on {opts.env} ({opts.flags}); {os.cpu_count()} CPU cores")
    print(f"{'workers':>8} {'median SPS':>12} {'x ' + str(base):>8}  same losses and evaluation as {base}")
    for w in opts.workers:
        sps = float(np.median([s["sps"] for s in runs[w]]))
        same = all(s["final_losses"] == b["final_losses"] and s["eval_return_mean"] == b["eval_return_mean"]
                   for s, b in zip(runs[w], runs[base]))
        rows.append({"workers": w, "sps": [s["sps"] for s in runs[w]], "median_sps": sps, "same_results": same})
        print(f"{w:>8} {sps:>12,.0f} {sps / rows[0]['median_sps']:>8.2f}  {same}")
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPU cores", "algo": opts.algo, "env": opts.env,
              "flags": opts.flags, "rows": rows}
    if opts.json:
        write_json_atomic(opts.json, result)
    return result


if __name__ == "__main__":
    main()
