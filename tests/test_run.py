"""run.py's launcher end to end, in-process and with tiny runs: a grid (two algorithms x two
seeds) lands in <run-dir>/<env>/<algo>/ and ends in one results table; a re-launch skips
finished runs; a run killed mid-way and launched again resumes to exactly the result of an
uninterrupted one; bad presets, sweep keys and changed settings fail before anything runs."""
import csv
import glob
import json
import os
import re

import numpy as np
import pytest

import common.run_utils
import run

TINY = ["--total-timesteps", "20", "--num-envs", "2", "--num-steps", "5", "--eval-every", "10", "--eval-episodes", "1",
        "--eval-num-envs", "1", "--hidden-sizes", "16", "--update-epochs", "1", "--no-cuda"]


def launch(tmp_path, *own, extra=TINY):
    return run.main([*own, "--workers", "1", "--run-dir", str(tmp_path), "--", *extra])


def refused(capsys, match, *own, extra=TINY, tmp_path):
    """The launch ends in a usage error: exit 2 and an `error:` line on stderr matching `match`."""
    with pytest.raises(SystemExit) as stop:
        launch(tmp_path, *own, extra=extra)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and re.search(match, err), err


def table_rows(folder):
    with open(os.path.join(folder, "results.csv")) as f:
        return list(csv.DictReader(f))


def test_tiny_grid(tmp_path, capsys):
    results = launch(tmp_path, "--algo", "mappo", "ippo", "--env", "simple_spread", "--seeds", "2")
    assert sorted((r["algo"], r["seed"]) for r in results) == [("ippo", 1), ("ippo", 2), ("mappo", 1), ("mappo", 2)]
    for r in results:
        assert r["run_dir"].startswith(os.path.join(str(tmp_path), "simple_spread", r["algo"]))
        assert os.path.basename(r["run_dir"]).startswith(f"{r['algo']}__simple_spread__{r['seed']}__")
        assert r["global_step"] == 20
    with open(tmp_path / "results.json") as f:
        assert len(json.load(f)["runs"]) == 4
    rows = table_rows(tmp_path)
    assert [(r["env"], r["algo"], r["seeds"]) for r in rows] == [("simple_spread", "ippo", "2"),
                                                                ("simple_spread", "mappo", "2")]
    out = capsys.readouterr().out
    assert "4/4 runs done" in out and "| simple_spread | mappo | 2 |" in out
    assert "| simple_spread | mappo |" in (tmp_path / "results.md").read_text()


def test_relaunch_skips_finished_runs(tmp_path, capsys):
    first = launch(tmp_path, "--algo", "mappo", "--seeds", "2")
    folders = sorted(glob.glob(str(tmp_path / "simple_spread" / "mappo" / "*")))
    again = launch(tmp_path, "--algo", "mappo", "--seeds", "3")  # one more seed: only it runs
    assert sorted(glob.glob(str(tmp_path / "simple_spread" / "mappo" / "*"))) == sorted(
        folders + [r["run_dir"] for r in again if r["seed"] == 3])
    assert [r for r in again if r["seed"] < 3] == json.loads(json.dumps(first))
    assert "3 runs: 1 new, 0 to resume, 2 finished (skipped)" in capsys.readouterr().out


class Killed(BaseException):
    """Stands for the process being killed (not an Exception, so nothing catches it on the way)."""


MATRIX = ["--total-timesteps", "40", "--num-envs", "2", "--num-steps", "5", "--eval-every", "10", "--eval-episodes",
          "2", "--eval-num-envs", "1", "--checkpoint-every", "20", "--hidden-sizes", "16", "--no-cuda"]


def test_killed_run_resumes_to_the_result_of_an_uninterrupted_one(tmp_path, monkeypatch, capsys):
    """matrix_game carries no env state from one iteration to the next, so that a resumed run
    can be compared bit for bit (on MPE the rebuilt envs start new episodes; see docs/how-to.md)."""
    grid = ["--algo", "mappo", "--env", "matrix_game", "--seeds", "1"]
    whole = launch(tmp_path / "whole", *grid, extra=MATRIX)[0]

    log_iteration, steps = common.run_utils.RunRecorder.log_iteration, []

    def killed_in_iteration_3(self, global_step, *args, **kwargs):  # after the checkpoint at 20 steps
        steps.append(global_step)
        if global_step == 30:
            raise Killed
        return log_iteration(self, global_step, *args, **kwargs)

    monkeypatch.setattr(common.run_utils.RunRecorder, "log_iteration", killed_in_iteration_3)
    with pytest.raises(Killed):
        launch(tmp_path / "cut", *grid, extra=MATRIX)
    monkeypatch.undo()
    (folder,) = glob.glob(str(tmp_path / "cut" / "matrix_game" / "mappo" / "*"))
    assert steps == [10, 20, 30] and os.path.isfile(os.path.join(folder, "checkpoint.pt"))
    assert not os.path.exists(os.path.join(folder, "summary.json"))

    resumed = launch(tmp_path / "cut", *grid, extra=MATRIX)[0]
    assert "1 runs: 0 new, 1 to resume" in capsys.readouterr().out
    assert resumed["run_dir"] == folder
    for key in ("global_step", "eval_return_mean", "final_losses"):
        assert resumed[key] == whole[key], key
    # summary.json's curve holds the evaluations made before the cut too (those read back as float32)
    assert [s for s, _ in resumed["eval_history"]] == [s for s, _ in whole["eval_history"]]
    assert np.allclose([v for _, v in resumed["eval_history"]], [v for _, v in whole["eval_history"]], rtol=1e-6)
    # The table reads the whole curve back from the event files, not only the resumed part.
    cut_rows, whole_rows = table_rows(tmp_path / "cut"), table_rows(tmp_path / "whole")
    for key in ("final_mean", "best_mean", "env_steps_max"):
        assert cut_rows[0][key] == whole_rows[0][key]


def test_unknown_config_key_fails_before_anything_runs(tmp_path, capsys):
    preset = tmp_path / "bad.yaml"
    preset.write_text("learning_rate: 0.001\nlearning_rat: 0.002\n")
    refused(capsys, "unknown config key 'learning_rat'.*did you mean 'learning_rate'", "--algo", "mappo",
            extra=[*TINY, "--config", str(preset)], tmp_path=tmp_path)
    assert not os.path.exists(tmp_path / "simple_spread")


def test_unknown_sweep_key_env_and_env_argument_fail(tmp_path, capsys):
    refused(capsys, "cannot sweep 'learning_rat'", "--algo", "mappo", "--sweep", "learning_rat=0.1,0.2",
            tmp_path=tmp_path)
    refused(capsys, "cannot sweep 'seed'", "--algo", "mappo", "--sweep", "seed=1,2", tmp_path=tmp_path)
    refused(capsys, "simple_sprad", "--algo", "mappo", "--env", "simple_sprad", tmp_path=tmp_path)
    refused(capsys, r"does not take argument\(s\) \['M'\]", "--algo", "mappo", extra=[*TINY, "--env-kwargs", "M=4"],
            tmp_path=tmp_path)
    assert not os.listdir(tmp_path)


def test_relaunch_with_other_settings_is_refused_but_longer_runs_resume(tmp_path, capsys):
    (first,) = launch(tmp_path, "--algo", "mappo", "--seeds", "1")
    refused(capsys, "learning_rate 0.002 -> 0.001", "--algo", "mappo", "--seeds", "1",
            extra=[*TINY, "--learning-rate", "0.001"], tmp_path=tmp_path)
    longer = [*TINY[:1], "40", *TINY[2:], "--checkpoint-every", "20"]  # the finished run trains on, saving more often
    (resumed,) = launch(tmp_path, "--algo", "mappo", "--seeds", "1", extra=longer)
    assert "1 to resume" in capsys.readouterr().out
    assert resumed["run_dir"] == first["run_dir"] and resumed["global_step"] == 40


def test_sweep_from_command_line_and_file_gives_one_table(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("hidden_sizes: [[16], [8, 8]]\nclip_vloss: [false]\n")
    results = launch(tmp_path / "runs", "--algo", "mappo", "--seeds", "1", "--sweep", "learning_rate=0.001,0.003",
                     "--sweep-file", str(sweep))
    labels = sorted(os.listdir(tmp_path / "runs" / "simple_spread"))
    assert labels == [f"mappo,hidden_sizes={h},clip_vloss=false,learning_rate={lr}"
                      for h in ("16", "8-8") for lr in ("0.001", "0.003")]
    assert len(results) == 4
    for r in results:
        with open(os.path.join(r["run_dir"], "args.json")) as f:
            args = json.load(f)
        assert args["exp_name"] == os.path.basename(os.path.dirname(r["run_dir"]))  # the label
        assert f"learning_rate={args['learning_rate']:g}" in args["exp_name"] and args["clip_vloss"] is False
        assert "-".join(map(str, args["hidden_sizes"])) in args["exp_name"]
    assert sorted(r["algo"] for r in table_rows(tmp_path / "runs")) == labels


def test_presets_start_each_run_from_its_config(tmp_path):
    launch(tmp_path, "--algo", "mappo", "--env", "torch:simple_spread", "--seeds", "1", "--presets")
    (args_json,) = glob.glob(str(tmp_path / "torch-simple_spread" / "mappo" / "*" / "args.json"))
    with open(args_json) as f:
        args = json.load(f)
    assert args["config"].endswith(os.path.join("configs", "mappo", "simple_spread.yaml"))
    assert args["env"] == "torch:simple_spread" and args["total_timesteps"] == 20  # the command line wins


def test_per_run_flags_after_the_separator_are_rejected(tmp_path):
    for flag in ("--seed", "--resume", "--env"):
        with pytest.raises(SystemExit):
            run.main(["--run-dir", str(tmp_path), "--", flag, "5"])
