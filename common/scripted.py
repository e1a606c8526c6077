"""Scripted players of turn-based games, batched over env copies: what `--load-group GROUP=scripted:NAME`,
a league's `--pool SIDE=scripted:NAME` and `run.py crossplay --scripted NAME` seat
(common/groups.py's `ScriptedPolicy`).

Each is a function (obs (B, ...), mask (B, A), generator) -> (B,) actions, of positions seen by the
player to move: its own pieces, then the opponent's, as planes (PettingZoo's classic games and the
torch port of connect four both give them so, flattened or not). Rows whose player is not to move
get some legal-looking action, which the game does not play.

- `win_or_block` (connect four): wins now where it can, else blocks the opponent's immediate win,
  else a random legal column (envs/torch_connect_four.py).
- `perfect` (tic-tac-toe): a minimax player that never loses; a random move among those that keep
  the position's game-theoretic result, so that its games vary (benchmarks/game_opponents.py's
  `perfect_varied`).
"""
import functools
from typing import Callable, Dict, Optional, Tuple

import torch

from common.cli import ConfigError
from envs.torch_connect_four import win_or_block

SCRIPTED = "scripted:"  # `--load-group GROUP=scripted:NAME`

TTT_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


@functools.cache
def tictactoe_keeping_moves() -> torch.Tensor:
    """(3^9, 9) bool: for every board seen by the player to move (cell a, the cell of action a: 0
    empty, 1 its own, 2 the opponent's; row sum_a cell_a 3^a), the moves that keep the position's
    result with best play on both sides (win, draw or loss); a full board, every cell. Solved once, on
    first use (about a second)."""
    solved: Dict[tuple, int] = {}

    def result(board: tuple) -> int:  # the mover's result with best play: 1 win, 0 draw, -1 loss
        if board not in solved:
            empty = [a for a in range(9) if board[a] == 0]
            solved[board] = max((move_result(board, a) for a in empty), default=0)
        return solved[board]

    def move_result(board: tuple, a: int) -> int:
        after = board[:a] + (1,) + board[a + 1:]
        if any(all(after[i] == 1 for i in line) for line in TTT_LINES):
            return 1
        return -result(tuple((0, 2, 1)[v] for v in after))  # the opponent to move, from its side

    rows = []
    for index in range(3 ** 9):
        board = tuple((index // 3 ** a) % 3 for a in range(9))
        results = {a: move_result(board, a) for a in range(9) if board[a] == 0}
        best = max(results.values(), default=None)
        rows.append([best is None or results.get(a) == best for a in range(9)])
    return torch.tensor(rows, dtype=torch.bool)


def perfect_tictactoe(obs: torch.Tensor, mask: torch.Tensor, generator: Optional[torch.Generator] = None
                      ) -> torch.Tensor:
    """The perfect tic-tac-toe player on a batch: (B, 18) or (B, 3, 3, 2) boards, (B, 9) legal cells
    -> (B,) cells, each a uniformly random move among those that keep the position's result."""
    B = obs.shape[0]
    planes = obs.reshape(B, 9, 2) > 0.5
    index = ((planes[..., 0].long() + 2 * planes[..., 1].long()) * 3 ** torch.arange(9, device=obs.device)).sum(-1)
    legal = mask.bool()
    legal = legal | ~legal.any(-1, keepdim=True)
    keep = tictactoe_keeping_moves().to(obs.device)[index] & legal
    choice = torch.where(keep.any(-1, keepdim=True), keep, legal)
    u = torch.rand(B, 9, generator=generator, device=obs.device)
    return torch.where(choice, u, -1.0).argmax(-1)


# name -> (the games it plays, its move function)
SCRIPTED_PLAYERS: Dict[str, Tuple[Tuple[str, ...], Callable]] = {
    "win_or_block": (("connect_four",), win_or_block),
    "perfect": (("tictactoe",), perfect_tictactoe),
}


def scripted_player(spec: str, env_name: str) -> Callable:
    """The move function of `scripted:NAME` on `env_name` (a `torch:` port or its `classic:` original);
    an unknown name, or a player of another game, fails naming those there are."""
    name, game = spec[len(SCRIPTED):], env_name.split(":")[-1]
    if name not in SCRIPTED_PLAYERS:
        raise ConfigError(f"no scripted player {name!r}; there are: " + ", ".join(
            f"{SCRIPTED}{n} ({' or '.join(games)})" for n, (games, _) in SCRIPTED_PLAYERS.items()))
    games, move = SCRIPTED_PLAYERS[name]
    if game not in games:
        raise ConfigError(f"{spec} plays {' or '.join(games)}, not {env_name}")
    return move
