"""torch:connect_four against PettingZoo's classic:connect_four, move for move, and by hand: wins in
every direction, a draw, an illegal move, auto-reset, exact resume, and a file that refuses it (the
self-play files run on it in test_turn_based.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import envs
from envs.torch_connect_four import COLS, ROWS, TorchConnectFour

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ("obs", "state", "reward", "terminated", "truncated", "alive", "action_mask", "final_obs", "final_state",
          "done", "episode_return", "episode_length", "final_action_mask", "acting")


def same_step(ref, port, where=""):
    for field in FIELDS:
        expected, got = np.asarray(getattr(ref, field)), getattr(port, field).cpu().numpy()
        assert got.shape == expected.shape, (where, field)
        np.testing.assert_array_equal(got, expected.astype(got.dtype), err_msg=f"{where} {field}")


@pytest.mark.parametrize("board", ["flat", "image"])
def test_move_for_move_against_pettingzoo(board, capsys):
    """Random games in 16 copies, both envs given the same actions: now and then the mover asks for a full
    column (an illegal move: the game ends with -1 for it) and the waiting agent's entry is nonsense."""
    E, kwargs = 16, {"board": board}
    ref, port = envs.make_env("classic:connect_four", E, 0, kwargs), envs.make_env("torch:connect_four", E, 0, kwargs)
    for a, b in zip(ref.reset(), port.reset()):
        np.testing.assert_array_equal(b.numpy(), a)
    np.testing.assert_array_equal(port.acting.numpy(), ref.acting)
    rng, games, illegal = np.random.default_rng(1), 0, 0
    for t in range(700):
        actions = ref.sample_actions(rng)
        actions[~ref.acting] = rng.integers(0, COLS, int((~ref.acting).sum()))  # not played by either env
        heights = port.height.numpy()
        for i in np.flatnonzero(rng.random(E) < 0.01):  # a full column, where there is one
            full = np.flatnonzero(heights[i] == ROWS)
            if len(full):
                actions[i, port.turn[i]] = full[0]
                illegal += 1
        same_step(ref.step(actions), port.step(actions), f"step {t}")
        games += int(port.height.sum(-1).eq(0).sum())
    capsys.readouterr()  # PettingZoo's warnings on the illegal moves
    assert games > 200 and illegal > 3


def play(env, columns):
    """Drop pieces into `columns` in turn in copy 0 (player_0 first); the last VecStep."""
    for c in columns:
        step = env.step(torch.full((env.num_envs, 2), c))
    return step


def test_a_vertical_win_by_hand():
    env = TorchConnectFour(1)
    env.reset()
    step = play(env, [3, 4, 3, 4, 3, 4])
    assert not step.done[0] and step.acting.tolist() == [[True, False]]
    assert step.action_mask[0, 0].all() and step.action_mask[0, 1].all()  # the waiting agent: any action
    step = play(env, [3])  # player_0's fourth in column 3
    assert step.done[0] and step.terminated.all() and not step.truncated.any()
    assert step.reward.tolist() == [[1.0, -1.0]] and step.episode_return.tolist() == [[1.0, -1.0]]
    assert step.episode_length.tolist() == [7]
    final = step.final_obs[0].reshape(2, ROWS, COLS, 2)
    assert final[0, 2:, 3, 0].tolist() == [1, 1, 1, 1] and final[1, 2:, 3, 1].tolist() == [1, 1, 1, 1]
    assert final[0, 3:, 4, 1].tolist() == [1, 1, 1]  # player_1's pieces, from player_0's side
    assert not step.obs.any() and step.acting.tolist() == [[True, False]]  # a new game, player_0 to move


@pytest.mark.parametrize("cells", [
    [(5, 0), (5, 1), (5, 2), (5, 3)],  # a row
    [(5, 6), (4, 6), (3, 6), (2, 6)],  # a column
    [(5, 0), (4, 1), (3, 2), (2, 3)],  # rising to the right
    [(2, 3), (3, 4), (4, 5), (5, 6)],  # falling to the right
    [(0, 3), (1, 2), (2, 1), (3, 0)],  # the down-left diagonal at the top-left corner
])
def test_four_in_a_row_in_every_direction(cells):
    pieces = torch.zeros(2, ROWS, COLS, dtype=torch.bool)
    for r, c in cells:
        pieces[0, r, c] = True
    pieces[1] = pieces[0]
    pieces[1, cells[1][0], cells[1][1]] = False  # three of them and a gap: no win
    assert TorchConnectFour.four_in_a_row(pieces).tolist() == [True, False]


def test_a_full_board_without_four_is_a_draw():
    """A game that fills the board without a line (found by random play), on both envs."""
    moves = [int(c) for c in "346312151132230334555122560620661605044044"]
    ref, port = envs.make_env("classic:connect_four", 1, 0), TorchConnectFour(1)
    ref.reset()
    port.reset()
    for t, move in enumerate(moves):
        same_step(ref.step(np.full((1, 2), move)), step := port.step(torch.full((1, 2), move)), f"move {t}")
        assert step.done[0] == (t == len(moves) - 1)
    assert step.reward.tolist() == [[0.0, 0.0]] and step.episode_length.tolist() == [42]
    assert step.final_obs[0].sum().item() == 42 * 2  # each view holds every piece once


def test_an_illegal_move_ends_the_game_against_the_mover():
    env = TorchConnectFour(2)
    env.reset()
    play(env, [0, 0, 0, 0, 0, 0])  # column 0 full, player_0 to move
    assert env.action_mask()[:, 0].tolist() == [[False] + [True] * 6] * 2
    step = env.step(torch.tensor([[0, 5], [1, 5]]))  # copy 0 plays the full column, copy 1 column 1
    assert step.done.tolist() == [True, False]
    assert step.reward.tolist() == [[-1.0, 0.0], [0.0, 0.0]]
    assert step.truncated.tolist() == [[True, True], [False, False]]  # PettingZoo's wrapper: terminated and truncated
    assert step.final_action_mask[0, 0].tolist() == [False] + [True] * 6  # player_0 selected (PettingZoo)
    assert step.acting.tolist() == [[True, False], [False, True]]  # copy 0 restarted, copy 1 goes on


def test_resume_exactly():
    a, b = TorchConnectFour(8), TorchConnectFour(8)
    a.reset()
    b.reset()
    rng = np.random.default_rng(0)
    for _ in range(15):
        a.step(a.sample_actions(rng))
    b.load_state_dict(a.state_dict())
    for _ in range(30):
        actions = a.sample_actions()  # from the env's own generator, restored with the rest
        assert torch.equal(actions, b.sample_actions())
        sa, sb = a.step(actions), b.step(actions)
        for field in FIELDS:
            assert torch.equal(getattr(sa, field), getattr(sb, field)), field
    with pytest.raises(ValueError, match="another number of copies"):
        TorchConnectFour(4).load_state_dict(a.state_dict())


def test_random_openings():
    """random_opening=K: each new game starts after 0..K random moves (every count drawn), none of which makes
    four, the mover's turn right after them; games that end restart with an opening of their own."""
    env = envs.make_env("torch:connect_four", 2048, 3, {"random_opening": 5})
    env.reset()
    ended = 0
    for _ in range(40):
        pieces = env.height.sum(-1)
        assert torch.equal(pieces % 2, env.turn) and torch.equal(env.acting[:, 1], env.turn == 1)
        assert torch.equal((env.board > 0).sum((1, 2)), pieces)
        for owner in (1, 2):
            assert not TorchConnectFour.four_in_a_row(env.board == owner).any()
        ended += int(env.step(env.sample_actions()).done.sum())
    assert ended > 1000  # games ended and restarted, each with its own opening (checked above)
    fresh = envs.make_env("torch:connect_four", 4096, 4, {"random_opening": 5})
    fresh.reset()
    counts = torch.bincount(fresh.height.sum(-1), minlength=7)
    assert counts[6:].sum() == 0 and (counts[:6] > 4096 / 6 * 0.8).all(), counts
    assert torch.equal(envs.make_env("torch:connect_four", 4, 4).reset()[0], torch.zeros(4, 2, 84))  # default: none
    with pytest.raises(envs.EnvError, match="random_opening"):
        envs.make_env("torch:connect_four", 2, env_kwargs={"random_opening": 30})


def test_bad_arguments_and_rendering():
    with pytest.raises(envs.EnvError, match="board"):
        envs.make_env("torch:connect_four", 2, env_kwargs={"board": "cube"})
    with pytest.raises(envs.EnvError, match="rows"):
        envs.make_env("torch:connect_four", 2, env_kwargs={"rows": 7})
    assert "torch:connect_four" in envs.known_envs()
    twin = envs.make_env("torch:connect_four", 1, render_mode="rgb_array")  # draws through classic:connect_four
    twin.reset()
    assert twin.render().ndim == 3
    twin.close()


def test_files_that_cannot_learn_from_moves_refuse_it(tmp_path):
    command = [sys.executable, "algos/vdn.py", "--env", "torch:connect_four", "--run-dir", str(tmp_path / "r")]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout and "turn-based" in out.stderr
    assert not (tmp_path / "r").exists()
