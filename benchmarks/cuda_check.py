"""The CUDA path, checked on the GPU at hand: every algorithm file trains, resumes and evaluates there.

CI has no GPU, so this is the check to run whenever one is lent. For every file in algos/:

  torch:simple_spread   a tiny run with --cuda, discrete and continuous actions (the batched port: the
                        env copies live on the GPU too); a ConfigError is a refusal, reported as such
  simple_spread         the same on PettingZoo's mpe2 (numpy env, networks on the GPU), discrete actions
  recurrent             --recurrent gru with --share-params all (torch's fused GRU, cuDNN on a GPU)
  classic:tictactoe     the turn-based files (common.turns.TURN_BASED_ALGOS), and torch:connect_four (the
                        board tensors on the GPU)
  torch:smax_3m         a small SMAX battle on the GPU (discrete actions, units die)
  factored actions      --factored-actions on torch:simple_reference (the (move, word) heads), where a file has it

and on its first run that works: the checkpoint resumed on the GPU, then on the CPU, then evaluated
on the CPU (a run trained on a GPU must go on and load on a laptop), and the same seed trained twice
(whether CUDA gives the same losses is reported, not required: some kernels are not deterministic).
Prints one line per run and a summary, writes JSON, exits 1 if any run failed (a refusal is no failure).

    python benchmarks/cuda_check.py --json cuda_check.json
    python benchmarks/cuda_check.py --algos mappo qmix        # a few files
"""
import argparse
import contextlib
import dataclasses
import io
import importlib
import math
import os
import sys
import re
import tempfile
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from common.cli import ConfigError, make_args  # noqa: E402
from common.run_utils import write_json_atomic  # noqa: E402
from common.turns import TURN_BASED_ALGOS  # noqa: E402

# Tiny settings, each given to the algorithms whose Args have the field (as tests/test_support_table.py).
TINY = dict(num_envs=4, num_steps=4, total_timesteps=32, eval_every=0, eval_episodes=2, eval_num_envs=2,
            checkpoint_every=0, torch_threads=1, hidden_sizes=(16,), hidden_dim=16, critic_hidden_sizes=(16,),
            mixer_embed_dim=8, hypernet_hidden=16, mixer_hidden=16, update_epochs=1, num_minibatches=2,
            critic_minibatches=1, chunk_len=4, batch_size=4, buffer_size=256, learning_starts=0,
            updates_per_iteration=1, policy_delay=1)
SPREAD = ("max_cycles=4",)  # one episode per 4-step rollout: IPG's Monte Carlo returns need whole episodes
SMAX = ("max_steps=4", "map_width=8", "map_height=8")  # likewise, on a small map where units meet and die


def algo_names():
    return sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "algos")) if f.endswith(".py") and f != "__init__.py")


def settings_for(module, **overrides):
    fields = {f.name for f in dataclasses.fields(module.Args)}
    return make_args(module.Args, **{**{k: v for k, v in TINY.items() if k in fields}, **overrides})


def finite_losses(summary) -> bool:
    return all(math.isfinite(v) for v in summary.get("final_losses", {}).values())


def run_case(module, run_dir, **overrides):
    """("ok", summary) | ("refused", message) | ("failed", traceback) for one tiny run."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            summary = module.main(settings_for(module, run_dir=run_dir, **overrides))
    except ConfigError as err:
        return "refused", str(err).splitlines()[0][:160]
    except Exception:
        return "failed", traceback.format_exc()
    if not finite_losses(summary):
        return "failed", f"losses not finite: {summary.get('final_losses')}"
    return "ok", summary


def cases(algo, module):
    fields = {f.name for f in dataclasses.fields(module.Args)}
    yield "torch:simple_spread discrete", dict(env="torch:simple_spread",
                                               env_kwargs=SPREAD + ("continuous_actions=false",))
    yield "torch:simple_spread continuous", dict(env="torch:simple_spread",
                                                 env_kwargs=SPREAD + ("continuous_actions=true",))
    yield "simple_spread (mpe2) discrete", dict(env="simple_spread", env_kwargs=SPREAD + ("continuous_actions=false",))
    if "recurrent" in fields:
        shared = dict(share_params="all") if "share_params" in fields else {}  # one cell: torch's fused kernel
        yield "torch:simple_spread recurrent gru", dict(env="torch:simple_spread", recurrent="gru", **shared,
                                                        env_kwargs=SPREAD + ("continuous_actions=false",))
    if "factored_actions" in fields:
        yield "torch:simple_reference factored actions", dict(env="torch:simple_reference", factored_actions=True,
                                                               env_kwargs=SPREAD)
    lead = dict(agent_groups=("ally_0=lead",)) if "iql_group" in fields else {}  # ppo_iql: SMAX's agents are allies
    yield "torch:smax_3m", dict(env="torch:smax_3m", env_kwargs=SMAX, **lead)
    if algo in TURN_BASED_ALGOS:
        yield "classic:tictactoe", dict(env="classic:tictactoe")
        yield "torch:connect_four", dict(env="torch:connect_four")


def check_algo(algo: str, tmp: str) -> list:
    module = importlib.import_module(f"algos.{algo}")
    rows, first = [], None
    fields = {f.name for f in dataclasses.fields(module.Args)}
    groups = dict(agent_groups=("agent_0=lead",)) if "iql_group" in fields else {}  # ppo_iql: one policy per group
    for name, overrides in cases(algo, module):
        overrides = {**groups, **overrides}
        start = time.perf_counter()
        status, out = run_case(module, os.path.join(tmp, algo, re.sub(r"[^a-z0-9]+", "_", name)), cuda=True, **overrides)
        rows.append({"algo": algo, "case": name, "status": status, "seconds": time.perf_counter() - start,
                     "detail": None if status == "ok" else out})
        if status == "ok" and first is None:
            first = (name, overrides, out)
    if first is None:
        return rows
    name, overrides, summary = first
    run_dir = summary["run_dir"]
    ckpt = torch.load(os.path.join(run_dir, "checkpoint.pt"), map_location="cpu", weights_only=True)
    steps = int(ckpt["global_step"])
    for case, extra in (("resume on cuda", dict(cuda=True, resume=run_dir, total_timesteps=2 * steps)),
                        ("resume on cpu", dict(cuda=False, resume=run_dir, total_timesteps=3 * steps)),
                        ("evaluate on cpu", dict(cuda=False, evaluate_checkpoint=run_dir))):
        status, out = run_case(module, os.path.dirname(run_dir), **overrides, **extra)
        goal = extra.get("total_timesteps")
        if status == "ok" and goal and out["global_step"] != goal:
            status, out = "failed", f"resumed to {out['global_step']} env steps, not {goal}"
        if status == "ok" and case.startswith("evaluate") and not math.isfinite(out["eval_return_mean"]):
            status, out = "failed", f"evaluation return {out['eval_return_mean']}"
        rows.append({"algo": algo, "case": f"{name}: {case}", "status": status, "seconds": None,
                     "detail": None if status == "ok" else out})
    again = run_case(module, os.path.join(tmp, algo, "again"), cuda=True, **overrides)
    same = again[0] == "ok" and again[1]["final_losses"] == summary["final_losses"]
    rows.append({"algo": algo, "case": f"{name}: same seed, same losses", "status": "ok" if again[0] == "ok" else
                 again[0], "seconds": None, "detail": None if again[0] == "ok" else again[1], "deterministic": same})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=None, help="files to check (default: every file in algos/)")
    parser.add_argument("--workers", type=int, default=1, help="files checked at once, each in its own process")
    parser.add_argument("--json", default=None, help="write the rows to this JSON file")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check")
        return 2
    device = torch.cuda.get_device_name(0)
    print(f"device: {device}; torch {torch.__version__}", flush=True)
    rows = []
    algos = opts.algos or algo_names()
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(opts.workers, get_context("spawn")) as pool:
        for algo_rows in pool.map(check_algo, algos, [tmp] * len(algos)):
            for row in algo_rows:
                rows.append(row)
                extra = "" if row.get("deterministic") is None else f" (deterministic: {row['deterministic']})"
                detail = "" if row["detail"] is None else f": {row['detail'].strip().splitlines()[-1][:160]}"
                print(f"{row['algo']:>8}  {row['case']:<52} {row['status']}{extra}{detail}", flush=True)
    failed = [r for r in rows if r["status"] == "failed"]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "refused", "failed")}
    print(f"{counts['ok']} ok, {counts['refused']} refused, {counts['failed']} failed on {device}")
    if opts.json:
        write_json_atomic(opts.json, {"device": device, "torch": torch.__version__, "counts": counts, "rows": rows})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
