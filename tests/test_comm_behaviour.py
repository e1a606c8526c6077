"""benchmarks/comm_behaviour.py: the information measures worked by hand on toy tables, and the
probe reading a (barely) trained run of each communication task."""
import math
import os
import sys

import numpy as np
import pytest

from algos import mappo
from common.cli import make_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import comm_behaviour  # noqa: E402


def test_entropy_and_mutual_information_by_hand():
    # a word that names the goal: I = H(goal) = log2 3
    goal = np.array([0, 1, 2] * 4)
    assert comm_behaviour.mutual_information_bits(goal, goal + 5) == pytest.approx(math.log2(3))
    assert comm_behaviour.entropy_bits(goal) == pytest.approx(math.log2(3))
    # a word independent of the goal: every (goal, word) pair once, I = 0, H(word) = 1
    g, w = np.repeat([0, 1, 2], 2), np.tile([0, 1], 3)
    assert comm_behaviour.mutual_information_bits(g, w) == pytest.approx(0.0, abs=1e-12)
    assert comm_behaviour.entropy_bits(w) == pytest.approx(1.0)
    # p(0,0) = 1/2, p(1,0) = p(1,1) = 1/4: H(X) = 1, H(Y) = H(3/4, 1/4), H(X, Y) = 1.5
    x, y = np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1])
    h_y = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert comm_behaviour.mutual_information_bits(x, y) == pytest.approx(1 + h_y - 1.5)
    # the same word always: no entropy, no information
    assert comm_behaviour.entropy_bits(np.zeros(7, dtype=int)) == 0.0
    assert comm_behaviour.mutual_information_bits(goal, np.zeros_like(goal)) == pytest.approx(0.0, abs=1e-12)


def test_conditional_table_rows_are_word_frequencies_per_goal():
    table = comm_behaviour.conditional_table(np.array([0, 0, 0, 0, 2]), np.array([1, 1, 1, 3, 0]), 3, 4)
    np.testing.assert_allclose(table, [[0, 0.75, 0, 0.25], [0, 0, 0, 0], [1, 0, 0, 0]])


def test_task_names_and_other_envs():
    assert comm_behaviour.task_of("torch:simple_reference") == "simple_reference"
    assert comm_behaviour.task_of("simple_speaker_listener_v4") == "simple_speaker_listener"
    with pytest.raises(SystemExit, match="simple_reference"):
        comm_behaviour.task_of("torch:simple_spread")


@pytest.mark.parametrize("env,pairs,words", [("torch:simple_speaker_listener", 1, 3), ("torch:simple_reference", 2, 10)])
def test_probe_reads_a_trained_run(tmp_path, env, pairs, words):
    """Figures in their ranges, one entry per speaker, P(word | goal) rows that sum to 1 for goals seen."""
    run = mappo.main(make_args(mappo.Args, env=env, total_timesteps=100, num_envs=2, num_steps=25, eval_every=0,
                               eval_episodes=1, eval_num_envs=1, cuda=False, run_dir=str(tmp_path)))
    (row,) = comm_behaviour.main([run["run_dir"], "--episodes", "30", "--json", str(tmp_path / "c.json"),
                                  "--plot", str(tmp_path / "c.png")])
    assert os.path.isfile(tmp_path / "c.json") and os.path.isfile(tmp_path / "c.png")
    assert len(row["pairs"]) == pairs and row["words"] == words and row["return"] < 0
    for p in row["pairs"]:
        assert 0 <= p["mi_goal_word"] <= math.log2(3) + 1e-9 and 0 <= p["word_entropy"] <= math.log2(words) + 1e-9
        assert 0 <= p["accuracy"] <= 1 and 0 <= p["deaf_accuracy"] <= 1 and p["final_distance"] > 0
        table = np.array(p["words_given_goal"])
        assert table.shape == (3, words)
        assert np.all((np.isclose(table.sum(1), 1, atol=2e-3)) | (table.sum(1) == 0))


def test_learning_comm_report_means_over_seeds_within_the_budget(tmp_path):
    """benchmarks/learning_comm.py: the best and last point of the 3-seed mean curve within the bar's
    budget (a later, better point is not counted), and the verdicts met / NOT met / open."""
    import learning_comm

    def record(seed, curve, algo="mappo", task="simple_reference"):
        return {"label": algo, "algo": algo, "task": task, "env": f"torch:{task}", "seed": seed, "path": f"r{seed}",
                "curve": curve, "global_step": curve[-1][0], "finished": True, "args": {}}

    budget = 10_000_000
    runs = [record(s, [(5_000_000, -30.0 + s), (budget, -22.0 + s), (12_000_000, -5.0)]) for s in range(3)]
    (row,) = learning_comm.report(runs, str(tmp_path / "r.json"))
    assert row["best_mean"] == pytest.approx(-21.0) and row["last_mean"] == pytest.approx(-21.0)
    assert row["best_at"] == budget and row["met"] is False and row["bar"] == -20.0
    assert row["best_per_seed"] == pytest.approx([-22.0, -21.0, -20.0])
    short = [record(s, [(1_000_000, -40.0)], "qmix", "simple_speaker_listener") for s in range(3)]
    (row,) = learning_comm.report(short)
    assert row["met"] is None and row["bar"] == -25.7  # short of the 2M budget and below: open
    assert learning_comm.verdict(-14.0, 1_000, -15.0, 5_000_000) is True
    assert learning_comm.task_of("simple_speaker_listener_v4") == "simple_speaker_listener"
    assert learning_comm.task_of("torch:simple_spread") is None


def test_learning_comm_joins_stored_seeds_to_new_runs(tmp_path, monkeypatch):
    """--with-json: the runs of an earlier results file join the table (seeds whose folders are gone);
    a run of the same label, task and seed under --from-runs replaces the stored one."""
    import learning_comm

    def record(seed, value):
        curve = [(1_000_000, value - 5.0), (2_000_000, value)]
        return {"label": "iql", "algo": "iql", "task": "simple_reference", "env": "torch:simple_reference",
                "seed": seed, "path": f"r{seed}", "curve": curve, "global_step": 2_000_000, "finished": True,
                "args": {"config": None}}

    stored = tmp_path / "seeds12.json"
    learning_comm.report([record(1, -30.0), record(2, -40.0)], str(stored))
    back = learning_comm.stored_runs(str(stored))
    assert [(r["seed"], r["curve"][-1], r["finished"], r["algo"]) for r in back] == [
        (1, (2_000_000, -30.0), True, "iql"), (2, (2_000_000, -40.0), True, "iql")]
    assert learning_comm.stored_runs(str(stored), algos=["qmix"]) == []
    rows = learning_comm.main(["--from-runs", str(tmp_path / "no_runs_here"), "--with-json", str(stored),
                               "--json", str(tmp_path / "all.json")])
    assert rows[0]["seeds"] == 2 and rows[0]["best_mean"] == pytest.approx(-35.0)
    monkeypatch.setattr(learning_comm, "read_runs", lambda root, algos, tasks: [record(2, -20.0), record(3, -24.0)])
    rows = learning_comm.main(["--from-runs", str(tmp_path), "--with-json", str(stored)])
    assert rows[0]["seeds"] == 3 and sorted(rows[0]["best_per_seed"]) == pytest.approx([-30.0, -24.0, -20.0])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="not a results file of this script"):
        learning_comm.stored_runs(str(tmp_path / "bad.json"))
