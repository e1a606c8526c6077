"""Scripted board-game opponents (benchmarks/game_opponents.py) against the real PettingZoo envs.

Tic-tac-toe: the minimax player is checked exhaustively on this file's own board (a tuple of nine
marks in action order, 1 for player_1, 2 for player_2), and a first test proves that board and its
observations are exactly what `tictactoe_v3` shows. Connect four: wins and blocks in positions
played through `connect_four_v3`, judged by the env itself (the game is replayed with each candidate move),
the search against an unpruned one, and strength against a random player. Every game goes through
`play_game`, which raises on an action outside the mask.
"""
import functools
import os
import sys

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, tictactoe_v3

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import game_opponents as go  # noqa: E402

# ----------------------------------------------------------------------------------------------- tic-tac-toe
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
EMPTY = (0,) * 9


def winner(board: tuple) -> int:
    """1 or 2 for the player with a line, else 0."""
    for line in LINES:
        if board[line[0]] != 0 and board[line[0]] == board[line[1]] == board[line[2]]:
            return board[line[0]]
    return 0


def over(board: tuple) -> bool:
    return winner(board) != 0 or 0 not in board


def play(board: tuple, action: int, mover: int) -> tuple:
    return board[:action] + (mover,) + board[action + 1:]


def observe(board: tuple, mover: int):
    """What tictactoe_v3 shows `mover` (1 or 2) at its turn: (obs (3, 3, 2), mask (9,))."""
    marks = np.array(board).reshape(3, 3)
    obs = np.stack([marks == mover, marks == 3 - mover], axis=2).astype(np.int8)
    return obs, (np.array(board) == 0).astype(np.int8)


def perfect(board: tuple, mover: int) -> int:
    return go.perfect_tictactoe(*observe(board, mover))


@functools.cache
def solve(board: tuple, mover: int) -> int:
    """Game value for `mover` (+1 win, 0 draw, -1 loss): a plain minimax, independent of the module's."""
    if winner(board):
        return 1 if winner(board) == mover else -1
    if 0 not in board:
        return 0
    return max(-solve(play(board, a, mover), 3 - mover) for a in range(9) if board[a] == 0)


def reachable_positions():
    """Every position legal play reaches with the game still on, as (board, mover)."""
    seen, frontier = set(), [(EMPTY, 1)]
    while frontier:
        board, mover = frontier.pop()
        if (board, mover) in seen or over(board):
            continue
        seen.add((board, mover))
        frontier += [(play(board, a, mover), 3 - mover) for a in range(9) if board[a] == 0]
    return seen


def test_tictactoe_board_and_observation_match_the_env():
    """Random games through tictactoe_v3: at every turn the env's observation and mask are this file's
    `observe` of the actions so far, so action a is cell [a // 3, a % 3] and channel 0 is the mover's own,
    and the env pays the winner this file's `winner` names."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        env = tictactoe_v3.env()
        env.reset()
        board, mover = EMPTY, 1
        while not over(board):
            seen = env.observe(env.agent_selection)
            obs, mask = observe(board, mover)
            assert env.agent_selection == f"player_{mover}"
            np.testing.assert_array_equal(seen["observation"], obs)
            np.testing.assert_array_equal(seen["action_mask"], mask)
            np.testing.assert_array_equal(env.observe(f"player_{3 - mover}")["action_mask"], np.zeros(9))
            action = int(rng.choice(np.flatnonzero(mask)))
            env.step(action)
            board, mover = play(board, action, mover), 3 - mover
        won = winner(board)
        assert env.rewards == {"player_1": {1: 1, 2: -1, 0: 0}[won], "player_2": {1: -1, 2: 1, 0: 0}[won]}


def test_tictactoe_hand_played_game():
    """player_1 takes cells 0 and 1, player_2 cells 3 and 4: the top row is player_1's to finish at 2,
    which it prefers to blocking player_2's middle row at 5; the env agrees that 2 wins."""
    env = tictactoe_v3.env()
    env.reset()
    for action in (0, 3, 1, 4):
        env.step(action)
    seen = env.observe("player_1")
    obs, mask = seen["observation"], seen["action_mask"]
    assert obs[0, 0, 0] == obs[0, 1, 0] == 1 and obs[:, :, 0].sum() == 2  # own marks, top row
    assert obs[1, 0, 1] == obs[1, 1, 1] == 1 and obs[:, :, 1].sum() == 2  # the opponent's, middle row
    assert env.observe("player_2")["observation"][0, 0, 1] == 1  # the same mark is channel 1 for player_2
    np.testing.assert_array_equal(mask, [0, 0, 1, 0, 0, 1, 1, 1, 1])
    assert go.perfect_tictactoe(obs, mask) == 2
    env.step(2)
    assert env.rewards == {"player_1": 1, "player_2": -1}


@pytest.mark.parametrize("seat", [1, 2])
def test_perfect_never_loses_against_any_sequence(seat):
    """The whole game tree with the perfect player in `seat` and every possible opponent move: no loss,
    and every win the opponent's mistakes allow is taken."""
    results = {-1: 0, 0: 0, 1: 0}

    def walk(board, mover):
        if over(board):
            results[0 if not winner(board) else (1 if winner(board) == seat else -1)] += 1
            return
        if mover == seat:
            action = perfect(board, mover)
            assert board[action] == 0
            assert solve(play(board, action, mover), 3 - mover) == -solve(board, mover)  # keeps the value
            walk(play(board, action, mover), 3 - mover)
        else:
            for action in range(9):
                if board[action] == 0:
                    walk(play(board, action, mover), 3 - mover)

    walk(EMPTY, 1)
    assert results[-1] == 0
    assert results[1] > 0 and results[0] > 0 and sum(results.values()) > 50  # the tree really branched


def test_perfect_is_optimal_and_in_a_hurry_everywhere():
    """In every reachable position (lost ones included): the move keeps the minimax value, takes an
    immediate win when there is one, else blocks an immediate threat (a slower loss beats a quick one)."""
    positions = reachable_positions()
    assert len(positions) == 4520  # the known count of non-final tic-tac-toe positions
    for board, mover in positions:
        action = perfect(board, mover)
        empty = [a for a in range(9) if board[a] == 0]
        assert action in empty
        assert solve(play(board, action, mover), 3 - mover) == -solve(board, mover)
        wins = [a for a in empty if winner(play(board, a, mover)) == mover]
        threats = [a for a in empty if winner(play(board, a, 3 - mover)) == 3 - mover]
        if wins:
            assert action in wins, (board, mover)
        elif len(threats) == 1:  # (against two threats every move loses at once)
            assert action == threats[0], (board, mover)


def test_perfect_ties_go_to_the_lowest_index_and_self_play_draws():
    """Every opening draws, so from the empty board the lowest index, 0, is chosen; perfect against
    perfect draws after each of the nine openings, and in the real env."""
    assert perfect(EMPTY, 1) == 0
    for opening in range(9):
        board, mover = play(EMPTY, opening, 1), 2
        while not over(board):
            board, mover = play(board, perfect(board, mover), mover), 3 - mover
        assert winner(board) == 0, opening
    players = dict.fromkeys(["player_1", "player_2"], lambda obs, mask, rng: go.perfect_tictactoe(obs, mask))
    assert go.play_game(tictactoe_v3.env, players, np.random.default_rng(0)) == {"player_1": 0, "player_2": 0}


@pytest.mark.parametrize("seat", ["player_1", "player_2"])
def test_perfect_never_loses_to_random_in_the_env(seat):
    players = dict.fromkeys(["player_1", "player_2"], go.random_move)
    players[seat] = lambda obs, mask, rng: go.perfect_tictactoe(obs, mask)
    rng = np.random.default_rng(1)
    results = np.array([go.play_game(tictactoe_v3.env, players, rng)[seat] for _ in range(300)])
    assert (results >= 0).all()
    assert (results > 0).mean() > 0.7  # measured: about 0.99 first, 0.8 second


def test_the_varied_perfect_player_keeps_every_result_and_varies():
    """In every reachable position each move it may pick keeps the minimax value, and across draws
    from the empty board it picks every opening (all nine draw)."""
    rng = np.random.default_rng(0)
    for board, mover in reachable_positions():
        obs, mask = observe(board, mover)
        for _ in range(3):
            action = go.perfect_tictactoe_varied(obs, mask, rng)
            assert board[action] == 0
            assert solve(play(board, action, mover), 3 - mover) == -solve(board, mover), (board, mover)
    openings = {go.perfect_tictactoe_varied(*observe(EMPTY, 1), rng) for _ in range(200)}
    assert openings == set(range(9))


# ---------------------------------------------------------------------------------------------- connect four
PLAYERS = {name: player for name, player in go.GAMES["connect_four"][1].items() if name != "random"}


def c4_env(columns):
    """connect_four_v3 after dropping pieces into `columns` in turn (player_0 first)."""
    env = connect_four_v3.env()
    env.reset()
    for col in columns:
        env.step(col)
    return env


def c4_turn(env):
    seen = env.observe(env.agent_selection)
    return seen["observation"], seen["action_mask"]


def immediate_wins(columns) -> set:
    """The columns that win at once for the player to move after `columns`, as the env judges them
    (each is replayed in a fresh env: the wrapped envs do not survive copy.deepcopy)."""
    env = c4_env(columns)
    mover, mask = env.agent_selection, c4_turn(env)[1]
    return {int(col) for col in np.flatnonzero(mask) if c4_env([*columns, int(col)]).rewards[mover] == 1}


def test_connect_four_layout():
    """Row 0 is the top: the first piece in a column lands in row 5; channel 0 is the observer's own;
    a full column leaves the mask."""
    env = c4_env([3, 0])
    obs, mask = c4_turn(env)  # player_0's view
    assert obs[5, 3, 0] == 1 and obs[5, 0, 1] == 1 and obs.sum() == 2
    assert env.observe("player_1")["observation"][5, 3, 1] == 1
    env = c4_env([3, 3, 3, 3, 3, 3])  # alternating: no four
    obs, mask = c4_turn(env)
    assert obs[:, 3].sum() == 6 and obs[0, 3, 1] == 1  # player_1 dropped last, at the top
    np.testing.assert_array_equal(mask, [1, 1, 1, 0, 1, 1, 1])


def test_heuristic_by_hand():
    """One piece at the bottom centre lies in 7 windows of four (4 across, 1 up, 2 diagonal):
    7 open windows of one piece for its owner, -7 for the other side; the empty board is even."""
    board = np.zeros((6, 7), dtype=np.int8)
    assert go._heuristic(board, 1) == 0
    board[5, 3] = 1
    assert go._heuristic(board, 1) == 7 and go._heuristic(board, -1) == -7


WIN_POSITIONS = {  # moves so far -> the winning columns of the player to move
    "across": ([0, 6, 1, 6, 2, 5], {3}),
    "up": ([0, 1, 0, 1, 0, 2], {0}),
    "diagonal": ([0, 1, 1, 2, 3, 2, 2, 3, 6, 3], {3}),
    "win before block": ([0, 1, 0, 1, 0, 1], {0}),  # player_1 threatens column 1 too
    "two ways": ([1, 1, 2, 2, 3, 3], {0, 4}),
}


@pytest.mark.parametrize("name", PLAYERS)
@pytest.mark.parametrize("position", WIN_POSITIONS)
def test_takes_an_immediate_win(name, position):
    columns, expected = WIN_POSITIONS[position]
    assert immediate_wins(columns) == expected  # the env agrees with the position's description
    obs, mask = c4_turn(c4_env(columns))
    chosen = {PLAYERS[name](obs, mask, np.random.default_rng(seed)) for seed in range(12)}
    assert chosen == expected  # with two wins, the rng picks either


BLOCK_POSITIONS = {  # moves so far -> the opponent's one immediate winning column
    "up": ([0, 1, 0, 1, 0], 0),
    "across, with a gap": ([1, 1, 2, 2, 4], 3),
    "diagonal": ([1, 4, 2, 3, 1, 1, 2, 3, 4, 2], 1),
}


@pytest.mark.parametrize("name", PLAYERS)
@pytest.mark.parametrize("position", BLOCK_POSITIONS)
def test_blocks_the_opponents_win(name, position):
    """The mover cannot win; the opponent could at `block`: every player plays there, and the env
    confirms the opponent has no immediate win afterwards."""
    columns, block = BLOCK_POSITIONS[position]
    assert immediate_wins(columns) == set()
    obs, mask = c4_turn(c4_env(columns))
    for seed in range(5):
        assert PLAYERS[name](obs, mask, np.random.default_rng(seed)) == block
    assert immediate_wins([*columns, block]) == set()


@pytest.mark.parametrize("name", PLAYERS)
def test_the_mask_is_respected(name):
    """A move the mask forbids is never played, even a winning one."""
    obs, _ = c4_turn(c4_env([1, 1, 2, 2, 3, 3]))  # wins at 0 and 4
    for allowed in ([4, 6], [6], [2, 5]):
        mask = np.zeros(7, dtype=np.int8)
        mask[allowed] = 1
        move = PLAYERS[name](obs, mask, np.random.default_rng(0))
        assert move in allowed and (4 not in allowed or move == 4)


def unpruned_values(board: np.ndarray, depth: int) -> dict:
    """Root column -> value by plain negamax (no pruning, no ordering), same scores as the module."""

    def move_value(board, col, depth, colour):
        board = board.copy()
        row = int(np.flatnonzero(board[:, col] == 0)[-1])
        board[row, col] = colour
        if go._wins_at(board, row, col, colour):
            return go.WIN_SCORE + depth
        if depth == 1:
            return -go._heuristic(board, -colour)
        replies = [move_value(board, c, depth - 1, -colour) for c in range(7) if board[0, c] == 0]
        return -max(replies) if replies else 0

    return {col: move_value(board, col, depth, 1) for col in range(7) if board[0, col] == 0}


def random_position(rng) -> list:
    """4 to 13 random moves, stopping early where the next one could end the game."""
    columns = []
    for _ in range(int(rng.integers(4, 14))):
        if immediate_wins(columns):
            break
        columns.append(int(rng.choice(np.flatnonzero(c4_turn(c4_env(columns))[1]))))
    return columns


def test_alphabeta_matches_unpruned_search():
    """Alpha-beta's choices, over rng seeds, are exactly the unpruned search's best moves: pruning
    loses nothing and ties are broken at random. The symmetric openings have ties ({2, 4} at depth 3
    from the empty board); random mid-game positions are searched at depth 3."""
    rng = np.random.default_rng(2)
    cases = [([], 3), ([], 4), ([3, 3], 3)] + [(random_position(rng), 3) for _ in range(8)]
    ties = 0
    for columns, depth in cases:
        obs, mask = c4_turn(c4_env(columns))
        values = unpruned_values(go._c4_board(obs), depth)
        best = {col for col, v in values.items() if v == max(values.values())}
        chosen = {go.alphabeta(obs, mask, depth, np.random.default_rng(seed)) for seed in range(16)}
        assert chosen == best, columns
        ties += len(best) > 1
    assert ties >= 3  # the tie-break was exercised


def win_rate(player, seat: str, games: int, seed: int) -> float:
    players = dict.fromkeys(["player_0", "player_1"], go.random_move)
    players[seat] = player
    rng = np.random.default_rng(seed)
    return float(np.mean([go.play_game(connect_four_v3.env, players, rng)[seat] > 0 for _ in range(games)]))


@pytest.mark.parametrize("seat", ["player_0", "player_1"])
@pytest.mark.parametrize("name", ["alphabeta2", "alphabeta4"])
def test_alphabeta_beats_random(name, seat):
    assert win_rate(PLAYERS[name], seat, games=50, seed=3) >= 0.9  # measured: 1.0


@pytest.mark.parametrize("seat", ["player_0", "player_1"])
def test_win_or_block_beats_random(seat):
    assert win_rate(go.win_or_block, seat, games=100, seed=4) >= 0.8  # measured: 0.94 to 1.0


def test_play_game_rejects_an_illegal_move():
    """The env's wrapper would quietly score an illegal move as a loss; play_game raises instead."""
    players = {"player_1": lambda obs, mask, rng: 4, "player_2": lambda obs, mask, rng: 4}
    with pytest.raises(ValueError, match="player_2 played illegal action 4"):
        go.play_game(tictactoe_v3.env, players, np.random.default_rng(0))


def test_cli_reports_rates_per_seat(capsys):
    rates = go.main(["--game", "tictactoe", "--first", "random", "--second", "perfect", "--games", "40"])
    assert rates["second"]["loss"] == 0 and rates["second"]["win"] > 0.5
    assert rates["first"]["win"] == rates["second"]["loss"] and rates["first"]["draw"] == rates["second"]["draw"]
    assert "second perfect" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        go.main(["--game", "tictactoe", "--first", "alphabeta4"])  # a connect four player
