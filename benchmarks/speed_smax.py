"""Raw stepping speed of the batched torch SMAX port against JaxMARL's SMAX, and MAPPO's whole loop.

For each map (default 3m and 2s3z) and number of copies E (default 1, 64, 1,024) it measures,
in one process on the same CPU, env steps per second (one env step = every copy advances once)
of random legal actions, drawn uniformly from each agent's action mask:

    torch       `torch:smax_<map>` (envs/torch_smax.py) through make_env: reset(), then step()
                with actions drawn from the mask the previous step returned
    jax step    jaxmarl's HeuristicEnemySMAX, vmapped over E and jitted, one jitted call per step
                from a Python loop (the way a torch training loop drives its env)
    jax scan    the same, with 128 steps scanned inside one jitted call (JaxMARL's own way, no
                Python between steps)

The JAX side computes what the port returns each step (observations, the global state, rewards,
dones and the next action mask) and keeps all of it, so XLA cannot drop any of it as unused. Jit
compilation is excluded: each measurement warms up first, then times a window of at least
--seconds, ending with block_until_ready on the JAX outputs. The ratio column is torch over the
faster JAX variant. Then MAPPO's whole training loop (sampling and updates, evaluation off) on
`torch:smax_3m`, its env steps per second against the issue's bar of 20,000 on the 2-core CPU.

    python benchmarks/speed_smax.py --json benchmarks/results/speed_smax/env-vs-jaxmarl-mappo_smax-3m-2s3z-torch_cpu.json
    python benchmarks/speed_smax.py --only jax                 # the JaxMARL side alone
    python benchmarks/speed_smax.py --only torch --maps 3m --num-envs 1024 --mappo-iterations 0
    python benchmarks/speed_smax.py --mappo-flags "--config configs/mappo/<preset>.yaml"

The issue's bars: the port at least as fast as JaxMARL at 1,024 copies (the ratio at 64 copies
reported), and MAPPO's whole loop on torch:smax_3m at least 20,000 env steps/s on a 2-core CPU.
"""
import argparse
import dataclasses
import importlib
import json
import os
import platform
import shlex
import tempfile
import time

import torch

MAPS = ("3m", "2s3z")
NUM_ENVS = (1, 64, 1024)
SCAN_STEPS = 128  # steps per jitted call of the scanned JAX variant (the NUM_STEPS of JaxMARL's SMAX baselines)
MAPPO_SPS_BAR = 20_000


# ============================================================================ torch side
def legal_random_actions(mask, generator: torch.Generator) -> torch.Tensor:
    """(E, N, A) legal-action mask -> (E, N) long actions, uniform over each agent's legal ones
    (a dead unit's mask leaves it its no-op, so every row has at least one)."""
    mask = torch.as_tensor(mask).bool()
    scores = torch.rand(mask.shape, generator=generator, device=mask.device)  # (E, N, A)
    return scores.masked_fill_(~mask, -1.0).argmax(-1)  # (E, N)


def torch_sps(map_name: str, num_envs: int, opts) -> float:
    from envs import make_env

    env = make_env(f"torch:smax_{map_name}", num_envs, seed=0, device=opts.device)
    generator = torch.Generator(device=opts.device).manual_seed(0)
    _, _, mask = env.reset()
    for _ in range(opts.warmup):
        mask = env.step(legal_random_actions(mask, generator)).action_mask
    sync(opts.device)
    steps, start = 0, time.perf_counter()
    while steps < opts.min_iterations or time.perf_counter() - start < opts.seconds:
        mask = env.step(legal_random_actions(mask, generator)).action_mask
        steps += 1
    sync(opts.device)
    elapsed = time.perf_counter() - start
    env.close()
    return steps * num_envs / elapsed


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ============================================================================ JAX side
def import_jax():
    """jax, jax.numpy and jaxmarl's SMAX makers, or exit saying how to get them."""
    try:
        import jax
        import jax.numpy as jnp
        from jaxmarl import make
        from jaxmarl.environments.smax import map_name_to_scenario
    except ImportError as err:
        raise SystemExit(f"error: the JAX side needs jaxmarl and jax ({err}); pip install -e '.[jaxmarl]', "
                         "or measure the torch port alone with --only torch") from None
    return jax, jnp, make, map_name_to_scenario


def jax_smax(map_name: str, num_envs: int):
    """(reset, step, scan) for E copies of HeuristicEnemySMAX: `reset(key) -> carry`, and two jitted
    functions carry -> carry, one env step and SCAN_STEPS env steps. The carry holds every output of
    the last step (observations, global state, next action mask, a running sum of rewards and dones),
    so nothing the port computes is left for XLA to drop."""
    jax, jnp, make, map_name_to_scenario = import_jax()
    # JaxMARL's SMAX baselines pass see_enemy_actions, walls_cause_death and attack_mode="closest": its defaults
    env = make("HeuristicEnemySMAX", scenario=map_name_to_scenario(map_name))

    def outputs(state, obs, reward, done, totals):
        mask = jnp.stack([jax.vmap(env.get_avail_actions)(state)[a] for a in env.agents], axis=1)  # (E, N, A)
        world = jax.vmap(env.get_world_state)(state)  # (E, state_dim)
        totals = totals + sum(reward[a] for a in env.agents) + done["__all__"]  # (E,)
        return state, obs, world, mask, totals

    def reset(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        zeros = {a: jnp.zeros(num_envs) for a in env.agents}
        return key, outputs(state, obs, zeros, {"__all__": jnp.zeros(num_envs)}, jnp.zeros(num_envs))

    def one_step(carry, _=None):
        key, (state, _, _, mask, totals) = carry
        key, act_key, step_key = jax.random.split(key, 3)
        actions = jax.random.categorical(act_key, jnp.where(mask > 0, 0.0, -jnp.inf))  # (E, N), uniform over legal
        obs, state, reward, done, _ = jax.vmap(env.step)(jax.random.split(step_key, num_envs), state,
                                                         {a: actions[:, i] for i, a in enumerate(env.agents)})
        return (key, outputs(state, obs, reward, done, totals)), None

    def scanned(carry):
        return jax.lax.scan(one_step, carry, None, length=SCAN_STEPS)[0]

    return jax.jit(reset), jax.jit(lambda carry: one_step(carry)[0]), jax.jit(scanned)


def jax_sps(map_name: str, num_envs: int, opts) -> dict:
    """{'jax_step_sps', 'jax_scan_sps'} for E copies (compilation excluded: warm-up calls first)."""
    jax = import_jax()[0]
    reset, step, scan = jax_smax(map_name, num_envs)
    rates = {}
    for name, fn, steps_per_call, warmup in (("jax_step_sps", step, 1, opts.warmup),
                                             ("jax_scan_sps", scan, SCAN_STEPS, 2)):
        carry = jax.block_until_ready(reset(jax.random.PRNGKey(0)))
        for _ in range(warmup):
            carry = fn(carry)
        carry = jax.block_until_ready(carry)
        calls, start = 0, time.perf_counter()
        while calls * steps_per_call < opts.min_iterations or time.perf_counter() - start < opts.seconds:
            carry = fn(carry)
            calls += 1
        jax.block_until_ready(carry)
        rates[name] = calls * steps_per_call * num_envs / (time.perf_counter() - start)
    return rates


# ============================================================================ MAPPO's whole loop
def mappo_sps(opts) -> dict:
    """MAPPO trained on torch:smax_3m for --mappo-iterations iterations (evaluation and checkpoints
    off); its summary's env steps per second, sampling and updates included."""
    from common.cli import parse_args

    module = importlib.import_module("algos.mappo")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--env", "torch:smax_3m", "--eval-every", "0", "--eval-episodes", "1", "--eval-num-envs", "1",
                "--checkpoint-every", "0", "--run-dir", tmp, "--torch-threads", str(opts.mappo_threads),
                "--cuda" if opts.device.startswith("cuda") else "--no-cuda",
                *(["--num-envs", str(opts.mappo_num_envs)] if opts.mappo_num_envs else []),
                *shlex.split(opts.mappo_flags)]
        args = parse_args(module.Args, argv)
        steps = opts.mappo_iterations * args.num_envs * args.num_steps
        args = dataclasses.replace(args, total_timesteps=steps)
        summary = module.main(args)
    return {"sps": summary["sps"], "num_envs": args.num_envs, "num_steps": args.num_steps, "env_steps": steps,
            "flags": opts.mappo_flags, "bar": MAPPO_SPS_BAR, "met": summary["sps"] >= MAPPO_SPS_BAR}


# ============================================================================ report
def ratio_row(row: dict) -> dict:
    """The row with torch / (faster JAX variant) added, where both sides were measured."""
    jax_best = max((row.get(k) or 0.0) for k in ("jax_step_sps", "jax_scan_sps")) or None
    row["jax_best_sps"] = jax_best
    row["torch_over_jax"] = row["torch_sps"] / jax_best if row.get("torch_sps") and jax_best else None
    return row


def fmt(x, spec=",.0f") -> str:
    return "-" if x is None else format(x, spec)


def verdicts(rows) -> list:
    """The issue's speed bar per map: torch / JAX >= 1 at 1,024 copies; the 64-copy ratio reported."""
    lines = []
    for map_name in dict.fromkeys(r["map"] for r in rows):
        by_e = {r["num_envs"]: r["torch_over_jax"] for r in rows if r["map"] == map_name}
        if by_e.get(1024) is not None:
            met = "met" if by_e[1024] >= 1.0 else "NOT met"
            lines.append(f"{map_name}: torch / JAX at 1,024 copies {by_e[1024]:.3g} (bar >= 1: {met})")
        if by_e.get(64) is not None:
            lines.append(f"{map_name}: torch / JAX at 64 copies {by_e[64]:.3g} (reported)")
    return lines


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--maps", nargs="+", default=list(MAPS), help="SMAX maps to step")
    parser.add_argument("--num-envs", type=int, nargs="+", default=list(NUM_ENVS), help="numbers of copies E")
    parser.add_argument("--only", choices=["torch", "jax"], default=None, help="measure one side only")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each timed window")
    parser.add_argument("--min-iterations", type=int, default=20, help="at least this many env steps per window")
    parser.add_argument("--warmup", type=int, default=10, help="steps (jitted calls) before each timed window")
    parser.add_argument("--device", default="cpu", help="device of the torch port (the JAX side runs on its default)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch CPU threads for the port and MAPPO (1: the port's ops are small, and a second "
                             "thread waiting on a busy core only slows them)")
    parser.add_argument("--mappo-threads", type=int, default=2,
                        help="torch threads of the MAPPO run (its networks' passes over 1,024 copies use both cores)")
    parser.add_argument("--mappo-iterations", type=int, default=10,
                        help="MAPPO iterations on torch:smax_3m (0: skip MAPPO; also skipped with --only jax)")
    parser.add_argument("--mappo-num-envs", type=int, default=1024,
                        help="MAPPO's env copies (0: keep MAPPO's default or its --config preset's)")
    parser.add_argument("--mappo-flags", default="", help="extra algos/mappo.py flags, one quoted string")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.torch_threads)
    if opts.only != "torch":
        import_jax()  # fail now, not after the torch side has run
    if opts.only != "jax":
        from envs import make_env
        from envs.errors import EnvError

        try:
            make_env(f"torch:smax_{opts.maps[0]}", 1, seed=0).close()
        except EnvError as err:
            raise SystemExit(f"error: the torch port cannot be built: {err}\n(measure JaxMARL alone with --only jax)")

    print(f"machine: {machine()}; torch threads {opts.torch_threads}; random legal actions; env steps per second")
    print(f"{'map':<6} {'E':>6} {'torch':>12} {'jax step':>12} {'jax scan':>12} {'torch/jax':>10}")
    rows = []
    for map_name in opts.maps:
        for num_envs in opts.num_envs:
            row = {"map": map_name, "num_envs": num_envs, "torch_sps": None}
            if opts.only != "jax":  # torch first, then JAX at once, so load from elsewhere hits both alike
                row["torch_sps"] = torch_sps(map_name, num_envs, opts)
            if opts.only != "torch":
                row.update(jax_sps(map_name, num_envs, opts))
            rows.append(ratio_row(row))
            print(f"{map_name:<6} {num_envs:>6,d} {fmt(row['torch_sps']):>12} {fmt(row.get('jax_step_sps')):>12} "
                  f"{fmt(row.get('jax_scan_sps')):>12} {fmt(row['torch_over_jax'], '.3g'):>10}", flush=True)
    lines = verdicts(rows)
    print("\n".join(lines))
    mappo = None
    if opts.only != "jax" and opts.mappo_iterations > 0:
        mappo = mappo_sps(opts)
        print(f"MAPPO whole loop on torch:smax_3m ({mappo['num_envs']:,d} copies, {mappo['env_steps']:,d} env steps): "
              f"{mappo['sps']:,.0f} env steps/s (bar >= {MAPPO_SPS_BAR:,d}: {'met' if mappo['met'] else 'NOT met'})")
    result = {"machine": machine(), "device": opts.device, "torch_threads": opts.torch_threads,
              "mappo_threads": opts.mappo_threads,
              "scan_steps": SCAN_STEPS, "rows": rows, "verdicts": lines, "mappo": mappo}
    if opts.only != "torch":
        jax = import_jax()[0]
        result["jax"] = f"jax {jax.__version__} on {jax.devices()[0].platform}"
    if opts.json:
        os.makedirs(os.path.dirname(os.path.abspath(opts.json)), exist_ok=True)
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {opts.json}")
    return result


if __name__ == "__main__":
    main()
