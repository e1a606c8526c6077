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

    python benchmarks/connect_four_tactics.py runs/selfplay/connect_four_torch_cnn/ippo/seed1/* --games 200
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.game_opponents import _c4_board, _drop_row, _winning_columns, win_or_block  # noqa: E402
from benchmarks.learning_selfplay import play  # noqa: E402
from common.run_utils import write_json_atomic  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders of a policy trained on connect four")
    parser.add_argument("--games", type=int, default=200, help="games per seat against win-or-block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rates here (one entry per run)")
    opts = parser.parse_args()
    if opts.games < 1:
        parser.error(f"--games {opts.games}: give at least 1")
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
    if opts.json:
        write_json_atomic(opts.json, {"games": opts.games, "seed": opts.seed, "opponent": "win_or_block",
                                      "runs": out})


if __name__ == "__main__":
    main()
