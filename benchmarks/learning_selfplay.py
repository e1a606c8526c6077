"""Self-play on turn-based games, scored against scripted players (issue 28's bars).

One policy plays both seats (the files' default `--share-params all`: the seat's one-hot tells it
which side it is on), learned by MAPPO, IPPO or IQL from each seat's own moves (common/turns.py). After
training, the greedy policy plays --games games in each seat against every scripted player of the
game (benchmarks/game_opponents.py): tic-tac-toe's perfect minimax player (`perfect`, one fixed
line of play, and `perfect_varied`, a random move among those that keep the game's result, so that
the games differ) and a random one; connect four's win-or-block player, alpha-beta at depths 2 and
4, and a random one. A game's result is the policy's seat's return: +1 win, 0 draw, -1 loss.

    python benchmarks/learning_selfplay.py --game tictactoe --algo ippo --seeds 1 2 3 --total-timesteps 2000000 -- --gamma 0.99
    python benchmarks/learning_selfplay.py --game tictactoe --algo ippo --report
    python benchmarks/learning_selfplay.py --game connect_four --torch-port --seeds 1 --total-timesteps 20000000 -- --gamma 0.99

With --league P the seeds train through `run.py league` instead: one policy per seat, P phases that
alternate which seat learns (--total-timesteps / P env steps each, from its own last run) against a
snapshot drawn from the other seat's pool (random legal moves, then its past runs), or with
--league-mix M against M of them at once (its env copies split among them); each seat's last run is
scored in its own seat, and every phase's learner plays --phase-games games in its seat against the
bar's scripted player (how play moved from phase to phase).

    python benchmarks/learning_selfplay.py --game connect_four --torch-port --league 20 --total-timesteps 20000000
    python benchmarks/learning_selfplay.py --game connect_four --torch-port --league 20 --league-mix 4 \
        --league-scripted win_or_block --total-timesteps 20000000   # the scripted player in both pools from the start

Bars: tic-tac-toe, at most 2% of 1,000 games lost to the perfect player in each seat; connect four,
at least 90% won against win-or-block in each seat. Every finished seed writes its JSON under
--out-dir at once, and a later call skips the seeds already there.
"""
import argparse
import glob
import importlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks.game_opponents import GAMES  # noqa: E402
from common.cli import saved_args  # noqa: E402
from common.run_utils import episode_quota, greedy_eval, load_checkpoint, write_json_atomic  # noqa: E402
from envs import make_env, parse_env_kwargs  # noqa: E402

BARS = {"tictactoe": ("perfect_varied", "loss", 0.02), "connect_four": ("win_or_block", "win", 0.90)}


def acting_network(run_path: str, env):
    """The run's own acting network, built by its algorithm file from its saved args."""
    ckpt = load_checkpoint(run_path)
    module = importlib.import_module(f"algos.{ckpt['algo']}")
    saved = module.Args(**saved_args(module.Args, ckpt["args"]))
    net = module.acting_policy(saved, env, ckpt, torch.device("cpu"))
    return net.requires_grad_(False), greedy_eval(saved)


def view(obs: np.ndarray, board: tuple) -> np.ndarray:
    """One seat's observation as the game's own board planes (what a scripted player reads)."""
    return obs.reshape(-1)[: int(np.prod(board))].reshape(board).astype(np.int8)


@torch.no_grad()
def play(run_path: str, game: str, seat: int, opponent, games: int, seed: int, copies: int = 100,
         watch=None) -> dict:
    """`games` games of the run's policy in seat `seat` against `opponent` (obs, mask, rng) -> action,
    in `copies` env copies at once: {"win", "draw", "loss"} rates of the policy's seat. Each copy
    plays an equal share of the games: counting the first `games` to end would over-count short ones
    (quick losses, say). `watch(board, mask, action)`, if given, sees each of the policy's moves."""
    saved = json.load(open(os.path.join(run_path, "args.json")))
    kwargs = parse_env_kwargs(saved["env_kwargs"])
    kwargs.pop("random_opening", None)  # the torch port's training openings: scored from the empty board
    env = make_env(f"classic:{game}", min(copies, games), seed, kwargs)  # the observations as trained
    net, greedy = acting_network(run_path, env)
    board = env.envs[0].observation_space(env.agents[1 - seat])["observation"].shape
    rng = np.random.default_rng(seed)
    obs, _, mask = env.reset()
    state, starts = net.initial_state(env.num_envs), torch.ones(env.num_envs, env.n_agents)
    quota = episode_quota(env.num_envs, games)
    results = []
    while quota.sum() > 0:
        dist, state = net(torch.as_tensor(obs)[None], state, starts[None], torch.as_tensor(mask)[None])
        actions = (dist.mode() if greedy else dist.sample())[0].numpy().copy()  # (E, N)
        for i in np.flatnonzero(env.acting[:, 1 - seat]):  # the scripted player's moves
            actions[i, 1 - seat] = opponent(view(obs[i, 1 - seat], board), mask[i, 1 - seat].astype(np.int8), rng)
        if hasattr(net, "remember"):  # a Q-network that reads its last action (IQL's default) is told it
            state = net.remember(state, torch.as_tensor(actions))
        for i in np.flatnonzero(env.acting[:, seat] & (quota > 0)) if watch else ():
            watch(view(obs[i, seat], board), mask[i, seat].astype(np.int8), int(actions[i, seat]))
        step = env.step(actions)
        for i in np.flatnonzero(step.done & (quota > 0)):
            results.append(step.episode_return[i, seat])
            quota[i] -= 1
        obs, mask, starts = step.obs, step.action_mask, torch.as_tensor(step.done, dtype=torch.float)[:, None]
        starts = starts.expand(-1, env.n_agents)
    outcome = np.sign(np.array(results))
    env.close()
    return {"win": float((outcome > 0).mean()), "draw": float((outcome == 0).mean()),
            "loss": float((outcome < 0).mean())}


def variant_suffix(opts) -> str:
    """"_torch" for runs trained on the game's torch port, "_league<P>" for leagues ("_league<P>mix<M>" with
    --league-mix, then "_pool-<names>" with --league-scripted), "_<tag>" with --tag: their folders and results
    are kept apart."""
    scripted = "-".join(opts.league_scripted) if opts.league else ""
    return ("_torch" if opts.torch_port else "") + (f"_league{opts.league}" if opts.league else "") + (
        f"mix{opts.league_mix}" if opts.league and opts.league_mix > 1 else "") + (
        f"_pool-{scripted}" if scripted else "") + (f"_{opts.tag}" if opts.tag else "")


def seed_folder(opts, seed: int) -> str:
    """Where one seed's run (or league) is trained."""
    return os.path.join(opts.run_dir, opts.game + variant_suffix(opts), opts.algo, f"seed{seed}")


def train_env(opts) -> str:
    return f"torch:{opts.game}" if opts.torch_port else f"classic:{opts.game}"


def train_league(opts, seed: int, extra) -> list:
    """Train one seed as a league of the two seats (`run.py league`); each seat's last run, in seat order."""
    folder = seed_folder(opts, seed)
    seats = GAMES[opts.game][0]().possible_agents
    state_path = os.path.join(folder, "league.json")
    done = os.path.exists(os.path.join(folder, "crossplay", "crossplay.json")) and os.path.exists(state_path)
    if not done:
        command = [sys.executable, "run.py", "league", "--env", train_env(opts),
                   "--side", *[f"{s}={opts.algo}" for s in seats],
                   "--phases", str(opts.league), "--phase-steps", str(opts.total_timesteps // opts.league),
                   "--opponents", opts.league_opponents, "--mix", str(opts.league_mix), "--games", "100",
                   "--seed", str(seed), "--league-dir", folder,
                   *(["--pool", *[f"{s}=scripted:{n}" for s in seats for n in opts.league_scripted]]
                     if opts.league_scripted else []),
                   "--", "--torch-threads", str(opts.torch_threads), *extra]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=True, cwd=REPO)
    with open(state_path) as f:
        state = json.load(f)
    return [state["last"][f"{seat}/{opts.algo}"] for seat in seats]


def train(opts, seed: int, extra) -> str:
    """Train one seed with the algorithm file's own command line; the run folder."""
    run_dir = seed_folder(opts, seed)
    done = glob.glob(os.path.join(run_dir, "*", "summary.json"))
    if not done or json.load(open(done[0])).get("status") != "finished":
        command = [sys.executable, f"algos/{opts.algo}.py", "--env", train_env(opts), "--seed", str(seed),
                   "--total-timesteps", str(opts.total_timesteps), "--run-dir", run_dir,
                   "--torch-threads", str(opts.torch_threads), *extra]
        if done:  # an interrupted run: continue it from its folder's checkpoint
            command += ["--resume", os.path.dirname(done[0])]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=True, cwd=REPO)
        done = glob.glob(os.path.join(run_dir, "*", "summary.json"))
    return os.path.dirname(done[0])


def score(opts, seed: int, runs: list) -> dict:
    """Every seat's run (the same run in both for self-play) against every scripted player, in its own seat."""
    env_fn, opponents = GAMES[opts.game]
    seats = env_fn().possible_agents
    if opts.league:  # the league's time: every phase's run of both seats
        pattern = os.path.join(seed_folder(opts, seed), "phase_*", "**", "summary.json")
        summaries = [json.load(open(p)) for p in glob.glob(pattern, recursive=True)]
        seconds = sum(s["wall_time_s"] for s in summaries)
        sps = sum(s["global_step"] for s in summaries) / seconds
    else:
        summary = json.load(open(os.path.join(runs[0], "summary.json")))
        seconds, sps = summary["wall_time_s"], summary["sps"]
    out = {"game": opts.game, "algo": opts.algo, "seed": seed, "total_timesteps": opts.total_timesteps,
           "run": runs[0] if runs[0] == runs[1] else runs, "args": json.load(open(os.path.join(runs[0], "args.json"))),
           "train_seconds": seconds, "sps": sps, "games": opts.games, "results": {}}
    if opts.league:
        out.update(league=opts.league, league_opponents=opts.league_opponents, league_mix=opts.league_mix)
    for name, opponent in opponents.items():
        for seat, agent in enumerate(seats):
            rates = play(runs[seat], opts.game, seat, opponent, opts.games, 1000 + seed)
            out["results"][f"{name}/{agent}"] = rates
            print(f"seed {seed}: as {agent} against {name}: " + "  ".join(f"{k} {v:.3f}" for k, v in rates.items()),
                  flush=True)
    if opts.league:
        out.update(phase_games=opts.phase_games, phases=score_phases(opts, seed))
    return out


def score_phases(opts, seed: int) -> list:
    """Every phase's learner in its own seat against the bar's scripted player (--phase-games games):
    how the league's play moved from phase to phase, and what each kind of opponent did to it."""
    env_fn, opponents = GAMES[opts.game]
    seats = env_fn().possible_agents
    name, key, _ = BARS[opts.game]
    with open(os.path.join(seed_folder(opts, seed), "league.json")) as f:
        phases = json.load(f)["phases"]
    rows = []
    for phase in phases:
        for plan in phase["plan"]:
            rates = play(plan["run"], opts.game, seats.index(phase["side"]), opponents[name], opts.phase_games,
                         2000 + seed)
            rows.append({"phase": phase["phase"], "side": phase["side"], "opponent": plan["opponent"],
                         "run": plan["run"], name: rates})
            print(f"seed {seed}: phase {phase['phase']}, {phase['side']} after {plan['opponent']}: against {name} "
                  f"{key} {rates[key]:.3f}", flush=True)
    return rows


def report(opts) -> list:
    pattern = os.path.join(opts.out_dir, f"{opts.game}_{opts.algo}_*k{variant_suffix(opts)}_seed*.json")
    rows = [json.load(open(p)) for p in sorted(glob.glob(pattern))]
    if not rows:
        print("no results yet")
        return rows
    opponent, key, bar = BARS[opts.game]
    print(f"{opts.game}, {opts.algo}: {len(rows)} seed(s), {rows[0]['games']} games per seat and opponent")
    print("| opponent | policy's seat | " + " | ".join(f"seed {r['seed']} (win / draw / loss)" for r in rows) + " | mean loss |")
    print("|---|---|" + "---|" * len(rows) + "---|")
    for matchup in rows[0]["results"]:
        cells = [r["results"][matchup] for r in rows]
        name, seat = matchup.split("/")
        print(f"| {name} | {seat} | " + " | ".join(f"{c['win']:.3f} / {c['draw']:.3f} / {c['loss']:.3f}" for c in cells)
              + f" | {np.mean([c['loss'] for c in cells]):.3f} |")
    for seat in {m.split('/')[1] for m in rows[0]["results"]}:
        values = [r["results"][f"{opponent}/{seat}"][key] for r in rows]
        ok = all(v <= bar for v in values) if key == "loss" else all(v >= bar for v in values)
        print(f"bar, {seat} against {opponent}: {key} {'<=' if key == 'loss' else '>='} {bar} in every seed: "
              f"{', '.join(f'{v:.3f}' for v in values)} -> {'met' if ok else 'not met'}")
    for r in rows:
        if "phases" in r:
            print(f"seed {r['seed']}, every phase's learner against {opponent} ({key}, {r['phase_games']} games): "
                  + ", ".join(f"{p['phase']} {p['side']} {p[opponent][key]:.2f}" for p in r["phases"]))
    return rows


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", choices=sorted(GAMES), default="tictactoe")
    parser.add_argument("--algo", choices=["ippo", "mappo", "iql"], default="ippo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--total-timesteps", type=int, default=2_000_000)
    parser.add_argument("--games", type=int, default=1000, help="games per seat and opponent")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--torch-port", action="store_true",
                        help="train on the game's torch port (torch:connect_four: the same game, every copy in one "
                             "batched step); scored on PettingZoo's game as always")
    parser.add_argument("--league", type=int, default=0, metavar="PHASES",
                        help="train each seed as a league of PHASES phases (run.py league: one policy per seat, "
                             "alternating, against snapshots of the other) instead of one policy playing itself")
    parser.add_argument("--league-opponents", choices=["uniform", "latest", "prioritised"], default="uniform",
                        help="with --league: how a learner's opponent is drawn from the other seat's pool")
    parser.add_argument("--league-mix", type=int, default=1, metavar="M",
                        help="with --league: each learner faces M snapshots at once, its env copies split among them "
                             "(run.py league --mix)")
    parser.add_argument("--league-scripted", nargs="+", default=[], metavar="NAME",
                        help="with --league: scripted players of the game in both seats' pools from the start, beside "
                             "random (run.py league --pool SEAT=scripted:NAME; connect four: win_or_block; "
                             "tic-tac-toe: perfect)")
    parser.add_argument("--phase-games", type=int, default=100,
                        help="with --league: games of every phase's learner against the bar's scripted player")
    parser.add_argument("--tag", default="",
                        help="a name for the flags after --, kept in the run folders' and result files' names "
                             "(cnn for --env-kwargs board=image, say), so that other settings do not meet the "
                             "same files")
    parser.add_argument("--run-dir", default="runs/selfplay")
    parser.add_argument("--out-dir", default="benchmarks/results/selfplay")
    parser.add_argument("--report", action="store_true", help="print the table of what --out-dir holds")
    opts = parser.parse_args(argv)
    if opts.league < 0 or (opts.league and opts.total_timesteps < opts.league):
        parser.error(f"--league {opts.league}: give a number of phases from 1 to --total-timesteps, or 0 for self-play")
    if opts.league_scripted and not opts.league:
        parser.error("--league-scripted puts scripted players in a league's pools: give --league PHASES too")
    if opts.league_mix < 1:
        parser.error(f"--league-mix {opts.league_mix}: give 1 or more snapshots")
    if opts.phase_games < 1:
        parser.error(f"--phase-games {opts.phase_games}: give 1 or more games")
    if opts.tag and not re.fullmatch(r"[A-Za-z0-9-]+", opts.tag):
        parser.error(f"--tag {opts.tag!r}: letters, digits and '-' only (it becomes part of file names)")
    if opts.torch_port and opts.game != "connect_four":
        parser.error(f"--torch-port: {opts.game} has no torch port; connect_four has (torch:connect_four)")
    if not opts.report:
        os.makedirs(opts.out_dir, exist_ok=True)
        for seed in opts.seeds:
            name = f"{opts.game}_{opts.algo}_{opts.total_timesteps // 1000}k{variant_suffix(opts)}_seed{seed}.json"
            path = os.path.join(opts.out_dir, name)
            if os.path.exists(path):
                with open(path) as f:
                    saved = json.load(f).get("extra_flags", [])
                if saved != extra:
                    raise SystemExit(f"{path} was made with the flags {' '.join(saved) or '(none)'} after --, not "
                                     f"{' '.join(extra) or '(none)'}: give these settings a --tag of their own")
                continue
            runs = train_league(opts, seed, extra) if opts.league else [train(opts, seed, extra)] * 2
            result = score(opts, seed, runs)
            result["extra_flags"] = extra
            write_json_atomic(path, result)
    return report(opts)


if __name__ == "__main__":
    main()
