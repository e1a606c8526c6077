"""run.py fails well and loses nothing, through the real command line: a usage error is one
`error:` line (exit 2, no traceback); SIGTERM to the launcher lets every running run save, names
them with the command that resumes them (exit 143), and that command finishes them; a diverged
run is reported, left out of the relaunch and of `run.py plot`; a failed run is one line."""
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading

import pytest

import run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "MARL_DEBUG"}
TINY = ["--total-timesteps", "2000", "--num-envs", "4", "--num-steps", "25", "--eval-every", "1000", "--eval-episodes",
        "2", "--eval-num-envs", "2", "--no-cuda"]


def run_py(*args, **popen):
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE,
                            **{"stderr": subprocess.PIPE, **popen})


def summary(folder):
    with open(os.path.join(folder, "summary.json")) as f:
        return json.load(f)


def test_usage_errors_are_one_line_with_a_hint(tmp_path):
    (tmp_path / "bad.yaml").write_text("learning_rat: 0.001\n")
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    launch = ["--seeds", "1", "--run-dir", str(tmp_path / "runs")]
    cases = {  # arguments -> a piece of the message
        ("--algo", "mapo", *launch): "did you mean 'mappo'",
        ("--env", "simple_sprad", *launch): "did you mean 'simple_spread'",
        ("--sweep", "learning_rate", *launch): "KEY=VALUE1,VALUE2",
        ("--threshold", "abc", *launch): "write VALUE or ENV=VALUE",
        (*launch, "--", "--config", str(tmp_path / "bad.yaml")): "did you mean 'learning_rate'",
        ("plot", str(tmp_path / "missing")): "no such folder",
        ("evaluate", str(tmp_path / "missing")): "no such run folder or checkpoint",
        ("evaluate", str(tmp_path / "notes.txt")): "notes.txt",
    }
    procs = {args: run_py(*args) for args in cases}  # all at once: each one's time goes to importing torch
    for args, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, out, err)
        assert "Traceback" not in out + err, args
        assert err.startswith("error: ") and err.count("\n") == 1 and cases[args] in err, (args, err)
    assert not os.path.exists(tmp_path / "runs")


def test_sigterm_saves_every_running_run_and_the_same_command_resumes_them(tmp_path):
    """SIGTERM reaches run.py only (as from a job scheduler); it passes it on to both runs' processes.
    Each run is long enough (about 10 s on two busy cores) that neither can finish in the time
    between the other's first console line and the signal, even when one starts late."""
    total = 96000
    args = ["--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "2", "--workers", "2", "--run-dir",
            str(tmp_path), "--", *TINY, "--total-timesteps", str(total), "--num-envs", "64"]
    proc = run_py(*args, stderr=subprocess.STDOUT)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    lines, training = [], set()
    for line in proc.stdout:  # wait until both runs train (labelled console lines)
        lines.append(line)
        training.update(re.findall(r"^\[mappo torch:simple_spread (s\d)\] step ", line))
        if len(training) == 2:
            break
    proc.send_signal(signal.SIGTERM)
    out = "".join(lines) + proc.stdout.read()
    proc.wait()
    watchdog.cancel()
    assert proc.returncode == 143 and "Traceback" not in out, out
    assert "stopped by SIGTERM: 0 of 2 runs finished, 0 not started" in out, out
    relaunch = re.search(r"^  (python .*)$", out, re.M).group(1)
    assert shlex.split(relaunch)[1:] == ["run.py", *args]  # the same command
    folders = sorted(glob.glob(str(tmp_path / "torch-simple_spread" / "mappo" / "mappo__torch-simple_spread__*")))
    assert len(folders) == 2
    for seed, folder in enumerate(folders, 1):
        saved = summary(folder)
        assert saved["status"] == "interrupted" and 0 < saved["global_step"] < total
        assert os.path.isfile(os.path.join(folder, "checkpoint.pt"))
        assert (f"interrupted: torch:simple_spread mappo seed {seed} at env step {saved['global_step']:,}: checkpoint "
                f"saved in {folder}") in out

    again = run_py(*args)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, out + err
    assert "2 runs: 0 new, 2 to resume, 0 finished (skipped)" in out
    assert sorted(glob.glob(str(tmp_path / "torch-simple_spread" / "mappo" / "*"))) == folders
    assert [(summary(f)["status"], summary(f)["global_step"]) for f in folders] == [("finished", total)] * 2


def test_a_diverged_run_is_reported_left_out_of_the_relaunch_and_of_the_plot(tmp_path):
    args = ["--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "1", "--workers", "1", "--sweep",
            "learning_rate=0.001,10000", "--run-dir", str(tmp_path), "--", *TINY, "--max-grad-norm", "1e9"]
    out, err = run_py(*args).communicate(timeout=120)
    assert "Traceback" not in out + err
    (diverged,) = glob.glob(str(tmp_path / "torch-simple_spread" / "mappo,learning_rate=10000" / "*"))
    (finished,) = glob.glob(str(tmp_path / "torch-simple_spread" / "mappo,learning_rate=0.001" / "*"))
    assert summary(diverged)["status"] == "diverged" and summary(finished)["status"] == "finished"
    reason = summary(diverged)["diverged"]
    line = f"diverged: torch:simple_spread mappo,learning_rate=10000 seed 1: {reason} ({diverged})"
    assert line in out and line in err and "1 of 2 runs did not finish (1 diverged" in err

    again = run_py(*args)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 1 and "Traceback" not in out + err
    assert ("2 runs: 0 new, 0 to resume, 1 finished (skipped), 1 diverged (left out; delete its folder to redo it)"
            in out)

    plot = run_py("plot", str(tmp_path), "--out", str(tmp_path / "plots"))
    out, err = plot.communicate(timeout=120)
    assert plot.returncode == 0, err
    assert f"left out 1 diverged run: {diverged}" in out
    table = (tmp_path / "plots" / "results.csv").read_text()
    assert "mappo,learning_rate=0.001" in table and "learning_rate=10000" not in table


def test_a_failed_run_is_one_line_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    from algos import mappo

    def broken(args):
        if args.seed == 1:
            raise ValueError("boom")
        return real(args)

    real = mappo.main
    monkeypatch.setattr(mappo, "main", broken)
    grid = ["--algo", "mappo", "--env", "matrix_game", "--seeds", "2", "--workers", "1", "--run-dir", str(tmp_path),
            "--", "--total-timesteps", "10", "--num-envs", "2", "--num-steps", "5", "--eval-episodes", "1",
            "--eval-num-envs", "1", "--no-cuda"]
    with pytest.raises(SystemExit) as stop:
        run.main(grid)
    out, err = capsys.readouterr()
    assert stop.value.code == 1 and "Traceback" not in out + err
    assert re.search(r"^failed: matrix_game mappo seed 1: ValueError: boom \(at tests.test_run_fail_well\.py:\d+ in "
                     r"broken\)$", out, re.M)
    assert "1 of 2 runs did not finish (1 failed" in err and "| matrix_game | mappo | 1 |" in out
    with pytest.raises(SystemExit):
        run.main(["--debug", *grid])  # seed 2 is skipped as finished; seed 1 fails again, with its traceback
    assert "Traceback" in capsys.readouterr().out


def test_run_folders_avoid_colons_and_older_ones_with_colons_are_still_found(tmp_path, capsys):
    grid = ["--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "1", "--workers", "1", "--run-dir",
            str(tmp_path), "--", "--total-timesteps", "100", "--num-envs", "4", "--num-steps", "25", "--eval-episodes",
            "1", "--eval-num-envs", "1", "--no-cuda"]
    (first,) = run.main(grid)
    assert ":" not in os.path.relpath(first["run_dir"], tmp_path)
    old = tmp_path / "torch:simple_spread" / "mappo" / os.path.basename(first["run_dir"]).replace("-", ":", 1)
    os.makedirs(old.parent)
    os.rename(first["run_dir"], old)  # as launches before safe_name laid it out
    os.rmdir(os.path.dirname(first["run_dir"]))
    capsys.readouterr()
    assert run.main([*grid[:10], "--dry-run", *grid[10:]]) == []
    assert f"done     torch:simple_spread mappo seed 1  ({old})" in capsys.readouterr().out
