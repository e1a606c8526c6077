"""Why a connect-four policy loses to win-or-block: its one-move tactics, counted in its own games.

The policy (greedy, as `learning_selfplay.py` scores it) plays --games games in each seat against the
win-or-block player. At each of its moves the position is sorted by what one ply of look-ahead says:

- win: it can make four now; right when it does (any winning column).
- block: it cannot win, and the opponent threatens to make four in exactly one column; right when it
  plays there (two threats lose whatever it plays, so they are not counted).
- quiet: neither; a blunder is a move after which the opponent can make four at once (on top of the
  piece just played, say), counted only where some legal move would not have allowed that.

Win-or-block wins every game in which the policy misses one of these, so the three rates bound how
far a policy is from the bar (`learning_selfplay.py`: 90% won in each seat).

--own-games M counts the same wins and blocks (the policy's greedy move in each position) over M moves
of the policy's own games on `torch:connect_four` (256 copies, both seats sampled from the policy, as
in self-play training), and over M moves from random openings of up to 8 moves (positions its own
play does not lead to): whether the tactics it misses against win-or-block are missed in its own games.

    python benchmarks/connect_four_tactics.py runs/selfplay/connect_four_torch_cnn/ippo/seed1/* --games 200
    python benchmarks/connect_four_tactics.py runs/selfplay/connect_four_torch/ippo/seed1/* --own-games 50000
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.game_opponents import _c4_board, _drop_row, _winning_columns, win_or_block  # noqa: E402
from benchmarks.learning_selfplay import acting_network, play  # noqa: E402
from common.run_utils import write_json_atomic  # noqa: E402
from envs import make_env, parse_env_kwargs  # noqa: E402
from envs.torch_connect_four import ROWS, completing  # noqa: E402


def gives_a_win(board: np.ndarray, col: int) -> bool:
    """After dropping our piece (+1) into `col`, can the opponent (-1) make four at once?"""
    row = _drop_row(board, col)
    board[row, col] = 1
    legal = np.flatnonzero(board[0] == 0)
    threat = bool(_winning_columns(board, legal, -1))
    board[row, col] = 0
    return threat


class Tally:
    """Counts of each kind of position and of the right moves in it, fed one move at a time."""

    def __init__(self):
        self.seen = {"win": 0, "block": 0, "quiet": 0}
        self.right = {"win": 0, "block": 0, "quiet": 0}  # quiet: moves that give no immediate win away

    def __call__(self, obs: np.ndarray, mask: np.ndarray, action: int):
        board, legal = _c4_board(obs), np.flatnonzero(mask)
        wins, threats = _winning_columns(board, legal, 1), _winning_columns(board, legal, -1)
        if wins:
            kind, right = "win", action in wins
        elif len(threats) == 1:
            kind, right = "block", action in threats
        elif threats:
            return  # two threats: lost whatever it plays
        else:
            unsafe = {int(c) for c in legal if gives_a_win(board, int(c))}
            if len(unsafe) == len(legal):
                return  # every move gives a win away: nothing to get right
            kind, right = "quiet", action not in unsafe
        self.seen[kind] += 1
        self.right[kind] += int(right)

    def rates(self) -> dict:
        return {kind: {"positions": n, "right": self.right[kind] / n if n else None} for kind, n in self.seen.items()}


@torch.no_grad()
def own_game_tactics(run: str, moves: int, opening: int = 0, seed: int = 0, copies: int = 256) -> dict:
    """{"win", "block"}: {"positions", "right"} of the policy's greedy move over `moves` moves of games on
    torch:connect_four in which both seats sample from the policy, each game after a random opening of up
    to `opening` moves (0: from the empty board, as in training without openings)."""
    torch.manual_seed(seed)
    kwargs = parse_env_kwargs(json.load(open(os.path.join(run, "args.json")))["env_kwargs"])
    env = make_env("torch:connect_four", copies, seed, {**kwargs, "random_opening": opening})
    net, _ = acting_network(run, env)
    obs, _, mask = env.reset()
    state, starts = net.initial_state(copies), torch.ones(copies, env.n_agents)
    seen, right, rows = {"win": 0, "block": 0}, {"win": 0, "block": 0}, torch.arange(copies)
    for _ in range(-(-moves // copies)):
        dist, state = net(obs[None], state, starts[None], mask[None])
        greedy = dist.mode()[0].gather(1, env.turn[:, None]).squeeze(1)  # the mover's greedy column
        legal = env.height < ROWS
        wins = completing(env.board == (env.turn + 1)[:, None, None], env.height, legal)
        threats = completing(env.board == (2 - env.turn)[:, None, None], env.height, legal)
        single = ~wins.any(-1) & (threats.sum(-1) == 1)  # no win of its own, one threat to block
        for kind, where, good in (("win", wins.any(-1), wins), ("block", single, threats)):
            seen[kind] += int(where.sum())
            right[kind] += int(good[rows, greedy][where].sum())
        step = env.step(dist.sample()[0])
        obs, mask, starts = step.obs, step.action_mask, step.done.float()[:, None].expand(-1, env.n_agents)
    return {kind: {"positions": n, "right": right[kind] / n if n else None} for kind, n in seen.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders of a policy trained on connect four")
    parser.add_argument("--games", type=int, default=200, help="games per seat against win-or-block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--own-games", type=int, default=0, metavar="M",
                        help="also count wins and blocks over M moves of the policy's own sampled games on the torch "
                        "port, and over M moves from random openings")
    parser.add_argument("--json", help="also write the rates here (one entry per run)")
    opts = parser.parse_args()
    if opts.games < 1 or opts.own_games < 0:
        parser.error(f"--games {opts.games} --own-games {opts.own_games}: give at least 1 game and 0 or more moves")
    for run in opts.runs:
        if not os.path.exists(os.path.join(run, "checkpoint.pt")):
            parser.error(f"{run} holds no checkpoint.pt: give the run folders of trained connect-four policies")
        env = json.load(open(os.path.join(run, "args.json")))["env"]
        if env not in ("classic:connect_four", "torch:connect_four"):
            parser.error(f"{run} was trained on {env}: give runs trained on classic:connect_four or torch:connect_four")
    out = {}
    for run in opts.runs:
        out[run] = {}
        for seat in (0, 1):
            tally = Tally()
            result = play(run, "connect_four", seat, win_or_block, opts.games, opts.seed, watch=tally)
            out[run][f"player_{seat}"] = {"result": result, "tactics": tally.rates()}
            line = " | ".join(f"{k} {v['right']:.3f} of {v['positions']}" if v["positions"] else f"{k} -"
                              for k, v in tally.rates().items())
            print(f"{run} player_{seat}: won {result['win']:.3f} | right moves: {line}", flush=True)
        for name, opening in (("own_games", 0), ("random_openings", 8)) if opts.own_games else ():
            out[run][name] = rates = own_game_tactics(run, opts.own_games, opening, opts.seed)
            print(f"{run} {name.replace('_', ' ')}: " + " | ".join(
                f"{k} {v['right']:.3f} of {v['positions']}" for k, v in rates.items() if v["positions"]), flush=True)
    if opts.json:
        write_json_atomic(opts.json, {"games": opts.games, "seed": opts.seed, "opponent": "win_or_block",
                                      "own_game_moves": opts.own_games, "runs": out})


if __name__ == "__main__":
    main()
