"""Win rate, the metric of envs with a winner (SMAX): `evaluate` collects which episodes were won
(`VecStep.episode_won`), the recorder logs `eval/win_rate` and, from the training env's
`take_episode_wins()`, `charts/win_rate`, summary.json holds `eval_win_rate` and `eval_win_history`
(kept across a resume), `--evaluate-checkpoint` reports it, and `run.py plot` tables and curves show it.
Envs without a winner write none of these. The env with a winner here is the coordination matrix game,
won when both agents pick action 0."""
import csv
import json
import math
import os

import numpy as np
import pytest
import torch

import run
from algos import ippo
from common import run_utils
from common.cli import make_args
from common.results import markdown_table, read_run, results_table
from common.run_utils import RunRecorder, evaluate, load_checkpoint, save_checkpoint
from envs.matrix_game import MatrixGame

CPU = torch.device("cpu")


class WinningGame(MatrixGame):
    """The coordination game with a winner: an episode (one step) is won when its payoff is the best, 10.
    It counts its won and finished episodes for `take_episode_wins`, and keeps what each call returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.won = self.finished = 0
        self.taken = []  # every (won, finished) that take_episode_wins returned

    def step(self, actions):
        out = super().step(actions)
        out.episode_won = out.done & (out.reward[:, 0] == self.payoff.max())  # (E,)
        self.won += int(out.episode_won.sum())
        self.finished += int(out.done.sum())
        return out

    def take_episode_wins(self):
        self.taken.append((self.won, self.finished))
        self.won = self.finished = 0
        return self.taken[-1]


class Fixed:
    """An actor whose every action is given: `actions` (E, N), the same at every step."""

    class Dist:
        def __init__(self, actions):
            self.actions = actions

        def mode(self):
            return self.actions[None]  # (1, E, N)

        sample = mode

    def __init__(self, actions):
        self.actions = torch.as_tensor(actions)

    def initial_state(self, E, device):
        return None

    def __call__(self, obs, state, starts, mask):
        return self.Dist(self.actions), state


def scalars(run_path):
    """{tag: [(step, value)]} of a run's scalars.csv."""
    out = {}
    with open(os.path.join(run_path, "scalars.csv"), newline="") as f:
        for row in csv.DictReader(f):
            out.setdefault(row["tag"], []).append((int(row["step"]), float(row["value"])))
    return out


@pytest.fixture
def winning(monkeypatch):
    """`matrix_game` built as WinningGame, in the algorithm file and for --evaluate-checkpoint; the
    training envs made, in order."""
    made = []

    def make(name, num_envs, seed, *args, **kwargs):
        made.append(WinningGame(num_envs, seed))
        return made[-1]

    monkeypatch.setattr(ippo, "make_env", make)
    monkeypatch.setattr(run_utils, "make_env", make)
    return made


def tiny_ippo(tmp_path, **overrides):
    settings = dict(env="matrix_game", num_envs=2, num_steps=5, total_timesteps=20, eval_every=10, eval_episodes=4,
                    eval_num_envs=2, hidden_sizes=(16,), update_epochs=1, cuda=False, run_dir=str(tmp_path / "runs"))
    return make_args(ippo.Args, **{**settings, **overrides})


# ----------------------------------------------------------------------------- evaluate
def test_evaluate_collects_each_episodes_win_in_the_order_of_the_returns():
    env = WinningGame(2, seed=0)
    wins = []
    returns = evaluate(env, Fixed([[0, 0], [1, 1]]), 5, CPU, wins=wins)  # copy 0 wins (10 each), copy 1 does not (2)
    assert returns.tolist() == [20.0, 4.0, 20.0, 4.0, 20.0]  # copy 0 plays 3 episodes, copy 1 plays 2
    assert wins == [True, False, True, False, True]
    plain = []
    evaluate(MatrixGame(2, seed=0), Fixed([[0, 0], [0, 0]]), 4, CPU, wins=plain)
    assert plain == []  # no winner: nothing to collect


# ----------------------------------------------------------------------------- the recorder
def test_charts_win_rate_only_when_an_episode_finished(tmp_path, capsys):
    class Counts:  # a training env that finished no episode in the first iteration, 4 (3 won) in the second
        def __init__(self):
            self.counts = [(0, 0), (3, 4)]

        def take_episode_wins(self):
            return self.counts.pop(0)

    args = make_args(ippo.Args, env="matrix_game", total_timesteps=20, cuda=False)
    recorder = RunRecorder(args, "ippo", str(tmp_path), None, CPU, envs=(Counts(),))
    recorder.progress.every_s = 0  # a console line at every iteration
    for step in (10, 20):
        recorder.log_iteration(step, {}, 0.0, 0.0, [], [])
    summary = recorder.finish(20, {})
    assert scalars(tmp_path)["charts/win_rate"] == [(20, 0.75)]
    assert "eval/win_rate" not in scalars(tmp_path)
    # the env has a winner but was never evaluated: null, as eval_return_mean is
    assert summary["eval_win_rate"] is None and summary["eval_win_history"] == []
    assert "train_win_rate 0.75" in capsys.readouterr().out


# ----------------------------------------------------------------------------- through an algorithm file
def test_ippo_logs_win_rates_and_writes_them_to_summary(tmp_path, winning, capsys):
    summary = ippo.main(tiny_ippo(tmp_path))
    run_path = summary["run_dir"]
    logged = scalars(run_path)
    train_env = winning[0]  # made first: the training env, drained once per iteration
    assert [finished for _, finished in train_env.taken] == [10, 10]  # 2 copies x 5 one-step episodes each time
    assert logged["charts/win_rate"] == [(step, won / 10) for step, (won, _) in zip((10, 20), train_env.taken)]
    assert [step for step, _ in logged["eval/win_rate"]] == [10, 20]
    with open(os.path.join(run_path, "summary.json")) as f:
        written = json.load(f)
    assert written["eval_win_rate"] == summary["eval_win_rate"] == logged["eval/win_rate"][-1][1]
    assert 0.0 <= written["eval_win_rate"] <= 1.0 and written["eval_win_rate"] * 4 % 1 == 0  # 4 episodes
    assert [list(p) for p in logged["eval/win_rate"]] == written["eval_win_history"]
    assert "eval_win_rate" in capsys.readouterr().out  # the console's last line

    result = ippo.main(make_args(ippo.Args, evaluate_checkpoint=run_path, eval_episodes=6, eval_num_envs=2,
                                 cuda=False))
    assert result["eval_win_rate"] * 6 % 1 == 0 and 0.0 <= result["eval_win_rate"] <= 1.0
    assert "win rate" in capsys.readouterr().out


def test_a_resumed_run_keeps_its_win_history(tmp_path, winning):
    whole = ippo.main(tiny_ippo(tmp_path, total_timesteps=40, run_dir=str(tmp_path / "whole")))
    part = ippo.main(tiny_ippo(tmp_path, run_dir=str(tmp_path / "part")))
    resumed = ippo.main(tiny_ippo(tmp_path, total_timesteps=40, resume=part["run_dir"]))
    assert [s for s, _ in resumed["eval_win_history"]] == [10, 20, 30, 40]
    assert resumed["eval_win_history"][:2] == part["eval_win_history"]
    assert resumed["eval_win_history"] == whole["eval_win_history"]  # the matrix game resumes exactly

    # A checkpoint written before the win history was kept: read back from the run's logged scalars.
    older = ippo.main(tiny_ippo(tmp_path, run_dir=str(tmp_path / "older")))
    path = os.path.join(older["run_dir"], "checkpoint.pt")
    ckpt = load_checkpoint(path)
    del ckpt["eval_win_history"]
    save_checkpoint(path, ckpt)
    resumed = ippo.main(tiny_ippo(tmp_path, total_timesteps=40, resume=older["run_dir"]))
    assert [s for s, _ in resumed["eval_win_history"]] == [10, 20, 30, 40]
    assert np.allclose([v for _, v in resumed["eval_win_history"][:2]], [v for _, v in older["eval_win_history"]])


def test_plot_tables_and_curves_show_win_rates(tmp_path, winning):
    runs = [ippo.main(tiny_ippo(tmp_path, seed=seed)) for seed in (1, 2)]
    records = [read_run(r["run_dir"]) for r in runs]
    assert [r["final_win_rate"] for r in records] == [r["eval_win_rate"] for r in runs]
    assert [r["best_win_rate"] for r in records] == [max(v for _, v in r["eval_win_history"]) for r in runs]
    out = run.main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "plots")])
    (row,) = out["rows"]
    assert math.isclose(row["final_win_rate"], np.mean([r["eval_win_rate"] for r in runs]))
    assert math.isclose(row["best_win_rate"], np.mean([r["best_win_rate"] for r in records]))
    assert out["pngs"] == [str(tmp_path / "plots" / name) for name in ("matrix_game.png", "matrix_game_win_rate.png")]
    assert "| final: win rate | best: win rate |" in (tmp_path / "plots" / "results.md").read_text()
    header = (tmp_path / "plots" / "results.csv").read_text().splitlines()[0]
    assert header.endswith(",final_win_rate,best_win_rate")


def test_envs_without_a_winner_write_no_win_rate(tmp_path):
    summary = ippo.main(tiny_ippo(tmp_path))  # the plain matrix game
    assert "eval_win_rate" not in summary and "eval_win_history" not in summary
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert "eval_win_rate" not in json.load(f)
    assert not any("win_rate" in tag for tag in scalars(summary["run_dir"]))
    record = read_run(summary["run_dir"])
    assert record["win_curve"] == [] and math.isnan(record["final_win_rate"])
    table = markdown_table(results_table([record]))
    assert "win rate" not in table
    result = ippo.main(make_args(ippo.Args, evaluate_checkpoint=summary["run_dir"], eval_episodes=2, eval_num_envs=1,
                                 cuda=False))
    assert "eval_win_rate" not in result
