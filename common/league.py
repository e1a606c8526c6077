"""Matches between runs, cross-play tables and Elo ratings: any run's policy in any side of an env.

A *member* is a finished run (any algorithm: its own file builds its acting network, as
`--load-group` does), `random` (uniformly random legal actions) or a scripted player of the game
(`scripted:win_or_block` on connect four, `scripted:perfect` on tic-tac-toe: common/scripted.py). A
*side* is one of the env's groups: the seats of a turn-based game (`player_1`, `player_2`), or
`adversary` and `agent` in simple_tag. A member plays the sides it learned (its `--train-groups`, or
every side it did not load from another run). `crossplay` plays every member of side 0 against
every member of side 1, `games` games per pairing (each pairing in both seat orders when members
play both sides), and `elo` fits ratings to the results:

    table = crossplay({"a": "runs/a", "b": "runs/b", "random": RANDOM}, games=200)
    ratings = elo(table)   # {"a/player_1": (rating, low, high), ...}, 95% bootstrap intervals

A game's outcome for side 0: in a zero-sum game (every game's returns sum to 0) the sign of side
0's return; otherwise (simple_tag) whether side 0's return is above or below the median of side 0's
returns over the whole table (equal: a draw), so that ratings compare members on one scale.
"""
import json
import os
from itertools import product
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from common.cli import ConfigError
from common.groups import (RANDOM, LoadedPolicy, ScriptedPolicy, agent_names, assign_groups, is_fixed_player,
                           loaded_run)
from common.scripted import SCRIPTED, scripted_player
from common.run_utils import episode_quota, load_checkpoint
from common.turns import check_turns
from envs import make_env, parse_env_kwargs


def run_sides(path: str) -> dict:
    """What a run can play: {"env", "env_kwargs", "algo", "sides": the groups it learned}."""
    ckpt = load_checkpoint(path)
    args = ckpt["args"]
    if "agents" not in ckpt:
        raise ConfigError(f"{path}: the checkpoint records no agents (written before groups existed); train it again")
    if "trained_groups" in ckpt:
        learned = list(ckpt["trained_groups"])
    else:  # written before checkpoints recorded it: a side loaded from another run is taken as not its own
        loaded = {pair.partition("=")[0] for pair in args.get("load_group", ())}
        learned = list(args.get("train_groups") or [g for g in dict.fromkeys(ckpt["agent_groups"]) if g not in loaded])
    return {"env": str(args["env"]), "env_kwargs": tuple(sorted(args.get("env_kwargs", ()))), "algo": ckpt["algo"],
            "sides": learned}


def check_members(members: Dict[str, str]) -> dict:
    """Every run on one env with the same arguments; {"env", "env_kwargs", "sides": {member: sides}}.
    A mismatch fails naming the runs, before anything is played or written."""
    runs = {name: run_sides(path) for name, path in members.items() if not is_fixed_player(path)}
    if not runs:
        raise ConfigError("a cross-play needs at least one run (random and scripted players alone play nobody)")
    first = next(iter(runs))
    for name, run in runs.items():
        for key in ("env", "env_kwargs"):
            if run[key] != runs[first][key]:
                raise ConfigError(f"runs {first} and {name} differ in {key} ({runs[first][key]} against {run[key]}): "
                                  "a cross-play is between runs of one env")
    return {"env": runs[first]["env"], "env_kwargs": runs[first]["env_kwargs"],
            "sides": {name: runs[name]["sides"] if name in runs else None for name in members}}


@torch.no_grad()
def play(env_name: str, env_kwargs: Sequence[str], lineup: Dict[str, str], games: int, seed: int = 0,
         copies: int = 50, max_steps: int = 10_000) -> np.ndarray:
    """`games` episodes with side `group` played by `lineup[group]` (a run path, RANDOM or a scripted
    player `scripted:NAME`; sides not in the lineup play at random). Returns (games, G): each side's
    return (its agents' rewards summed over the episode), sides in the env's group order. Each copy
    plays an equal share of the games (counting the first to end would over-count short ones). An
    episode still going after `max_steps` steps (Go between players that never pass) stops the match with an error."""
    env = make_env(env_name, min(copies, games), seed, parse_env_kwargs(env_kwargs))
    agents = agent_names(env)
    names, group_of_agent = assign_groups(agents, (), env_name)
    policies = []
    for group, path in lineup.items():
        if path.startswith(SCRIPTED):
            policies.append(ScriptedPolicy(path, group, env_name, env, group_of_agent, names, torch.device("cpu")))
        elif path != RANDOM:
            ckpt = loaded_run(path, group, env_name, agents, names, group_of_agent)
            policies.append(LoadedPolicy(group, path, ckpt, env, group_of_agent, names, torch.device("cpu"),
                                         env_kwargs))
    side_of_agent = torch.nn.functional.one_hot(torch.as_tensor(group_of_agent), len(names)).float()  # (N, G)
    rng = np.random.default_rng(seed)
    obs, _, mask = env.reset()
    E = env.num_envs
    states = [p.initial_state(E) for p in policies]
    starts = torch.ones(E, len(agents))
    results: List[np.ndarray] = []
    length = np.zeros(E, np.int64)
    quota = episode_quota(E, games)
    while quota.sum() > 0:
        if length.max() > max_steps:
            raise ConfigError(f"{env_name}: an episode of {' against '.join(lineup.values())} has gone on for "
                              f"{max_steps} steps without ending (policies that never pass, in Go?); the cross-play "
                              "stops here")
        obs_t = torch.as_tensor(obs).cpu()
        mask_t = None if mask is None else torch.as_tensor(mask).cpu()
        actions = torch.as_tensor(env.sample_actions(rng)).cpu()
        for k, policy in enumerate(policies):
            theirs, states[k] = policy.act(obs_t, states[k], starts, mask_t)
            actions = torch.where(policy.rows(actions), theirs.to(actions.dtype), actions)
        step = env.step(actions)
        done = torch.as_tensor(step.done).cpu().bool()
        length = np.where(done.numpy(), 0, length + 1)
        counted = done.numpy() & (quota > 0)
        if counted.any():
            returns = torch.as_tensor(step.episode_return).cpu().float()[counted] @ side_of_agent  # (ended, G)
            results += list(returns.numpy())
            quota[counted] -= 1
        obs, mask, starts = step.obs, step.action_mask, done.float()[:, None].expand(E, len(agents))
    env.close()
    return np.stack(results)


def env_sides(env_name: str, env_kwargs: Sequence[str] = (), algos: Sequence[str] = ()) -> List[str]:
    """The env's sides (its default groups), from one copy of it; in a turn-based game, each of
    `algos` must be a file that learns from each agent's moves (`check_turns`)."""
    probe = make_env(env_name, 1, 0, parse_env_kwargs(env_kwargs))
    try:
        for algo in algos:
            check_turns(probe, algo, env_name)
        return assign_groups(agent_names(probe), (), env_name)[0]
    finally:
        probe.close()


def crossplay(members: Dict[str, str], games: int, seed: int = 0, log=print) -> dict:
    """Every member that plays side 0 against every member that plays side 1 (random and scripted
    players play both), `games` episodes each, in an env of two sides. Returns the table: {"env", "env_kwargs",
    "sides", "members", "cells": [{"side_0": member, "side_1": member, "returns": (games, 2)}]}."""
    info = check_members(members)
    for path in members.values():
        if path.startswith(SCRIPTED):
            scripted_player(path, info["env"])  # a player of another game fails before anything is played
    sides = env_sides(info["env"], info["env_kwargs"])
    if len(sides) != 2:
        raise ConfigError(f"{info['env']} has {len(sides)} sides ({', '.join(sides)}); a cross-play table is between "
                          "two sides")
    players = [[m for m, s in info["sides"].items() if s is None or side in s] for side in sides]
    for m, s in info["sides"].items():
        if s is not None and not set(s) & set(sides):
            log(f"{m} plays in no cross-play pairing: it learned none of the sides {', '.join(sides)}")
    for side, those in zip(sides, players):
        if not those:
            raise ConfigError(f"no member plays {side}: the runs learned {info['sides']}")
    cells = []
    for a, b in product(*players):
        returns = play(info["env"], info["env_kwargs"], {sides[0]: members[a], sides[1]: members[b]}, games, seed)
        cells.append({"side_0": a, "side_1": b, "returns": returns.tolist()})
        log(f"{a} ({sides[0]}) against {b} ({sides[1]}): mean returns {returns.mean(0).round(2).tolist()}")
    return {"env": info["env"], "env_kwargs": list(info["env_kwargs"]), "sides": sides,
            "members": {m: members[m] for m in members}, "cells": cells}


def outcomes(table: dict) -> List[np.ndarray]:
    """Per cell, side 0's score in each game: 1 win, 0.5 draw, 0 loss (see the module docstring)."""
    returns = [np.asarray(c["returns"]) for c in table["cells"]]
    zero_sum = all(np.allclose(r.sum(1), 0.0, atol=1e-6) for r in returns)
    if zero_sum:
        return [0.5 + 0.5 * np.sign(r[:, 0]) for r in returns]
    median = np.median(np.concatenate([r[:, 0] for r in returns]))
    return [0.5 + 0.5 * np.sign(r[:, 0] - median) for r in returns]


def fit_ratings(pairs: np.ndarray, scores: np.ndarray, n: int, prior: float = 400.0, steps: int = 200) -> np.ndarray:
    """Elo ratings (mean 1000) maximising the Bradley-Terry likelihood of `scores` (per game, the
    first player's 1 / 0.5 / 0) for `pairs` (games, 2) of player indices, with a Gaussian prior of
    sd `prior` around the mean (so a player who won every game still gets a finite rating).
    Newton steps on the concave log-likelihood."""
    k = np.log(10.0) / 400.0
    r = np.zeros(n)
    for _ in range(steps):
        d = k * (r[pairs[:, 0]] - r[pairs[:, 1]])
        p = 1.0 / (1.0 + np.exp(-d))
        g = np.zeros(n)
        np.add.at(g, pairs[:, 0], k * (scores - p))
        np.add.at(g, pairs[:, 1], -k * (scores - p))
        g -= r / prior ** 2
        w = k * k * p * (1 - p)
        h = np.zeros((n, n))
        np.add.at(h, (pairs[:, 0], pairs[:, 0]), -w)
        np.add.at(h, (pairs[:, 1], pairs[:, 1]), -w)
        np.add.at(h, (pairs[:, 0], pairs[:, 1]), w)
        np.add.at(h, (pairs[:, 1], pairs[:, 0]), w)
        h -= np.eye(n) / prior ** 2
        step = np.linalg.solve(h, g)
        r -= step
        if np.abs(step).max() < 1e-6:
            break
    return r - r.mean() + 1000.0


def elo(table: dict, samples: int = 200, seed: int = 0) -> Dict[str, tuple]:
    """{"member/side": (rating, low, high)}: Elo ratings of every (member, side) fitted to the
    table's games, with a 95% interval from `samples` bootstrap resamples of each cell's games."""
    sides = table["sides"]
    players = sorted({f"{c['side_0']}/{sides[0]}" for c in table["cells"]}
                     | {f"{c['side_1']}/{sides[1]}" for c in table["cells"]})
    index = {p: i for i, p in enumerate(players)}
    # A pairing whose games are all one game (greedy players in a game without chance) is one game of evidence.
    scores = [s[:1] if np.all(np.asarray(c["returns"]) == np.asarray(c["returns"])[0]) else s
              for c, s in zip(table["cells"], outcomes(table))]
    pairs = [np.tile([index[f"{c['side_0']}/{sides[0]}"], index[f"{c['side_1']}/{sides[1]}"]], (len(s), 1))
             for c, s in zip(table["cells"], scores)]
    rating = fit_ratings(np.concatenate(pairs), np.concatenate(scores), len(players))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(samples):
        picks = [rng.integers(len(s), size=len(s)) for s in scores]
        draws.append(fit_ratings(np.concatenate([p[i] for p, i in zip(pairs, picks)]),
                                 np.concatenate([s[i] for s, i in zip(scores, picks)]), len(players), steps=50))
    low, high = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
    return {p: (float(rating[i]), float(low[i]), float(high[i])) for p, i in index.items()}


def summary_rows(table: dict) -> List[dict]:
    """One row per cell: the members, games, each side's mean return, side 0's wins, draws, losses."""
    rows = []
    for cell, score in zip(table["cells"], outcomes(table)):
        returns = np.asarray(cell["returns"])
        rows.append({"side_0": cell["side_0"], "side_1": cell["side_1"], "games": len(score),
                     f"return_{table['sides'][0]}": float(returns[:, 0].mean()),
                     f"return_{table['sides'][1]}": float(returns[:, 1].mean()),
                     "win": float((score == 1).mean()), "draw": float((score == 0.5).mean()),
                     "loss": float((score == 0).mean())})
    return rows


def member_name(path: str, taken: Optional[set] = None) -> str:
    """A short name for a run folder: its label and seed (`mappo_s1`), made unique."""
    parts = os.path.basename(os.path.normpath(path)).split("__")
    name = f"{parts[0]}_s{parts[2]}" if len(parts) >= 3 else parts[0]
    taken = taken if taken is not None else set()
    base, k = name, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


# ---------------------------------------------------------------------------------------------- leagues
def league_sides(entries: Sequence[str], env_name: str) -> Dict[str, List[str]]:
    """`--side adversary=mappo,maddpg --side agent=qmix` -> {"adversary": ["mappo", "maddpg"], "agent": ["qmix"]},
    checked against the env's two sides and the algorithm files."""
    algos = dict.fromkeys(a for entry in entries for a in entry.partition("=")[2].split(",") if a)
    sides = env_sides(env_name, algos=algos)  # a turn-based game: only the files that learn from moves
    learners = {}
    for entry in entries:
        side, sep, algos = entry.partition("=")
        if not sep or not algos:
            raise ConfigError(f"--side takes SIDE=ALGO[,ALGO...] (e.g. adversary=mappo,qmix), got {entry!r}")
        if side not in sides:
            raise ConfigError(f"--side {entry}: {env_name} has the sides {', '.join(sides)}")
        learners[side] = algos.split(",")
        if len(set(learners[side])) < len(learners[side]):
            raise ConfigError(f"--side {entry}: an algorithm appears twice; a side has one learner per algorithm")
    if len(sides) != 2 or set(learners) != set(sides):
        raise ConfigError(f"a league trains both sides of an env of two: give --side for each of "
                          f"{', '.join(sides)} ({env_name})")
    return learners  # in the order given: phase 1 trains the first


def open_league(path: str, settings: dict, seeded: Dict[str, List[str]]) -> dict:
    """The league's state, kept in `path` (league.json): its settings, every side's pool of frozen
    snapshots (random first, then `seeded` runs, then the learners' snapshots), every learner's last
    run and every phase's plan and runs. A league.json made with other settings is an error."""
    if os.path.isfile(path):
        with open(path) as f:
            state = json.load(f)
        if state["settings"] != settings:
            changed = {k: (state["settings"].get(k), v) for k, v in settings.items() if state["settings"].get(k) != v}
            raise ConfigError(f"{path} holds a league with other settings ({changed}); use another --league-dir")
        return state
    pool = {side: [{"name": RANDOM, "path": RANDOM, "phase": 0}]
            + [{"name": member_name(p), "path": p, "phase": 0} for p in seeded.get(side, [])]
            for side in settings["sides"]}
    return {"settings": settings, "pool": pool, "last": {}, "phases": []}


def opponent_weights(scores: Sequence[float], how: str) -> np.ndarray:
    """Sampling weights over the pool: uniform; latest (the newest snapshot only); or prioritised
    by the learner's score against each (1 win .. 0 loss): (1 - score)^2, floored at 0.05, so the
    opponents it loses to come up most (prioritised fictitious self-play, Vinyals et al. 2019)."""
    n = len(scores)
    if how == "uniform":
        weights = np.ones(n)
    elif how == "latest":
        weights = np.eye(n)[-1]
    else:
        weights = np.maximum((1.0 - np.asarray(scores, dtype=float)) ** 2, 0.05)
    return weights / weights.sum()


def learner_scores(env_name: str, env_kwargs: Sequence[str], sides: Sequence[str], side: str, learner: str,
                   pool: Sequence[dict], games: int, seed: int) -> List[float]:
    """The score of `learner` (a run playing `side`) against every pool member of the other side,
    from `games` episodes each: wins + draws / 2 in a zero-sum game; otherwise its mean return
    rescaled over the pool (1 best, 0 worst)."""
    other = next(s for s in sides if s != side)
    column = list(sides).index(side)
    returns = [play(env_name, env_kwargs, {side: learner, other: m["path"]}, games, seed) for m in pool]
    if all(np.allclose(r.sum(1), 0.0, atol=1e-6) for r in returns):
        return [float((0.5 + 0.5 * np.sign(r[:, column])).mean()) for r in returns]
    means = np.array([r[:, column].mean() for r in returns])
    span = means.max() - means.min()
    return list((means - means.min()) / span) if span > 0 else [0.5] * len(means)
