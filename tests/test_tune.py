"""`run.py tune`: the search space, the objective and median pruning read from run folders, and
the real command line: a tiny study finds a point better than its worst trial and writes a preset
that loads; the same command extends or resumes the study (a trial stopped by SIGTERM runs again,
its runs resuming); usage errors are one line."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from algos import mappo
from common.cli import ConfigError, load_preset, parse_args
from common.tune import (Dimension, PruneWatch, curve_value, dimension, scalar, search_space, seed_mean_curve)

optuna = pytest.importorskip("optuna", reason="run.py tune needs Optuna: pip install -e '.[tune]'")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "MARL_DEBUG"}
TINY = ["--total-timesteps", "2000", "--num-envs", "4", "--num-steps", "25", "--eval-every", "1000", "--eval-episodes",
        "4", "--eval-num-envs", "4", "--no-cuda"]


def run_py(*args, **popen):
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env={**ENV, **popen.pop("env", {})},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


# ------------------------------------------------------------------ the space
def fields():
    import dataclasses

    return {f.name: f for f in dataclasses.fields(mappo.Args)}


def test_dimensions_from_the_command_line_and_yaml_follow_the_field_type():
    lr = dimension(fields(), "learning_rate", "1e-4:3e-3:log")
    assert (lr.kind, lr.low, lr.high, lr.log) == ("float", 1e-4, 3e-3, True)
    mb = dimension(fields(), "num_minibatches", "1:8")
    assert (mb.kind, mb.low, mb.high, mb.log) == ("int", 1, 8, False) and isinstance(mb.low, int)
    choice = dimension(fields(), "num_minibatches", "1,2,4")
    assert (choice.kind, choice.choices) == ("choice", [1, 2, 4])
    flags = dimension(fields(), "value_norm", "true,false")
    assert flags.choices == [True, False]
    yaml_range = dimension(fields(), "clip_coef", {"low": 0.1, "high": 0.3, "step": 0.05})
    assert yaml_range.kind == "float" and yaml_range.step == 0.05
    assert yaml_range.holds(0.2) and not yaml_range.holds(0.22) and not yaml_range.holds(0.35)
    assert lr.holds(2e-3) and not lr.holds(1e-2) and choice.holds(4) and not choice.holds(8)
    assert scalar("1e-5") == 1e-5 and scalar("3") == 3 and scalar("tanh") == "tanh" and scalar("true") is True


@pytest.mark.parametrize("spec, message", [
    (["learnin_rate=1:2"], "has no such field"),
    (["learning_rate"], "KEY=LOW:HIGH"),
    (["learning_rate=0.1:0.01"], "must be below"),
    (["learning_rate=0:1:log"], "log range needs low > 0"),
    (["learning_rate=1:2:3"], "KEY=LOW:HIGH"),
    (["num_minibatches=1.5:4"], "not an integer"),
    (["activation=1:2"], "needs a numeric field"),
    (["learning_rate=a:b"], "is not a number"),
    (["seed=1,2"], "run.py tune sets it"),
    ([], "give a search space"),
])
def test_bad_spaces_are_clear_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        search_space(mappo.Args, spec, None, ("seed", "env"))


def test_a_space_file_and_the_command_line_combine(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("learning_rate: {low: 1.0e-4, high: 1.0e-2, log: true}\nnum-minibatches: [1, 2]\n")
    space = {d.name: d for d in search_space(mappo.Args, ["num_minibatches=4,8"], str(path), ())}
    assert space["learning_rate"].log and space["num_minibatches"].choices == [4, 8]  # the command line wins


# ------------------------------------------------------------------ objective and pruning
def test_the_objective_is_the_seed_mean_at_steps_every_seed_reached():
    a, b = [(100, -50.0), (200, -40.0), (300, -30.0)], [(100, -60.0), (200, -20.0)]
    assert curve_value(a, "final") == -30.0 and curve_value(a, "mean") == -40.0
    assert seed_mean_curve([a, b], "final") == [(100, -55.0), (200, -30.0)]
    assert seed_mean_curve([a, b], "mean") == [(100, -55.0), (200, (-45.0 - 40.0) / 2)]
    assert seed_mean_curve([a, []], "final") == []  # a seed without an evaluation yet: nothing to report


def write_evals(folder, points):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "eval_episodes.jsonl"), "w") as f:
        for step, returns in points:
            f.write(json.dumps({"step": step, "returns": returns}) + "\n")


def test_a_trial_below_the_median_of_earlier_ones_is_pruned_and_one_above_is_not(tmp_path):
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    for level in (-30.0, -40.0):  # two finished trials, median -35 at every step
        trial = study.ask()
        for step in (1000, 2000):
            trial.report(level, step)
        study.tell(trial, level)
    for returns, pruned in (([-50.0, -52.0], True), ([-20.0, -22.0], False)):
        trial = study.ask()
        folders = [str(tmp_path / f"{pruned}_{seed}") for seed in (1, 2)]
        watch = PruneWatch(trial, lambda: folders, "final")
        assert not watch.poll()  # no evaluation written yet
        write_evals(folders[0], [(1000, returns)])
        assert not watch.poll()  # one seed only: not comparable yet
        write_evals(folders[1], [(1000, returns)])
        assert watch.poll() is pruned and study.trials[-1].intermediate_values == {1000: sum(returns) / 2}
        assert (watch.pruned_at == 1000) is pruned


# ------------------------------------------------------------------ the command line
def tune_args(tmp_path, trials, *more):
    return ["tune", "--algo", "mappo", "--env", "torch:simple_spread", "--trials", str(trials), "--seeds", "1",
            "--workers", "2", "--space", "learning_rate=1e-5:2e-2:log", "--no-pruning", "--random-trials", "2",
            "--study", str(tmp_path / "study"), "--preset", str(tmp_path / "best.yaml"), *more, "--", *TINY]


def trials_in(output):
    return [line for line in output.splitlines() if line.startswith("trial ")]


def test_a_tiny_study_beats_its_worst_trial_writes_a_preset_that_loads_and_extends(tmp_path):
    proc = run_py(*tune_args(tmp_path, 3))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in out + err
    lines = trials_in(out)
    assert len(lines) == 3 and "learning_rate=0.002 " in lines[0] + " "  # trial 0 is the defaults' point
    values = [float(line.split(": ")[1].split()[0]) for line in lines]
    best = float(out.split("best: trial ")[1].split(", ")[1].split()[0])
    assert best == max(values) and best > min(values)
    preset = load_preset(mappo.Args, str(tmp_path / "best.yaml"))
    args = parse_args(mappo.Args, ["--config", str(tmp_path / "best.yaml"), "--env", "torch:simple_spread"])
    best_lr = float(out.split("best: trial ")[1].split("learning_rate=")[1].split()[0])
    assert args.learning_rate == preset["learning_rate"] == best_lr
    assert preset["total_timesteps"] == 2000 and preset["num_envs"] == 4  # the rest as the trials ran it
    text = (tmp_path / "best.yaml").read_text()
    assert "run.py tune" in text and "mean over 1 seed," in text and "defaults (trial 0)" in text
    folders = glob.glob(str(tmp_path / "study" / "runs" / "*" / "*" / "*"))
    assert len(folders) == 3
    with open(tmp_path / "study" / "trials.json") as f:
        record = json.load(f)
    assert [t["value"] for t in record["trials"]] == pytest.approx(values, abs=0.006)
    assert record["trials"][0]["defaults"] and record["settings"]["seeds"] == 1

    proc = run_py(*tune_args(tmp_path, 4))  # the same study, one trial more: the first three are not run again
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert [line.split(":")[0] for line in trials_in(out)] == ["trial 3"]
    lr = lambda line: line.split("learning_rate=")[1].split()[0]  # noqa: E731
    assert lr(trials_in(out)[0]) not in [lr(line) for line in lines]  # a reopened study draws new points
    assert len(glob.glob(str(tmp_path / "study" / "runs" / "*" / "*" / "*"))) == 4

    proc = run_py(*tune_args(tmp_path, 4, "--objective", "mean"))  # other settings: not this study
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "other settings" in err and "objective 'final' -> 'mean'" in err
    assert "Traceback" not in out + err


def test_sigterm_stops_the_study_and_the_same_command_runs_the_trial_again_resuming_its_runs(tmp_path):
    args = tune_args(tmp_path, 1)
    args[args.index("2000")] = "40000"  # long enough to be stopped in
    proc = run_py(*args)
    deadline = time.time() + 300
    while not glob.glob(str(tmp_path / "study" / "runs" / "*" / "*" / "*" / "scalars.csv")):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.5)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, out + err
    assert "Traceback" not in out + err
    assert "The same command resumes the study" in err and "run.py tune" in err
    assert glob.glob(str(tmp_path / "study" / "runs" / "*" / "*" / "*" / "checkpoint.pt"))

    proc = run_py(*args)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "resuming" in out and len(trials_in(out)) == 1
    assert len(glob.glob(str(tmp_path / "study" / "runs" / "*" / "*" / "*"))) == 1  # the same run, resumed


def test_usage_errors_are_one_line(tmp_path):
    (tmp_path / "taken.yaml").write_text("learning_rate: 0.001\n")
    fake = tmp_path / "no_optuna"
    fake.mkdir()
    (fake / "optuna.py").write_text("raise ImportError('no optuna here')\n")
    base = ["tune", "--algo", "mappo", "--env", "torch:simple_spread", "--study", str(tmp_path / "s")]
    cases = {
        (*base, "--space", "learning_rat=1:2"): ("has no such field", {}),
        (*base,): ("give a search space", {}),
        (*base, "--space", "learning_rate=1e-4:1e-2", "--", "--seed", "3"): ("--seed is set by run.py tune", {}),
        (*base, "--space", "learning_rate=1e-4:1e-2", "--", "--learning-rat", "3"): ("--learning-rate", {}),
        (*base[:4], "torch:simple_sprad", *base[5:], "--space", "learning_rate=1e-4:1e-2"): ("simple_sprad", {}),
        (*base, "--space", "learning_rate=1e-4:1e-2", "--preset", str(tmp_path / "taken.yaml"), "--trials", "0"):
            ("at least 1", {}),
        (*base, "--space", "learning_rate=1e-4:1e-2"): ("pip install -e \".[tune]\"", {"PYTHONPATH": str(fake)}),
    }
    procs = {args: run_py(*args, env=extra) for args, (_, extra) in cases.items()}
    for args, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, out, err)
        assert "Traceback" not in out + err, args
        assert cases[args][0] in err, (args, err)
        assert err.startswith("error: ") or "Unrecognized options" in err, err  # the flags after -- are tyro's
    assert not os.path.exists(tmp_path / "s" / "runs")


def test_an_existing_preset_is_not_replaced_unless_named():
    proc = run_py("tune", "--algo", "mappo", "--env", "simple_spread", "--space", "learning_rate=1e-4:1e-2",
                  "--study", "/nonexistent/never/made")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "configs/mappo/simple_spread.yaml exists already" in err and "--preset" in err
    assert not os.path.exists("/nonexistent/never/made")


def test_dimension_suggest_stays_in_bounds():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    dims = [Dimension("a", "float", 1e-4, 1e-2, log=True), Dimension("b", "int", 1, 8, step=1),
            Dimension("c", "choice", choices=["tanh", "relu"])]
    for _ in range(20):
        trial = study.ask()
        values = [d.suggest(trial) for d in dims]
        assert all(d.holds(v) for d, v in zip(dims, values)), values
