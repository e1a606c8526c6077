"""Cross-play between runs (common/league.py, `run.py crossplay`): the Elo fit, the outcome of a
game, a table over real runs through the command line, and the errors it gives before writing."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from common import league
from common.cli import make_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(num_envs=4, num_steps=8, total_timesteps=64, eval_every=0, eval_episodes=2, eval_num_envs=2,
            hidden_sizes=(16,), cuda=False, torch_threads=1)


def tiny_run(algo, root, env="classic:tictactoe", **settings):
    import importlib
    module = importlib.import_module(f"algos.{algo}")
    return module.main(make_args(module.Args, env=env, run_dir=str(root), **{**TINY, **settings}))["run_dir"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("league")
    return {"both": tiny_run("ippo", root / "both"),
            "first_only": tiny_run("mappo", root / "first", share_params="none", train_groups=("player_1",)),
            "spread": tiny_run("ippo", root / "spread", env="torch:simple_spread", env_kwargs=("max_cycles=4",))}


def cli(*argv):
    return subprocess.run([sys.executable, "run.py", "crossplay", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_elo_recovers_known_ratings():
    """Games drawn from Bradley-Terry with ratings 1200, 1000, 800: the fit finds them within 40."""
    rng = np.random.default_rng(0)
    true = np.array([1200.0, 1000.0, 800.0])
    pairs = np.array([(a, b) for a in range(3) for b in range(3) if a != b] * 2000)
    p = 1 / (1 + 10 ** ((true[pairs[:, 1]] - true[pairs[:, 0]]) / 400))
    scores = (rng.random(len(pairs)) < p).astype(float)
    fitted = league.fit_ratings(pairs, scores, 3)
    assert np.abs(fitted - true).max() < 40 and fitted.mean() == pytest.approx(1000.0)
    always = league.fit_ratings(np.array([[0, 1]] * 50), np.ones(50), 2)  # a clean sweep: finite, far apart
    assert np.isfinite(always).all() and always[0] - always[1] > 400


def test_outcomes_zero_sum_and_median_split():
    zero_sum = {"sides": ["a", "b"], "cells": [{"side_0": "x", "side_1": "y", "returns": [[1, -1], [0, 0], [-1, 1]]}]}
    assert league.outcomes(zero_sum)[0].tolist() == [1.0, 0.5, 0.0]
    general = {"sides": ["a", "b"], "cells": [  # side 0's returns 30, 0, 60 / 90, 30, 0: median 30
        {"side_0": "x", "side_1": "y", "returns": [[30, -5], [0, 0], [60, -10]]},
        {"side_0": "z", "side_1": "y", "returns": [[90, -20], [30, -5], [0, 0]]}]}
    assert [s.tolist() for s in league.outcomes(general)] == [[0.5, 0.0, 1.0], [1.0, 0.5, 0.0]]


def test_crossplay_table_through_the_command_line(runs, tmp_path):
    out = tmp_path / "table"
    result = cli(runs["both"], runs["first_only"], "--random", "--games", "20", "--bootstrap", "20", "--out", str(out))
    assert result.returncode == 0, result.stderr
    table = json.load(open(out / "crossplay.json"))
    assert table["env"] == "classic:tictactoe" and table["sides"] == ["player_1", "player_2"]
    # player_1: both, first_only, random; player_2: both, random (first_only learned player_1 only)
    pairs = {(c["side_0"].split("_s")[0], c["side_1"].split("_s")[0]) for c in table["cells"]}
    assert len(table["cells"]) == 6 and ("mappo", "mappo") not in pairs and ("ippo", "mappo") not in pairs
    for row in table["pairings"]:
        assert row["games"] == 20 and row["win"] + row["draw"] + row["loss"] == pytest.approx(1.0)
        assert row["return_player_1"] == pytest.approx(-row["return_player_2"])  # zero-sum
    assert len(table["elo"]) == 5 and all(e["low"] <= e["rating"] <= e["high"] for e in table["elo"].values())
    with open(out / "crossplay.csv") as f:
        assert len(f.read().strip().splitlines()) == 7
    assert (out / "crossplay.png").stat().st_size > 0 and (out / "elo.png").stat().st_size > 0


def test_crossplay_over_runs_of_different_envs_fails_before_writing(runs, tmp_path):
    out = tmp_path / "nothing"
    result = cli(runs["both"], runs["spread"], "--out", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert "differ in env" in result.stderr and "classic:tictactoe" in result.stderr
    assert not out.exists()
    missing = cli(str(tmp_path / "no_such_run"), "--out", str(out))
    assert missing.returncode == 2 and "no such run folder" in missing.stderr and not out.exists()
