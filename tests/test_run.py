"""run.py end to end: a tiny grid (two algorithms x two seeds) runs, lands in <run-dir>/<env>/<algo>/,
and writes results.json with one entry per run."""
import json
import os

import pytest

import run

TINY = ["--total-timesteps", "20", "--num-envs", "2", "--num-steps", "5", "--eval-episodes", "1",
        "--eval-num-envs", "1", "--hidden-sizes", "16", "--update-epochs", "1", "--no-cuda"]


def test_tiny_grid(tmp_path, capsys):
    results = run.main(["--algo", "mappo", "ippo", "--env", "simple_spread", "--seeds", "2", "--workers", "1",
                        "--run-dir", str(tmp_path), "--", *TINY])
    assert sorted((r["algo"], r["seed"]) for r in results) == [("ippo", 1), ("ippo", 2), ("mappo", 1), ("mappo", 2)]
    for r in results:
        assert r["run_dir"].startswith(os.path.join(str(tmp_path), "simple_spread", r["algo"]))
        assert r["global_step"] == 20
    with open(tmp_path / "results.json") as f:
        assert len(json.load(f)["runs"]) == 4
    table = capsys.readouterr().out
    assert "mappo" in table and "ippo" in table


def test_per_run_flags_after_the_separator_are_rejected(tmp_path):
    with pytest.raises(SystemExit):
        run.main(["--run-dir", str(tmp_path), "--", "--seed", "5"])
