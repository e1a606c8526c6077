"""Speed bar of the foundation issue: MAPPO's whole training loop against the env's ceiling.

Measures, in one process and one run, on mpe2 simple_spread with the same E env copies:
  ceiling  raw PettingZoo `parallel_env` copies stepped with uniform random actions, no learning
  adapter  the same through the batched adapter (`envs.make_env`)
  mappo    `algos/mappo.py` with its defaults (sampling and updates; evaluation off)
and prints env steps per second and the ratio to the ceiling. The bar: mappo / ceiling >= 0.6
(EPyMARL's MAPPO reaches about 0.14 of the ceiling on the same kind of machine).

    python benchmarks/speed_mpe.py [--steps 100000] [--algo mappo] [--repeats 3]
"""
import argparse
import importlib
import json
import tempfile
import time

import numpy as np
from mpe2 import simple_spread_v3

from common.cli import make_args
from envs import make_env


def ceiling_sps(num_envs: int, steps: int, seed: int = 0) -> float:
    envs = [simple_spread_v3.parallel_env() for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    # Random actions drawn in one numpy call per step (cheaper than action_space.sample(),
    # so the ceiling is as high as it honestly gets).
    rng = np.random.default_rng(seed)
    n_actions = envs[0].action_space(envs[0].possible_agents[0]).n
    start = time.perf_counter()
    for _ in range(steps // num_envs):
        actions = rng.integers(n_actions, size=(num_envs, len(envs[0].possible_agents))).tolist()
        for env, acts in zip(envs, actions):
            env.step(dict(zip(env.agents, acts)))
            if not env.agents:
                env.reset()
    return steps // num_envs * num_envs / (time.perf_counter() - start)


def adapter_sps(num_envs: int, steps: int, seed: int = 0) -> float:
    env = make_env("simple_spread", num_envs, seed)
    env.reset()
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for _ in range(steps // num_envs):
        env.step(env.sample_actions(rng))
    return steps // num_envs * num_envs / (time.perf_counter() - start)


def algo_sps(algo: str, steps: int) -> float:
    module = importlib.import_module(f"algos.{algo}")
    with tempfile.TemporaryDirectory() as tmp:
        args = make_args(module.Args, total_timesteps=steps, eval_every=0, eval_episodes=1, eval_num_envs=1,
                         checkpoint_every=0, run_dir=tmp, cuda=False)
        return module.main(args)["sps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per measurement")
    parser.add_argument("--algo", nargs="+", default=["mappo"], help="algorithm files to time")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats; medians are reported")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    opts = parser.parse_args()
    num_envs = {algo: importlib.import_module(f"algos.{algo}").Args().num_envs for algo in opts.algo}
    rows = {}
    for _ in range(opts.repeats):  # alternate so that machine drift hits every figure alike
        for algo in opts.algo:
            E = num_envs[algo]
            rows.setdefault(f"ceiling (raw mpe2, E={E})", []).append(ceiling_sps(E, opts.steps))
            rows.setdefault(f"adapter (random, E={E})", []).append(adapter_sps(E, opts.steps))
            rows.setdefault(f"{algo} (whole loop, E={E})", []).append(algo_sps(algo, opts.steps))
    med = {k: float(np.median(v)) for k, v in rows.items()}
    print(f"{'what':<36} {'env steps/s (median)':>22} {'ratio to ceiling':>18}")
    for algo in opts.algo:
        E = num_envs[algo]
        ceiling = med[f"ceiling (raw mpe2, E={E})"]
        for key in (f"ceiling (raw mpe2, E={E})", f"adapter (random, E={E})", f"{algo} (whole loop, E={E})"):
            print(f"{key:<36} {med[key]:>22,.0f} {med[key] / ceiling:>18.2f}")
        ratios = [a / c for a, c in zip(rows[f"{algo} (whole loop, E={E})"], rows[f"ceiling (raw mpe2, E={E})"])]
        print(f"{algo}: ratio per repeat {', '.join(f'{r:.2f}' for r in ratios)}; bar >= 0.60; "
              "EPyMARL MAPPO about 0.14 (REFERENCE.md)")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"median_sps": med, "samples": rows}, f, indent=2)


if __name__ == "__main__":
    main()
