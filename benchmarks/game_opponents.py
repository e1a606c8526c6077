"""Scripted opponents for PettingZoo's classic tic-tac-toe and connect four.

Each player is a plain function of what an AEC agent sees at its turn, `env.observe(agent)`'s
"observation" and "action_mask", so a learner can be scored against it, or trained against it,
without any other access to the env. Checked against pettingzoo 1.27.0 (and by
tests/test_game_opponents.py):

- Both games: "observation" is int8 (rows, cols, 2) from the observer's point of view, not by colour:
  channel 0 holds the observer's own pieces, channel 1 the opponent's. "action_mask" is int8 with
  1 for each legal action, and all zeros for an agent that is not to move. Rewards are +1 for the
  winner, -1 for the loser, 0 for a draw, all paid when the game ends. The wrapped envs
  (`tictactoe_v3.env()`, `connect_four_v3.env()`) end the game on an illegal action with -1 for the
  mover and 0 for the other, and only log a warning, so `play_game` checks the mask itself.
- tictactoe_v3: agents player_1 (moves first) and player_2; observation (3, 3, 2); action a marks
  the cell observation[a // 3, a % 3], i.e. the observation is the env's flat board reshaped row by
  row. (The env's own board comment draws the grid transposed, 0 3 6 / 1 4 7 / 2 5 8, which is how
  it renders; tic-tac-toe's lines are the same set under transposition, so nothing here depends on it.)
- connect_four_v3: agents player_0 (moves first) and player_1; observation (6, 7, 2); action c drops
  a piece into column c, observation[:, c]. Row 0 is the top: a piece lands in the empty cell with
  the largest row index, and mask[c] == 1 while the top cell of column c is empty.

Usage (a sanity tool: win / draw / loss rates of each seat):

    python benchmarks/game_opponents.py --game tictactoe --first perfect --second random --games 1000
    python benchmarks/game_opponents.py --game connect_four --first alphabeta4 --second win_or_block --games 50
"""
import argparse
import functools
import time
from collections.abc import Callable

import numpy as np
from pettingzoo.classic import connect_four_v3, tictactoe_v3

Player = Callable[[np.ndarray, np.ndarray, np.random.Generator], int]  # (obs, mask, rng) -> action


def random_move(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A uniformly random legal action: the baseline every scripted player must beat."""
    return int(rng.choice(np.flatnonzero(mask)))


# ----------------------------------------------------------------------------------------------- tic-tac-toe
TTT_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def perfect_tictactoe(obs: np.ndarray, mask: np.ndarray) -> int:
    """The minimax move: never loses, wins as fast and loses as slowly as it can.

    Ties between equally valued moves go to the lowest action index, so the player is
    deterministic (from the empty board it opens in cell 0, a corner: every opening draws).
    """
    legal = tuple(np.flatnonzero(mask).tolist())
    if not legal:
        raise ValueError("perfect_tictactoe: the mask allows no move (is this agent to move?)")
    board = tuple((obs[..., 0] - obs[..., 1]).reshape(9).tolist())  # +1 mover, -1 opponent, by action index
    return _ttt_best_move(board, legal)


def perfect_tictactoe_varied(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """A perfect player that varies its games: a uniformly random move among those that keep the
    position's game-theoretic result (win, draw or loss), ignoring speed. It never loses either,
    and against a deterministic learner 1,000 games are many different games, not one repeated."""
    legal = np.flatnonzero(mask).tolist()
    if not legal:
        raise ValueError("perfect_tictactoe_varied: the mask allows no move (is this agent to move?)")
    board = tuple((obs[..., 0] - obs[..., 1]).reshape(9).tolist())
    results = [int(np.sign(_ttt_move_value(board, a))) for a in legal]
    best = [a for a, r in zip(legal, results) if r == max(results)]
    return int(best[rng.integers(len(best))])


@functools.cache
def _ttt_best_move(board: tuple, legal: tuple) -> int:
    """The decision itself is cached too, so a repeated position costs one dictionary look-up."""
    return max(legal, key=lambda a: (_ttt_move_value(board, a), -a))


def _ttt_move_value(board: tuple, action: int) -> int:
    """The mover's minimax value of playing `action` on `board` (mover = +1)."""
    after = board[:action] + (1,) + board[action + 1:]
    if any(all(after[i] == 1 for i in line) for line in TTT_LINES):
        return 1 + after.count(0)  # a win now; more empty cells left = a quicker win = worth more
    return -_ttt_value(tuple(-v for v in after))  # the opponent to move, seen from its side


@functools.cache
def _ttt_value(board: tuple) -> int:
    """Minimax value for the player to move (+1 on `board`): 0 draw, >0 win, <0 loss, by speed.

    Boards are always stored from the mover's side, so a position and its colour swap share one
    entry; the cache holds every reachable position (a few thousand) after the first full search.
    """
    empty = [a for a in range(9) if board[a] == 0]
    if not empty:
        return 0
    return max(_ttt_move_value(board, a) for a in empty)


# ---------------------------------------------------------------------------------------------- connect four
ROWS, COLS = 6, 7
CENTRE_FIRST = (3, 2, 4, 1, 5, 0, 6)  # central columns first: alpha-beta cuts more when good moves come early
WIN_SCORE = 1_000_000  # above any heuristic score (at most 69 windows x 16)
WINDOW_WEIGHTS = np.array([0, 1, 4, 16, 0])  # by pieces in a window; a full window (4) is a win, scored apart


def _all_windows() -> np.ndarray:
    """Every line of four cells on the board as flat cell indices (row * COLS + col): (69, 4)."""
    windows = []
    for row in range(ROWS):
        for col in range(COLS):
            for d_row, d_col in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(row + k * d_row, col + k * d_col) for k in range(4)]
                if all(0 <= r < ROWS and 0 <= c < COLS for r, c in cells):
                    windows.append([r * COLS + c for r, c in cells])
    return np.array(windows)


WINDOWS = _all_windows()  # (69, 4)
CELL_WINDOWS = [WINDOWS[(WINDOWS == cell).any(axis=1)] for cell in range(ROWS * COLS)]  # per cell: (k, 4)


def _c4_board(obs: np.ndarray) -> np.ndarray:
    """(6, 7, 2) observation -> (6, 7) int8 board: +1 the mover's pieces, -1 the opponent's, 0 empty."""
    return (obs[..., 0] - obs[..., 1]).astype(np.int8)


def _drop_row(board: np.ndarray, col: int) -> int:
    """The row a piece dropped into `col` lands in: the lowest empty one (row 0 is the top)."""
    return int(np.flatnonzero(board[:, col] == 0)[-1])


def _wins_at(board: np.ndarray, row: int, col: int, colour: int) -> bool:
    """Does `colour` have four in a line through (row, col)? Only lines through the last move can be new."""
    return bool((board.reshape(-1)[CELL_WINDOWS[row * COLS + col]] == colour).all(axis=1).any())


def _winning_columns(board: np.ndarray, legal: np.ndarray, colour: int) -> list:
    """The legal columns where dropping a `colour` piece makes four."""
    wins = []
    for col in legal:
        row = _drop_row(board, col)
        board[row, col] = colour
        if _wins_at(board, row, col, colour):
            wins.append(int(col))
        board[row, col] = 0
    return wins


def win_or_block(obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """Win now if possible, else block the opponent's immediate win, else a random legal column.

    One-ply lookahead: the classic first step up from a random player. Several wins (or threats)
    are chosen between with `rng`; a double threat is lost anyway, so which one it blocks matters little.
    """
    board, legal = _c4_board(obs), np.flatnonzero(mask)
    for colour in (1, -1):  # own wins first, then the opponent's to block
        columns = _winning_columns(board, legal, colour)
        if columns:
            return int(rng.choice(columns))
    return int(rng.choice(legal))


def alphabeta(obs: np.ndarray, mask: np.ndarray, depth: int, rng: np.random.Generator) -> int:
    """The best column by negamax search `depth` plies deep with alpha-beta pruning.

    A four scores WIN_SCORE plus the plies still left to search, so a quicker win scores more and
    a loss is put off as long as possible; positions at the depth limit score by `_heuristic`.
    Root moves are searched in a random order and the first of the best is kept: a uniformly
    random choice among equally valued moves, at no extra search cost (a later move that only
    ties fails low against the alpha it set).
    """
    if depth < 1:
        raise ValueError(f"alphabeta: depth must be at least 1, got {depth}")
    board, legal = _c4_board(obs), rng.permutation(np.flatnonzero(mask))
    best_move, alpha = int(legal[0]), -np.inf
    for col in legal:
        value = _move_value(board, int(col), depth, -np.inf, -alpha, colour=1)
        if value > alpha:
            best_move, alpha = int(col), value
    return best_move


def _move_value(board: np.ndarray, col: int, depth: int, alpha: float, beta: float, colour: int) -> float:
    """`colour`'s value of dropping into `col`, searched `depth` plies including this one.

    (alpha, beta) is already the window of the *opponent's* reply search: the caller's own
    window (a, b), negated and swapped to (-b, -a), as negamax sees it from the other side.
    """
    row = _drop_row(board, col)
    board[row, col] = colour
    if _wins_at(board, row, col, colour):
        value = WIN_SCORE + depth  # more plies left = an earlier win = better; an earlier loss, worse
    else:
        value = -_negamax(board, depth - 1, alpha, beta, -colour)
    board[row, col] = 0
    return value


def _negamax(board: np.ndarray, depth: int, alpha: float, beta: float, colour: int) -> float:
    """Value of `board` for `colour` to move (fail-soft alpha-beta; `board` is restored on return)."""
    if depth == 0:
        return _heuristic(board, colour)
    best = -np.inf
    for col in CENTRE_FIRST:
        if board[0, col] != 0:
            continue  # a full column
        best = max(best, _move_value(board, col, depth, -beta, -alpha, colour))
        alpha = max(alpha, best)
        if alpha >= beta:
            break  # the opponent already has a better option elsewhere: it will never allow this line
    return 0 if best == -np.inf else best  # no legal move: a full board, a draw


def _heuristic(board: np.ndarray, colour: int) -> int:
    """Open windows of four, seen from `colour`.

    A window holding pieces of only one side is a four that side could still complete; it counts
    1, 4 or 16 for 1, 2 or 3 pieces, plus for `colour` and minus for the opponent. Central cells
    lie in more windows, so the score also rewards the centre.
    """
    cells = board.reshape(-1)[WINDOWS]  # (69, 4)
    own, theirs = (cells == colour).sum(axis=1), (cells == -colour).sum(axis=1)
    return int(WINDOW_WEIGHTS[own][theirs == 0].sum() - WINDOW_WEIGHTS[theirs][own == 0].sum())


# ---------------------------------------------------------------------------------------------- playing games
def play_game(env_fn: Callable, players: dict[str, Player], rng: np.random.Generator) -> dict[str, float]:
    """Play one game of a PettingZoo AEC env; return each agent's total reward (its result: +1, 0, -1).

    `players` maps agent name -> callable (obs, mask, rng) -> action. An illegal action raises
    here, rather than quietly ending the game as the env's wrapper would.
    """
    env = env_fn()
    env.reset(seed=int(rng.integers(2**31)))
    returns = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        returns[agent] += reward  # reward since this agent's last turn: summed, the game's return
        action = None
        if not (terminated or truncated):
            action = int(players[agent](obs["observation"], obs["action_mask"], rng))
            if not obs["action_mask"][action]:
                raise ValueError(f"{agent} played illegal action {action}; legal: {np.flatnonzero(obs['action_mask'])}")
        env.step(action)
    env.close()
    return returns


GAMES = {
    "tictactoe": (tictactoe_v3.env, {
        "random": random_move,
        "perfect": lambda obs, mask, rng: perfect_tictactoe(obs, mask),
        "perfect_varied": perfect_tictactoe_varied,
    }),
    "connect_four": (connect_four_v3.env, {
        "random": random_move,
        "win_or_block": win_or_block,
        "alphabeta2": lambda obs, mask, rng: alphabeta(obs, mask, 2, rng),
        "alphabeta4": lambda obs, mask, rng: alphabeta(obs, mask, 4, rng),
    }),
}


def main(argv=None) -> dict:
    """Play --games games between two named opponents; print and return each seat's win/draw/loss rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", choices=sorted(GAMES), default="tictactoe")
    names = "; ".join(f"{game}: {', '.join(opponents)}" for game, (_, opponents) in GAMES.items())
    parser.add_argument("--first", default="perfect", help=f"the player who moves first ({names})")
    parser.add_argument("--second", default="random", help="the player who moves second")
    parser.add_argument("--games", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    env_fn, opponents = GAMES[args.game]
    for name in (args.first, args.second):
        if name not in opponents:
            parser.error(f"no opponent {name!r} for {args.game}; choose from {sorted(opponents)}")
    agents = env_fn().possible_agents  # in turn order
    seats = {agents[0]: args.first, agents[1]: args.second}
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    results = [play_game(env_fn, {agent: opponents[name] for agent, name in seats.items()}, rng)
               for _ in range(args.games)]
    print(f"{args.game}: {args.games} games in {time.perf_counter() - start:.1f} s")
    rates = {}
    for seat, (agent, name) in zip(("first", "second"), seats.items()):
        outcome = np.array([r[agent] for r in results])
        rates[seat] = {"win": float(np.mean(outcome > 0)), "draw": float(np.mean(outcome == 0)),
                       "loss": float(np.mean(outcome < 0))}
        print(f"  {seat:6s} {name:12s} ({agent}): " + "  ".join(f"{k} {v:.3f}" for k, v in rates[seat].items()))
    return rates


if __name__ == "__main__":
    main()
