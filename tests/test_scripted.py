"""Scripted players as opponents (common/scripted.py): connect four's batched win-or-block and
tic-tac-toe's perfect player against the benchmark's one-position players, a group played by it through an algorithm
file's command line, in a match, and the errors a wrong name or game gives before anything is written."""
import json
import os
import subprocess
import sys

import numpy as np
import torch

from benchmarks.game_opponents import _c4_board, _ttt_move_value, _winning_columns
from common import league
from common.scripted import perfect_tictactoe
from envs.torch_connect_four import TorchConnectFour, win_or_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_batched_win_or_block_plays_as_the_one_position_player():
    """Over random games of the torch port, every batched move is one the benchmark's player could make:
    a winning column when there is one, else a blocking one, else any legal column; image boards alike."""
    env = TorchConnectFour(128, seed=3)
    obs, _, mask = env.reset()
    rows, seen = torch.arange(128), {"win": 0, "block": 0}
    for t in range(30):
        mover = env.turn.clone()
        own, legal = obs[rows, mover], mask[rows, mover]
        moves = win_or_block(own, legal, torch.Generator().manual_seed(t))
        assert torch.equal(moves, win_or_block(own.reshape(128, 6, 7, 2), legal, torch.Generator().manual_seed(t)))
        for i in range(128):
            board, cols = _c4_board(own[i].reshape(6, 7, 2).numpy()), np.flatnonzero(legal[i].numpy())
            wins, blocks = _winning_columns(board, cols, 1), _winning_columns(board, cols, -1)
            assert int(moves[i]) in (wins or blocks or cols.tolist())
            seen["win"] += bool(wins)
            seen["block"] += bool(blocks) and not wins
        step = env.step(env.sample_actions())
        obs, mask = step.obs, step.action_mask
    assert seen["win"] > 20 and seen["block"] > 20  # both rules were exercised


def test_win_or_block_takes_a_win_before_a_block():
    board = torch.zeros(1, 6, 7, 2)
    board[0, 5, 0:3, 0] = 1  # its own three in the bottom row: column 3 wins
    board[0, 3:6, 6, 1] = 1  # the opponent's three in column 6: blocking it would be column 6
    assert win_or_block(board, torch.ones(1, 7, dtype=torch.bool)).item() == 3
    board[0, 5, 0:3, 0] = 0
    board[0, 5, 0:2, 0] = 1
    assert win_or_block(board.reshape(1, 84), torch.ones(1, 7, dtype=torch.bool)).item() == 6


def cli(*argv, tmp):
    return subprocess.run([sys.executable, "algos/ippo.py", "--env", "torch:connect_four", "--share-params", "none",
                           "--num-envs", "8", "--num-steps", "16", "--total-timesteps", "256", "--eval-every", "0",
                           "--eval-episodes", "40", "--hidden-sizes", "16", "--torch-threads", "1", "--run-dir",
                           str(tmp), *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_seat_played_by_win_or_block_through_the_command_line(tmp_path):
    """player_1 is the scripted player from the first move to the evaluation, which it wins (against an
    untrained player_0), and in `--evaluate-checkpoint` of the run (which printed a turn-based game's
    refusal before: evaluation learns nothing)."""
    out = cli("--load-group", "player_1=scripted:win_or_block", tmp=tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    run = next((tmp_path / "runs").iterdir())
    summary = json.load(open(run / "summary.json"))
    assert summary["status"] == "finished" and summary["eval_group_returns"]["player_1"] > 0.4
    assert json.load(open(run / "args.json"))["load_group"] == ["player_1=scripted:win_or_block"]
    # the checkpoint plays again with the scripted seat, and each side's return is printed
    again = subprocess.run([sys.executable, "algos/ippo.py", "--evaluate-checkpoint", str(run),
                            "--eval-episodes", "20"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    line = again.stdout.strip().splitlines()[-1]
    assert "by group: player_0 " in line and float(line.split("player_1 ")[1]) > 0.2, line


def test_a_wrong_scripted_player_fails_in_one_line_before_writing(tmp_path):
    for spec, message in (("scripted:no_such", "no scripted player 'no_such'; there are: scripted:win_or_block"),
                          ("scripted:win_or_block", "plays connect_four, not torch:simple_tag")):
        if "no_such" in spec:
            out = cli("--load-group", f"player_1={spec}", tmp=tmp_path / "runs")
        else:
            out = subprocess.run([sys.executable, "algos/ippo.py", "--env", "torch:simple_tag", "--share-params",
                                  "group", "--load-group", f"adversary={spec}", "--run-dir", str(tmp_path / "runs")],
                                 cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode != 0 and message in out.stderr, out.stderr
        assert "Traceback" not in out.stderr + out.stdout and len(out.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "runs").exists()


def test_win_or_block_in_a_match_of_the_pettingzoo_game():
    """league.play seats the scripted player in PettingZoo's own connect four (the adapter's flat
    observations) against random moves: it wins nearly every game in either seat."""
    first = league.play("classic:connect_four", (), {"player_0": "scripted:win_or_block"}, games=40, seed=1)
    second = league.play("classic:connect_four", (), {"player_1": "scripted:win_or_block"}, games=40, seed=2)
    assert (first[:, 0] > 0).mean() >= 0.8 and (second[:, 1] > 0).mean() >= 0.8


def test_batched_perfect_tictactoe_keeps_the_result_of_every_position():
    """Over random games, every move of the batched perfect player is one the benchmark's varied perfect
    player could make (it keeps the position's minimax result); flat and plane boards alike."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        board = np.zeros(9, np.int64)  # +1 the player to move, -1 the other, by cell
        for _ in range(9):
            legal = np.flatnonzero(board == 0)
            obs = torch.as_tensor(np.stack([board == 1, board == -1], -1), dtype=torch.float32)  # (9, 2)
            mask = torch.as_tensor(board == 0)[None]
            moves = [int(perfect_tictactoe(obs.reshape(1, 18), mask)),
                     int(perfect_tictactoe(obs.reshape(1, 3, 3, 2), mask, torch.Generator().manual_seed(checked)))]
            results = {a: int(np.sign(_ttt_move_value(tuple(board.tolist()), a))) for a in legal}
            assert all(results[m] == max(results.values()) for m in moves), (board, moves, results)
            checked += 1
            board[rng.choice(legal)] = 1  # the game goes on at random, then the other player is to move
            if any(all(board[i] == 1 for i in line) for line in ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6),
                                                                 (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))):
                break
            board = -board
    assert checked > 300


def test_perfect_tictactoe_never_loses_in_a_match():
    """In PettingZoo's tic-tac-toe: against random moves it never loses in either seat, against itself
    every game is a draw."""
    first = league.play("classic:tictactoe", (), {"player_1": "scripted:perfect"}, games=60, seed=1)
    second = league.play("classic:tictactoe", (), {"player_2": "scripted:perfect"}, games=60, seed=2)
    both = league.play("classic:tictactoe", (), {"player_1": "scripted:perfect", "player_2": "scripted:perfect"},
                       games=30, seed=3)
    assert (first[:, 0] >= 0).all() and (second[:, 1] >= 0).all() and (first[:, 0] > 0).mean() > 0.7
    assert (both == 0).all()
