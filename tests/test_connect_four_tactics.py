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
