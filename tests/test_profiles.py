"""Performance profiles and the probability of improvement (common/results.py, rliable's definitions,
Agarwal et al. 2021): the statistics against values worked by hand, then `run.py plot` drawing them
through the real command line from a 2-algorithm x 3-seed grid of tiny runs."""
import csv
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import run
from common.results import (find_runs, improvement_table, mean_probability_of_improvement, normalize,
                            performance_profile, performance_profiles, probability_of_improvement, read_run,
                            score_bounds, stratified_bootstrap_ci, stratified_resample)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "MARL_DEBUG"}
TINY = ["--num-envs", "2", "--num-steps", "5", "--eval-every", "10", "--eval-episodes", "1", "--eval-num-envs", "1",
        "--hidden-sizes", "16", "--update-epochs", "1", "--no-cuda"]


def arrays(**per_env):
    return {env: np.array(x, dtype=float) for env, x in per_env.items()}


# ----------------------------------------------------------------------------- statistics by hand
def test_probability_of_improvement_counts_pairs_and_half_ties():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.0])
    # x=1 beats 0 (1); x=2 ties 2 twice and beats 0 (0.5 + 0.5 + 1); x=3 beats all three (3): 6 of 9 pairs
    assert probability_of_improvement(x, y) == 6 / 9
    assert probability_of_improvement(y, x) == 3 / 9  # the ties count 1/2 both ways, so the two sum to 1
    assert probability_of_improvement(x, x) == 0.5
    assert probability_of_improvement(np.array([5.0]), np.array([4.0, 6.0])) == 0.5


def test_probability_of_improvement_averages_over_the_shared_envs():
    x = arrays(a=[1, 2, 3], b=[5])
    y = arrays(a=[2, 2, 0], b=[4, 6], c=[0])  # c: only Y ran it, so it does not count
    assert np.isclose(mean_probability_of_improvement(x, y), (6 / 9 + 0.5) / 2)
    assert np.isnan(mean_probability_of_improvement(x, arrays(c=[0])))


def test_performance_profile_weights_each_env_equally():
    taus = np.array([0.0, 0.5, 0.9])
    # a: above 0 two of three, above 0.5 and 0.9 one of three; b: above 0 both, above 0.5 one, above 0.9 none
    profile = performance_profile(arrays(a=[0.0, 0.5, 1.0], b=[0.2, 0.8]), taus)
    assert np.allclose(profile, [(2 / 3 + 1) / 2, (1 / 3 + 1 / 2) / 2, (1 / 3 + 0) / 2])


def test_stratified_resample_keeps_each_label_and_env_to_its_own_seeds():
    scores = {"A": arrays(e=[1, 2, 3], f=[10]), "B": arrays(e=[4, 5])}
    rng = np.random.default_rng(0)
    for _ in range(20):
        sample = stratified_resample(scores, rng)
        assert {label: {env: len(x) for env, x in per_env.items()} for label, per_env in sample.items()} == {
            "A": {"e": 3, "f": 1}, "B": {"e": 2}}
        assert all(set(x) <= set(scores[label][env]) for label, per_env in sample.items() for env, x in per_env.items())


def test_min_max_and_given_bounds_normalisation():
    scores = {"A": arrays(e=[-40, -30], f=[1, 1]), "B": arrays(e=[-20], g=[0, 10])}
    assert score_bounds(scores) == {"e": (-40.0, -20.0), "f": (1.0, 1.0), "g": (0.0, 10.0)}  # over every label's runs
    normalized = normalize(scores, score_bounds(scores))
    assert normalized["A"]["e"].tolist() == [0.0, 0.5] and normalized["B"]["e"].tolist() == [1.0]
    assert normalized["A"]["f"].tolist() == [0.0, 0.0]  # every run equal: 0, not a division by zero
    bounds = score_bounds(scores, {"e": (-79.0, -22.6)})
    assert bounds["e"] == (-79.0, -22.6) and bounds["g"] == (0.0, 10.0)
    assert np.allclose(normalize(scores, bounds)["B"]["e"], (-20 + 79) / (-22.6 + 79))  # above 1: past the expert


def test_bootstrap_intervals_contain_the_estimate_and_are_reproducible():
    rng = np.random.default_rng(1)
    scores = {"A": arrays(e=rng.normal(0.6, 0.2, 8), f=rng.normal(0.5, 0.2, 6)),
              "B": arrays(e=rng.normal(0.4, 0.2, 8), f=rng.normal(0.5, 0.2, 5))}
    taus = np.linspace(0, 1, 11)
    for profile, low, high in performance_profiles(scores, taus, n_boot=500).values():
        assert profile.shape == low.shape == high.shape == (11,)
        assert np.all(low <= profile + 1e-12) and np.all(profile <= high + 1e-12)
    rows = improvement_table(scores, n_boot=500)
    assert [(r["x"], r["y"], r["envs"]) for r in rows] == [("A", "B", "e f"), ("B", "A", "e f")]
    assert np.isclose(rows[0]["p_improvement"] + rows[1]["p_improvement"], 1.0)
    assert all(r["ci_low"] <= r["p_improvement"] <= r["ci_high"] and r["ci_low"] < r["ci_high"] for r in rows)
    assert improvement_table(scores, n_boot=500) == rows  # a fixed bootstrap seed
    one_seed = {"A": arrays(e=[1.0]), "B": arrays(e=[0.0])}
    assert improvement_table(one_seed)[0] == {"x": "A", "y": "B", "envs": "e", "p_improvement": 1.0, "ci_low": 1.0,
                                              "ci_high": 1.0}  # nothing to resample: a zero-width interval
    low, high = stratified_bootstrap_ci(lambda s: np.array([s["A"]["e"].mean()]), one_seed)
    assert low.tolist() == high.tolist() == [1.0]
    assert improvement_table({"A": arrays(e=[1.0]), "B": arrays(f=[0.0])}) == []  # no env in common


# ----------------------------------------------------------------------------- run.py plot, command line
def run_py(*args):
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_plot_draws_profiles_and_improvement_from_a_2_algorithm_3_seed_grid(tmp_path):
    runs, plots = tmp_path / "runs", tmp_path / "plots"
    run.main(["--algo", "mappo", "ippo", "--env", "torch:simple_spread", "--seeds", "3", "--workers", "1",
              "--run-dir", str(runs), "--", "--total-timesteps", "20", *TINY])
    procs = {"plot": run_py("plot", str(runs), "--out", str(plots)),
             "bad spec": run_py("plot", str(runs), "--normalize", "torch:simple_spread=-22.6:-79"),
             "unknown env": run_py("plot", str(runs), "--normalize", "torch:simple_sprad=-79:-22.6")}
    (out, err), bad, unknown = (proc.communicate(timeout=300) for proc in procs.values())
    assert procs["plot"].returncode == 0 and "Traceback" not in err, err
    for name in ("profiles.png", "improvement.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(plots / name) > 10_000

    final = {"mappo": [], "ippo": []}  # each run's final greedy evaluation return, read back from its folder
    for path in find_runs(str(runs)):
        final[read_run(path)["label"]].append(read_run(path)["final_return"])
    assert [len(x) for x in final.values()] == [3, 3]
    expected = probability_of_improvement(np.array(final["mappo"]), np.array(final["ippo"]))
    printed = re.search(r"^\| mappo \| ippo \| torch:simple_spread \| ([0-9.]+) \| \[([0-9.]+), ([0-9.]+)\] \|$", out,
                        re.MULTILINE)
    assert printed and float(printed[1]) == round(expected, 3), out
    assert float(printed[2]) <= float(printed[1]) <= float(printed[3])
    with open(plots / "improvement.csv") as f:
        table = {(row["x"], row["y"]): float(row["p_improvement"]) for row in csv.DictReader(f)}
    assert table == {("mappo", "ippo"): expected, ("ippo", "mappo"): pytest.approx(1 - expected)}
    assert "torch:simple_spread: min-max over its runs" in out  # which normalisation the profiles use

    for (stdout, stderr), proc, piece in ((bad, procs["bad spec"], "write ENV=LOW:HIGH with LOW < HIGH"),
                                         (unknown, procs["unknown env"], "did you mean 'torch:simple_spread'")):
        assert proc.returncode == 2 and "Traceback" not in stdout + stderr, stderr
        assert stderr.startswith("error: ") and stderr.count("\n") == 1 and piece in stderr, stderr
