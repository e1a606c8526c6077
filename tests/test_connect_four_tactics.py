"""benchmarks/connect_four_tactics.py sorts a mover's positions by one ply of look-ahead (a win to take, a
single threat to block, or neither) and counts the right moves; checked on hand-set boards."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.connect_four_tactics import Tally  # noqa: E402


def board(own, theirs) -> np.ndarray:
    """(6, 7, 2) observation from the mover's side; cells as (row, col), row 5 the bottom."""
    obs = np.zeros((6, 7, 2), np.int8)
    for plane, cells in ((0, own), (1, theirs)):
        for row, col in cells:
            obs[row, col, plane] = 1
    return obs


LEGAL = np.ones(7, np.int8)


def test_wins_blocks_and_blunders_are_told_apart():
    tally = Tally()
    win = board([(5, 0), (5, 1), (5, 2)], [(4, 0), (4, 1), (4, 2)])  # col 3 makes four; theirs needs (5, 3) first
    tally(win, LEGAL, 3)
    tally(win, LEGAL, 4)
    threat = board([(4, 0), (4, 1)], [(5, 0), (5, 1), (5, 2)])  # they make four at col 3 unless it is blocked
    tally(threat, LEGAL, 3)
    tally(threat, LEGAL, 6)
    tally(threat, LEGAL, 5)
    quiet = board([(5, 0), (5, 2)], [(5, 1), (4, 0), (4, 1), (4, 2)])  # col 3 would lift them onto (4, 3)
    tally(quiet, LEGAL, 3)
    tally(quiet, LEGAL, 6)
    rates = tally.rates()
    assert rates["win"] == {"positions": 2, "right": 0.5}
    assert rates["block"] == {"positions": 3, "right": 1 / 3}
    assert rates["quiet"] == {"positions": 2, "right": 0.5}
    tally(board([], [(5, 0), (5, 1), (5, 2), (4, 6), (3, 6), (2, 6)]), LEGAL, 3)  # two threats: not counted
    assert tally.rates() == rates


def test_own_games_count_a_perfect_tactician_right_everywhere(monkeypatch, tmp_path):
    """--own-games: a policy that plays win-or-block's move in every position takes every win and blocks every
    single threat, in its own games and from random openings; a policy that always plays column 0 gets
    only the positions whose win or block is there."""
    import json

    import torch

    import benchmarks.connect_four_tactics as tactics
    from envs.torch_connect_four import win_or_block
    from nets.policy import MaskedCategorical

    class Player:
        def __init__(self, tactician: bool):
            self.tactician = tactician

        def initial_state(self, copies):
            return None

        def __call__(self, obs, state, starts, mask):  # (1, E, N, 84), (1, E, N, 7)
            E, N = obs.shape[1:3]
            if self.tactician:
                column = win_or_block(obs[0].reshape(E * N, -1), mask[0].reshape(E * N, -1)).reshape(E, N)
            else:
                column = torch.zeros(E, N, dtype=torch.long)
            return MaskedCategorical(10.0 * torch.nn.functional.one_hot(column, 7).float()[None], mask.bool()), None

    (tmp_path / "args.json").write_text(json.dumps({"env_kwargs": []}))
    for tactician in (True, False):
        monkeypatch.setattr(tactics, "acting_network", lambda run, env, t=tactician: (Player(t), True))
        for opening in (0, 8):
            rates = tactics.own_game_tactics(str(tmp_path), 3000, opening, seed=1, copies=64)
            assert rates["win"]["positions"] > 20 and rates["block"]["positions"] > 20, rates
            if tactician:
                assert rates["win"]["right"] == 1.0 and rates["block"]["right"] == 1.0, rates
            else:
                assert 0.0 < rates["win"]["right"] < 0.6 and rates["block"]["right"] < 0.6, rates


def test_a_run_trained_from_random_openings_is_scored_from_the_empty_board(tmp_path):
    """The training openings are the torch port's alone: learning_selfplay.play scores the run on PettingZoo's game
    (which takes no such argument) and own_game_tactics counts its real network's moves."""
    import glob
    import subprocess

    from benchmarks.connect_four_tactics import own_game_tactics
    from benchmarks.game_opponents import GAMES
    from benchmarks.learning_selfplay import play
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "algos/ippo.py", "--env", "torch:connect_four", "--env-kwargs",
                          "random_opening=4", "--num-envs", "8", "--num-steps", "16", "--total-timesteps", "256",
                          "--eval-every", "0", "--run-dir", str(tmp_path)], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run, = glob.glob(str(tmp_path / "ippo__*"))
    rates = play(run, "connect_four", 1, GAMES["connect_four"][1]["random"], 4, 0, copies=2)
    assert abs(sum(rates.values()) - 1) < 1e-9
    counted = own_game_tactics(run, 2000, opening=8, copies=32)
    assert counted["win"]["positions"] > 0 and 0 <= counted["win"]["right"] <= 1
