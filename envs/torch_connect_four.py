"""Connect four in torch: E games at once, the same game as PettingZoo's `classic:connect_four`
(`connect_four_v3.env()`), move for move, in the turn-based batched shape of envs/aec_vec.py.

    env = make_env("torch:connect_four", num_envs=1024, seed=0)                 # or device="cuda"
    env = make_env("torch:connect_four", num_envs=64, env_kwargs={"board": "image"})

Self-play on connect four needs tens of millions of moves; PettingZoo's game steps one copy at a
time in Python (about 4,900 moves/s with 64 copies here), half of a self-play run's time. Here every
copy moves in one batched step (65x as many moves/s with 1,024 copies; docs/envs.md).

The game (PettingZoo's rules, which the step-for-step test holds the port to):
- a 6 x 7 board, row 0 at the top; `player_0` moves first, then the two alternate;
- action c drops the mover's piece into column c, to the lowest empty row; a full column is an
  illegal move, which ends the game with -1 for the mover and 0 for the other, both agents
  terminated and truncated (PettingZoo's TerminateIllegalWrapper); the action masks never offer one;
- four of the mover's pieces in a row, column or diagonal: +1 to the mover, -1 to the other, game
  over; a full board without one: a draw, 0 each.

What each agent sees (as `classic:connect_four`): its own pieces, then the opponent's, as two
planes (6, 7, 2), flattened to 84 floats (`board="flat"`, the default) or kept as planes
(`board="image"`, for a CNN). The global state is both views, one after the other (168 floats).
`acting` says whose move it is; the mover's mask holds the columns not full, the other agent's
every action (whatever it picks is not played). Every copy starts from the empty board (the game
has no chance), and a finished game restarts at once, its last position in `final_obs`.

`random_opening=K` (default 0, PettingZoo's game): each new game starts after k random moves, k drawn
uniformly from 0..K, each a legal column that does not make four (no agent plays them, no reward).
Self-play sees positions its own play would never reach; the policy is still scored from the empty board.
"""
from typing import Dict, Optional, Union

import numpy as np
import torch

from envs.errors import EnvError, check_arguments
from envs.pettingzoo_vec import VecStep
from envs.tensor_state import load_tensors, save_tensors

ROWS, COLS, IN_A_ROW = 6, 7, 4
ARGUMENTS = {"board": "flat", "random_opening": 0}
BOARDS = ("flat", "image")


class TorchConnectFour:
    """E copies of connect four, two agents (`player_0`, `player_1`), one move per step in every copy.
    Everything it returns is a torch tensor on `device`."""

    turn_based = True
    discrete, continuous_actions, has_action_mask = True, False, True
    dtype = torch.float32

    def __init__(self, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu", board: str = "flat",
                 random_opening: int = 0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if board not in BOARDS:
            raise EnvError(f"board must be one of {', '.join(BOARDS)}, got {board!r}")
        if not 0 <= random_opening <= ROWS * COLS // 2:
            raise EnvError(f"random_opening must be between 0 and {ROWS * COLS // 2} moves, got {random_opening}")
        self.num_envs, self.seed, self.device = num_envs, seed, torch.device(device)
        self.random_opening = random_opening
        self.agents = ["player_0", "player_1"]
        self.n_agents = N = 2
        self.image_obs = board == "image"
        self.obs_shape = (ROWS, COLS, 2) if self.image_obs else (ROWS * COLS * 2,)
        self.obs_dim = ROWS * COLS * 2
        self.obs_dims = [self.obs_dim] * N
        self.obs_dtype = np.float32
        self.state_dim = N * self.obs_dim
        self.state_shape = (self.state_dim,)
        self.n_actions, self.action_dim = COLS, 1
        self.action_dims = [COLS] * N
        self.action_dim_mask = np.ones((N, COLS), dtype=bool)
        E, dev = num_envs, self.device
        self.board = torch.zeros(E, ROWS, COLS, dtype=torch.long, device=dev)  # 0 empty, 1 player_0's, 2 player_1's
        self.height = torch.zeros(E, COLS, dtype=torch.long, device=dev)  # pieces in each column
        self.turn = torch.zeros(E, dtype=torch.long, device=dev)  # whose move: 0 or 1
        self._ep_return = torch.zeros(E, N, device=dev)
        self._ep_length = torch.zeros(E, dtype=torch.long, device=dev)
        self.gen = torch.Generator(device=dev).manual_seed(seed)  # sample_actions() without a numpy generator
        self._rows = torch.arange(E, device=dev)
        self._seats = torch.arange(N, device=dev)

    # ------------------------------------------------------------------ what the agents see
    def _views(self, board: torch.Tensor) -> torch.Tensor:
        """(E, N, 6, 7, 2): agent n's pieces, then the other's, from `board` (E, 6, 7)."""
        mine = board[:, None] == (self._seats + 1)[None, :, None, None]  # (E, N, 6, 7)
        theirs = board[:, None] == (2 - self._seats)[None, :, None, None]
        return torch.stack([mine, theirs], -1).to(self.dtype)

    def _masks(self, height: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
        """(E, N, 7): the selected agent's legal columns (every column if none is), every action for the other."""
        legal = height < ROWS
        legal = legal | ~legal.any(-1, keepdim=True)
        picked = (self._seats[None] == selected[:, None])[..., None]  # (E, N, 1)
        return torch.where(picked, legal[:, None], torch.ones_like(legal[:, None]))

    def _observe(self, board: torch.Tensor, height: torch.Tensor, selected: torch.Tensor):
        views = self._views(board)
        state = views.reshape(self.num_envs, self.state_dim)
        obs = views if self.image_obs else views.reshape(self.num_envs, self.n_agents, self.obs_dim)
        return obs, state, self._masks(height, selected)

    def observe(self):
        """(obs, state, action_mask) of the current positions."""
        return self._observe(self.board, self.height, self.turn)

    @property
    def acting(self) -> torch.Tensor:
        """(E, N) bool: the agent to move in each copy."""
        return self._seats[None] == self.turn[:, None]

    def action_mask(self) -> torch.Tensor:
        return self._masks(self.height, self.turn)

    # ------------------------------------------------------------------ the game
    @staticmethod
    def four_in_a_row(pieces: torch.Tensor) -> torch.Tensor:
        """(E,) bool: (E, 6, 7) bool `pieces` hold four in a row, a column or a diagonal."""
        k = IN_A_ROW
        found = torch.zeros(pieces.shape[0], dtype=torch.bool, device=pieces.device)
        for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):  # right, down, down-right, down-left
            rows, cols = ROWS - dr * (k - 1), COLS - abs(dc) * (k - 1)
            c0 = 0 if dc >= 0 else k - 1
            line = torch.ones(pieces.shape[0], rows, cols, dtype=torch.bool, device=pieces.device)
            for i in range(k):
                line = line & pieces[:, dr * i: dr * i + rows, c0 + dc * i: c0 + dc * i + cols]
            found = found | line.flatten(1).any(-1)
        return found

    def _open(self, fresh: torch.Tensor) -> None:
        """Play `random_opening`'s random moves in the copies `fresh` (E,) bool, just set to the empty board."""
        if self.random_opening == 0:
            return
        rows = fresh.nonzero().squeeze(1)
        k = torch.randint(0, self.random_opening + 1, rows.shape, generator=self.gen, device=self.device)
        rows = rows[k > 0]
        board, height, turn, k = self.board[rows], self.height[rows], self.turn[rows], k[k > 0]
        at = torch.arange(len(rows), device=self.device)
        for j in range(self.random_opening):
            legal = height < ROWS
            quiet = legal & ~completing(board == (turn + 1)[:, None, None], height, legal)
            go = (k > j) & quiet.any(-1)
            if not bool(go.any()):
                break
            col = torch.where(quiet, torch.rand(quiet.shape, generator=self.gen, device=self.device), -1.0).argmax(-1)
            row = (ROWS - 1 - height.gather(1, col[:, None]).squeeze(1)).clamp(min=0)
            board[at, row, col] = torch.where(go, turn + 1, board[at, row, col])
            height[at, col] += go.long()
            turn = torch.where(go, 1 - turn, turn)
        self.board[rows], self.height[rows], self.turn[rows] = board, height, turn

    def reset(self):
        """Empty boards, player_0 to move (with `random_opening`, after each copy's opening). Returns (obs,
        state, action_mask); whose move it is is in `acting`."""
        self.board.zero_()
        self.height.zero_()
        self.turn.zero_()
        self._ep_return.zero_()
        self._ep_length.zero_()
        self._open(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.observe()

    def step(self, actions) -> VecStep:
        """Play the mover's action in every copy: actions (E, N) ints (tensor or array); the other
        agent's entries are not played."""
        E, N = self.num_envs, self.n_agents
        actions = torch.as_tensor(actions, device=self.device).long().reshape(E, N)
        mover = self.turn
        col = actions.gather(1, mover[:, None]).squeeze(1).clamp(0, COLS - 1)
        filled = self.height.gather(1, col[:, None]).squeeze(1)  # pieces already in the chosen column
        illegal = filled >= ROWS
        row = (ROWS - 1 - filled).clamp(min=0)
        piece = torch.where(illegal, self.board[self._rows, row, col], mover + 1)
        self.board[self._rows, row, col] = piece
        self.height[self._rows, col] += (~illegal).long()
        won = ~illegal & self.four_in_a_row(self.board == (mover + 1)[:, None, None])
        full = self.height.sum(-1) == ROWS * COLS
        done = illegal | won | full
        mover_hot = (self._seats[None] == mover[:, None]).to(self.dtype)  # (E, N)
        # a win: +1 the mover, -1 the other; an illegal move: -1 the mover, 0 the other; a draw: 0
        reward = torch.where(won[:, None], 2 * mover_hot - 1, torch.zeros_like(mover_hot))
        reward = reward - illegal[:, None].to(self.dtype) * mover_hot
        # PettingZoo's agent_selection after the move: the other agent, or after an illegal move the first agent
        selected = torch.where(illegal, torch.zeros_like(mover), 1 - mover)
        final_obs, final_state, final_mask = self._observe(self.board, self.height, selected)
        self.turn = 1 - mover
        self._ep_return += reward
        self._ep_length += 1
        episode_return = torch.where(done[:, None], self._ep_return, torch.zeros_like(self._ep_return))
        episode_length = torch.where(done, self._ep_length, torch.zeros_like(self._ep_length))
        obs, state, mask = final_obs, final_state, final_mask
        if bool(done.any()):
            self.board[done] = 0
            self.height[done] = 0
            self.turn[done] = 0
            self._ep_return[done] = 0.0
            self._ep_length[done] = 0
            self._open(done)
            obs, state, mask = self.observe()
        terminated = done[:, None].expand(E, N)
        return VecStep(obs=obs, state=state, reward=reward, terminated=terminated,
                       truncated=illegal[:, None].expand(E, N), alive=torch.ones_like(terminated),
                       action_mask=mask, final_obs=final_obs, final_state=final_state, done=done,
                       episode_return=episode_return, episode_length=episode_length, final_action_mask=final_mask,
                       acting=self.acting)

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """(E, N) uniform random legal moves (every agent gets one; only the mover's is played)."""
        shape = (self.num_envs, self.n_agents, self.n_actions)
        logits = (torch.rand(shape, generator=self.gen, device=self.device) if rng is None
                  else torch.as_tensor(rng.random(shape), device=self.device))
        return torch.where(self.action_mask(), logits, -1.0).argmax(-1)

    # ------------------------------------------------------------------ exact resume
    _STATE = ("board", "height", "turn", "_ep_return", "_ep_length")

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """Every copy's position, its episode's running return and the generator, as plain tensors."""
        return save_tensors(self, self._STATE)

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        """Put back what `state_dict()` saved (same number of copies)."""
        load_tensors(self, state, "torch:connect_four", "another number of copies")

    def render(self):
        raise NotImplementedError("torch:connect_four draws through its PettingZoo twin: make_env(..., "
                                  "render_mode=...) builds classic:connect_four, the same game")

    def close(self) -> None:
        pass


def completing(pieces: torch.Tensor, height: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """(B, 7) bool: the legal columns where one more of `pieces`' (B, 6, 7) owner's pieces makes four,
    on boards whose columns hold `height` (B, 7) pieces."""
    B, dev = pieces.shape[0], pieces.device
    row = (ROWS - 1 - height).clamp(min=0)  # where a piece dropped into each column lands
    drop = torch.zeros(B, COLS, ROWS, COLS, dtype=torch.bool, device=dev)  # (B, column played, 6, 7)
    drop[torch.arange(B, device=dev)[:, None], torch.arange(COLS, device=dev)[None], row,
         torch.arange(COLS, device=dev)[None]] = True
    after = (pieces[:, None] | drop).reshape(B * COLS, ROWS, COLS)
    return TorchConnectFour.four_in_a_row(after).reshape(B, COLS) & legal


def win_or_block(obs: torch.Tensor, mask: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The win-or-block player on a batch of positions, each seen by the player to move: (B, 84)
    or (B, 6, 7, 2) boards (its pieces, then the opponent's, as both games give them), (B, 7) legal
    columns -> (B,) columns. Wins now where it can, else blocks the opponent's immediate win, else
    plays a random legal column; several wins (or threats) are chosen between at random. The same
    player as benchmarks/game_opponents.py's `win_or_block`, for a whole batch in one call."""
    B = obs.shape[0]
    planes = obs.reshape(B, ROWS, COLS, 2) > 0.5
    mine, theirs = planes[..., 0], planes[..., 1]
    height = (mine | theirs).sum(1)  # (B, 7) pieces in each column
    legal = mask.bool() & (height < ROWS)
    legal = legal | ~legal.any(-1, keepdim=True)  # no legal column: any (the move is not played)
    wins, blocks = completing(mine, height, legal), completing(theirs, height, legal)
    choice = torch.where(wins.any(-1, keepdim=True), wins, torch.where(blocks.any(-1, keepdim=True), blocks, legal))
    u = torch.rand(B, COLS, generator=generator, device=obs.device)
    return torch.where(choice, u, -1.0).argmax(-1)


def arguments(name: str = "connect_four") -> Dict[str, object]:
    return dict(ARGUMENTS)


def make(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, object]] = None,
         device=None) -> TorchConnectFour:
    """E copies of connect four; arguments checked first (EnvError)."""
    kwargs = dict(env_kwargs or {})
    check_arguments(f"torch:{name}", kwargs, arguments(name), limits={"board": list(BOARDS)})
    return TorchConnectFour(num_envs, seed, device or "cpu", **kwargs)


__all__ = ["TorchConnectFour", "make", "arguments", "ROWS", "COLS"]
