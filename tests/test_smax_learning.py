"""A learning smoke on the torch SMAX port: MAPPO learns to win `torch:smax_3m` battles.

Three marines against three marines driven by SMAX's heuristic enemy. A uniformly random legal
policy (`env.sample_actions`) won 0 of 1,005 battles (seed 0, the default 100-step limit). MAPPO
with its defaults, 128 copies and 200k env steps (30-40 s on the loaded 2-core CPU) reached greedy
evaluation win rates of 0.57-0.76 with seeds 1-6 (100 evaluation battles each; 0.39-0.49 before a dead
unit stayed in the team to the battle's end); the test asks for 0.4 with seed 1, so a win rate far
above the random policy's and well below what the seeds reached.
It checks that the observations, masks, rewards and deaths of the port carry what a policy needs to
win, and that `eval_win_rate` reaches summary.json; the learning bars themselves live in benchmarks/.
"""
import json
import os

from algos import mappo
from common.cli import make_args

MIN_WIN_RATE = 0.4  # a random policy: 0.0 (0 of 1,005 battles)


def test_mappo_wins_smax_3m(tmp_path):
    args = make_args(mappo.Args, env="torch:smax_3m", seed=1, num_envs=128, total_timesteps=200_000,
                     eval_every=0, eval_episodes=100, eval_num_envs=50, checkpoint_every=0, cuda=False,
                     run_dir=str(tmp_path))
    summary = mappo.main(args)
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk["eval_episodes"] == 100
    win_rate = on_disk["eval_win_rate"]
    assert win_rate >= MIN_WIN_RATE, \
        f"MAPPO won {win_rate:.2f} of its evaluation battles after 200k env steps (seeds 1-6 reached 0.57-0.76)"


def test_jaxmarl_baseline_runs_become_the_reference_bar(tmp_path):
    """benchmarks/learning_smax.py --reference: the baseline runs of one (algo, map) are averaged point by
    point and the bar is the best point within the budget, as for our own runs; the committed run loads."""
    import pytest

    from benchmarks.learning_smax import BUDGET, load_reference
    paths = []
    for seed, curve in enumerate([[[500_000, 0.5], [1_000_000, 0.9], [20_000_000, 1.0]],
                                  [[500_000, 0.7], [1_000_000, 0.7], [20_000_000, 1.0]]]):
        paths.append(str(tmp_path / f"run{seed}.json"))
        with open(paths[-1], "w") as f:
            json.dump({"algo": "mappo", "map": "3m", "seed": seed, "greedy_eval_curve": curve}, f)
    rates, source, curves = load_reference(paths, budget=10_000_000)
    assert rates == {("mappo", "3m"): pytest.approx(0.8)}, "mean of (0.5, 0.7) and (0.9, 0.7); 20M is past the budget"
    assert "seed 1" in source
    assert curves[("mappo", "3m")] == {"curve": [[500_000, pytest.approx(0.6)], [1_000_000, pytest.approx(0.8)]],
                                       "runs": 2}
    committed = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "learning_smax",
                             "jaxmarl-baseline_mappo_smax-3m_10m.json")
    rates, _, _ = load_reference([committed], BUDGET)
    assert 0.0 < rates[("mappo", "3m")] <= 1.0


def test_stored_seeds_join_the_table(tmp_path, capsys):
    """benchmarks/learning_smax.py --with-json: a results file's runs come back as the records they were (seed 1
    of an earlier session joins seeds 2 and 3 read from their folders), the 3-seed row is their mean, and a
    file that is not one of the script's fails in one line."""
    import pytest

    from benchmarks.learning_smax import report, stored_runs
    curves = {1: [(500_000, 0.0), (1_000_000, 0.2)], 2: [(500_000, 0.1), (1_000_000, 0.4)],
              3: [(500_000, 0.2), (1_000_000, 0.3)]}
    records = [dict(label="mappo", algo="mappo", env="torch:smax_5m_vs_6m", seed=seed, map="5m_vs_6m", family="torch",
                    eval_policy="greedy", win_curve=curve, global_step=1_000_000) for seed, curve in curves.items()]
    stored = str(tmp_path / "seed1.json")
    report(records[:1], {}, out_path=stored)
    back = stored_runs(stored)
    assert [(r["label"], r["map"], r["seed"], r["win_curve"], r["global_step"]) for r in back] == \
        [("mappo", "5m_vs_6m", 1, curves[1], 1_000_000)]
    assert stored_runs(stored, maps=["3m"]) == [] and stored_runs(stored, algos=["ippo"]) == []
    row, = report(back + records[1:], {})
    assert row["seeds"] == 3 and row["best_mean_win_rate"] == pytest.approx(0.3) and row["best_at"] == 1_000_000
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(SystemExit, match="not a results file of this script"):
        stored_runs(str(tmp_path / "other.json"))


def test_a_row_records_the_arguments_its_seeds_share(tmp_path):
    """A results file says what it measured: each row keeps the arguments every seed ran with (seeds, folders
    and thread counts left out; an argument the seeds disagree on left out too), and they come back with
    --with-json, so a seed read from a stored file keeps them."""
    from benchmarks.learning_smax import report, stored_runs
    args = [{"seed": 1, "run_dir": "runs/a", "torch_threads": 1, "ent_coef": 0.0, "gamma": 0.95},
            {"seed": 2, "run_dir": "runs/b", "torch_threads": 2, "ent_coef": 0.0, "gamma": 0.99}]
    records = [dict(label="mappo", algo="mappo", env="torch:smax_3m", seed=a["seed"], map="3m", family="torch",
                    eval_policy="greedy", win_curve=[(500_000, 0.5)], global_step=500_000, args=a) for a in args]
    stored = str(tmp_path / "stored.json")
    row, = report(records, {}, out_path=stored)
    assert row["args"] == {"ent_coef": 0.0}
    back = stored_runs(stored)
    assert [r["args"] for r in back] == [{"ent_coef": 0.0}] * 2
    assert report(back, {})[0]["args"] == {"ent_coef": 0.0}
    assert report([{**r, "args": None} for r in records], {})[0]["args"] is None, "no args.json: nothing claimed"
    assert report([records[0], {**records[1], "args": None}], {})[0]["args"] is None, "not every seed's: not claimed"


def test_versus_judges_every_label_against_another_within_the_same_budget():
    """benchmarks/learning_smax.py --versus mappo --total-timesteps 2000000: MAPPO's 10M runs are cut at the
    budget (its 1.0 at 5M does not count), a point one iteration past the budget counts, and each other label's
    best is judged against MAPPO's best within 2M."""
    import pytest

    from benchmarks.learning_smax import report

    def runs(label, curves):
        return [dict(label=label, algo=label.split(",")[0], env="torch:smax_2s3z", seed=seed, map="2s3z",
                     family="torch", eval_policy="greedy", win_curve=curve, global_step=curve[-1][0])
                for seed, curve in enumerate(curves, 1)]
    mappo = runs("mappo", [[(1_004_800, 0.4), (2_003_200, 0.6), (5_000_000, 1.0)],
                           [(1_004_800, 0.6), (2_003_200, 0.8), (5_000_000, 1.0)]])
    mat = runs("mat", [[(1_004_800, 0.5), (2_003_200, 0.9)], [(1_004_800, 0.5), (2_003_200, 0.5)]])
    dec = runs("mat,dec", [[(1_004_800, 0.5), (2_003_200, 0.6)], [(1_004_800, 0.5), (2_003_200, 0.6)]])
    rows = {row["algo"]: row for row in report(mappo + mat + dec, {}, budget=2_000_000, versus="mappo")}
    assert rows["mappo"]["best_mean_win_rate"] == pytest.approx(0.7)
    assert [bar["kind"] for bar in rows["mappo"]["bars"]] == ["floor"], "no bar against itself"
    assert rows["mat"]["bars"] == [{"kind": "mappo", "bar": pytest.approx(0.7), "met": True}]
    assert rows["mat,dec"]["bars"] == [{"kind": "mappo", "bar": pytest.approx(0.7), "met": False}]


def test_versus_names_a_label_no_run_has(tmp_path):
    """A --versus label that no run carries ends in one line that lists the labels there are, no traceback."""
    import subprocess
    import sys

    repo = os.path.join(os.path.dirname(__file__), "..")
    stored = os.path.join(repo, "benchmarks", "results", "learning_smax", "mappo_smax-2s3z-torch_10m.json")
    done = subprocess.run([sys.executable, "benchmarks/learning_smax.py", "--from-runs", str(tmp_path / "none"),
                           "--algo", "mappo", "--maps", "2s3z", "--with-json", stored, "--versus", "mapo"],
                          cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--versus mapo: no run has that label" in done.stderr and "['mappo']" in done.stderr
