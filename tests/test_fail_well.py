"""Failing well: every user mistake ends in one message (exit 2, no traceback) in every algorithm
file; Ctrl-C and SIGTERM save a checkpoint and an "interrupted" summary; a run whose losses go NaN
stops with exit 1 and a "diverged" summary; summary.json is always valid JSON.

The table of bad inputs goes through `run_cli`, the exact entry point of every file's command
line, in this process (23 files x the table would take minutes as subprocesses); the signals,
divergence and a sample of the table go through real subprocesses."""
import dataclasses
import glob
import importlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from common.cli import RunDiverged, make_args, run_cli
from common.run_utils import RunRecorder, load_checkpoint, write_json_atomic
from tests.catalog import ALGOS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strict_json(path):
    """json.load that refuses NaN and Infinity, as most JSON readers outside Python do."""
    with open(path) as f:
        return json.load(f, parse_constant=lambda name: pytest.fail(f"{path} holds bare {name}"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Files the table points at: a YAML preset that is not valid YAML, one with a value of the wrong
    type, a truncated checkpoint, a checkpoint holding code, a plain file where a folder should be,
    a run folder with no checkpoint yet, and a real QMIX run to hand to the wrong file."""
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "broken.yaml").write_text("learning_rate: [0.001\n")
    (d / "wrong_type.yaml").write_text("gamma: abc\n")
    (d / "not_a_mapping.yaml").write_text("- 1\n- 2\n")
    torch.save({"algo": "mappo", "args": {}, "f": print}, d / "code.pt")  # unpickling would call print
    torch.save({"weights": torch.zeros(3)}, d / "foreign.pt")
    (d / "truncated.pt").write_bytes((d / "foreign.pt").read_bytes()[:200])
    (d / "a_file").write_text("")
    (d / "fresh_run").mkdir()
    (d / "fresh_run" / "args.json").write_text("{}")
    qmix = importlib.import_module("algos.qmix")
    summary = qmix.main(make_args(qmix.Args, env="torch:simple_spread", num_envs=2, total_timesteps=50, batch_size=2,
                                  eval_episodes=1, eval_num_envs=1, cuda=False, run_dir=str(d / "runs")))
    return {"dir": str(d), "qmix_run": summary["run_dir"]}


# (flags, hint expected in the message); "{dir}" and "{qmix_run}" are filled from `files`
BAD_INPUTS = {
    "env typo": (["--env", "simple_spred"], "did you mean"),
    "torch env typo": (["--env", "torch:simple_sprad"], "simple_spread"),
    "unknown lbf id": (["--env", "lbf:Foraging-8x8-2p-3f-v9"], "Foraging-8x8-2p-3f-v3"),
    "negative steps": (["--total-timesteps", "-5"], "--total-timesteps must be at least 1"),
    "zero envs": (["--num-envs", "0"], "--num-envs must be at least 1"),
    "env kwarg zero": (["--env", "torch:simple_spread", "--env-kwargs", "N=0"], "N"),
    "env kwarg negative": (["--env", "simple_spread", "--env-kwargs", "N=-2"], "N"),
    "env kwarg not a number": (["--env", "simple_spread", "--env-kwargs", "N=abc"], "N"),
    "env kwarg unknown": (["--env", "simple_spread", "--env-kwargs", "n=5"], "N"),
    "preset not YAML": (["--config", "{dir}/broken.yaml"], "not valid YAML"),
    "preset wrong type": (["--config", "{dir}/wrong_type.yaml"], "is not a number"),
    "preset not a mapping": (["--config", "{dir}/not_a_mapping.yaml"], "mapping"),
    "preset missing": (["--config", "{dir}/nope.yaml"], "nope.yaml"),
    "evaluate missing path": (["--evaluate-checkpoint", "{dir}/nope"], "no run folder or checkpoint"),
    "evaluate truncated": (["--evaluate-checkpoint", "{dir}/truncated.pt"], "not a checkpoint written by this project"),
    "evaluate foreign": (["--evaluate-checkpoint", "{dir}/foreign.pt"], "not a checkpoint written by this project"),
    "evaluate code": (["--evaluate-checkpoint", "{dir}/code.pt"], "refused"),
    "resume no checkpoint yet": (["--resume", "{dir}/fresh_run"], "no checkpoint.pt yet"),
    "resume another algorithm": (["--resume", "{qmix_run}"], "qmix"),
    "run dir is a file": (["--run-dir", "{dir}/a_file/runs", "--env", "torch:simple_spread", "--num-envs", "2"],
                          "is a file, not a folder"),
    "negative learning rate": (["--learning-rate", "-1"], "--learning-rate must be 0 or more"),
    "gamma above 1": (["--gamma", "5"], "--gamma must be between 0 and 1"),
    "negative eval every": (["--eval-every", "-3"], "--eval-every must be 0 or more"),
    "negative checkpoint every": (["--checkpoint-every", "-1"], "--checkpoint-every must be 0 or more"),
}


def applies(algo, case, flags):
    """Whether a case is a mistake for this file (a file without --learning-rate or --gamma, or one
    whose own qmix run is handed back, is left out)."""
    module = importlib.import_module(f"algos.{algo}")
    names = {f.replace("_", "-") for f in module.Args.__dataclass_fields__}
    if case == "resume another algorithm" and algo == "qmix":
        return False
    return all(flag[2:] in names for flag in flags if flag.startswith("--"))


@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("algo", ALGOS)
def test_bad_input_is_one_message(algo, case, files, capsys, monkeypatch, tmp_path):
    flags, hint = BAD_INPUTS[case]
    flags = [f.format(**files) for f in flags]
    if algo == "ppo_iql":  # it needs two groups of agents
        flags = [f.replace("torch:simple_spread", "torch:simple_tag") for f in flags]
    if not applies(algo, case, flags):
        pytest.skip(f"{algo} has no {flags[0]}")
    if case == "unknown lbf id":
        pytest.importorskip("lbforaging")
    monkeypatch.chdir(tmp_path)  # a run that wrongly starts writes here, not into the repository
    module = importlib.import_module(f"algos.{algo}")
    with pytest.raises(SystemExit) as exit_:
        run_cli(module.Args, module.main, module.__doc__, argv=flags + ["--no-cuda"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert exit_.value.code == 2, text
    assert "Traceback" not in text
    assert "error: " in out.err and hint in out.err, out.err
    assert not os.path.exists(tmp_path / "runs"), "a run folder was made before the mistake was found"


@pytest.mark.parametrize("algo, flags, hint", [
    ("mappo", ["--env", "simple_spred"], "did you mean 'simple_spread'"),
    ("qmix", ["--total-timesteps", "-5"], "--total-timesteps must be at least 1"),
    ("maddpg", ["--actor-learning-rat", "1"], "--actor-learning-rate"),  # tyro's own message for an unknown flag
    ("mappo", ["--share-params", "al"], "'all'"),
])
def test_bad_input_through_the_real_command_line(algo, flags, hint):
    proc = subprocess.run([sys.executable, f"algos/{algo}.py", *flags], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert hint in proc.stdout + proc.stderr


def test_debug_flag_shows_the_traceback():
    proc = subprocess.run([sys.executable, "algos/mappo.py", "--num-envs", "0", "--debug"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "--num-envs must be at least 1" in proc.stderr


# ----------------------------------------------------------------------------- interrupts
def start(algo, run_dir, *flags):
    return subprocess.Popen([sys.executable, f"algos/{algo}.py", "--env", "torch:simple_spread", "--run-dir",
                             str(run_dir), "--total-timesteps", "5000000", "--eval-every", "0", "--eval-episodes", "2",
                             "--eval-num-envs", "2", "--no-cuda", *flags], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_training(proc):
    """Read the run's output until its first progress line (training has started)."""
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("step "):
            return lines
    proc.kill()
    pytest.fail("no progress line:\n" + "".join(lines))


@pytest.mark.parametrize("algo, sig, flags", [
    ("mappo", signal.SIGINT, ["--num-envs", "8"]),
    ("qmix", signal.SIGTERM, ["--num-envs", "4", "--batch-size", "4"]),
])
def test_signal_saves_checkpoint_and_summary_then_resumes(tmp_path, algo, sig, flags):
    proc = start(algo, tmp_path, *flags)
    wait_for_training(proc)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, out
    assert "Traceback" not in out
    (run,) = glob.glob(str(tmp_path / "*"))
    summary = strict_json(os.path.join(run, "summary.json"))
    assert summary["status"] == "interrupted" and summary["stopped_by"] == signal.Signals(sig).name
    ckpt = load_checkpoint(run)
    assert ckpt["global_step"] == summary["global_step"] > 0
    assert f"--resume {run}" in out
    # the printed command continues the run (here only a little further, to finish quickly)
    done = subprocess.run([sys.executable, f"algos/{algo}.py", "--resume", run, "--total-timesteps",
                           str(summary["global_step"] + 400)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming {run} from env step {summary['global_step']:,}" in done.stdout
    assert strict_json(os.path.join(run, "summary.json"))["status"] == "finished"


def test_ctrl_c_with_env_workers_saves_without_a_traceback(tmp_path):
    """Ctrl-C in a terminal reaches the whole process group, the env workers too: they ignore it, the
    main process saves its checkpoint and closes them, and nothing prints a traceback."""
    proc = subprocess.Popen([sys.executable, "algos/mappo.py", "--env", "simple_spread", "--env-workers", "2",
                             "--num-envs", "4", "--run-dir", str(tmp_path), "--total-timesteps", "5000000",
                             "--eval-every", "0", "--eval-episodes", "2", "--eval-num-envs", "2", "--no-cuda"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group, as a terminal's foreground job
    wait_for_training(proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    (run,) = glob.glob(str(tmp_path / "*"))
    assert strict_json(os.path.join(run, "summary.json"))["status"] == "interrupted"
    assert load_checkpoint(run)["global_step"] > 0


@dataclasses.dataclass
class _Args:
    """The fields RunRecorder reads."""
    env: str = "torch:simple_spread"
    seed: int = 1
    total_timesteps: int = 1000
    eval_every: int = 0
    checkpoint_every: int = 0
    eval_episodes: int = 1


def test_second_signal_stops_at_once_and_handlers_are_restored(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    recorder = RunRecorder(_Args(), "mappo", str(tmp_path), None, torch.device("cpu"))
    recorder._on_signal(signal.SIGINT, None)  # the first asks for a stop after this iteration
    assert recorder.checkpoint_due(1)
    with pytest.raises(KeyboardInterrupt):
        recorder._on_signal(signal.SIGINT, None)
    assert signal.getsignal(signal.SIGINT) is before
    recorder.writer.close()


# ----------------------------------------------------------------------------- divergence
@pytest.mark.parametrize("algo, flags", [
    ("mappo", ["--num-envs", "16", "--learning-rate", "1000"]),
    ("qmix", ["--num-envs", "8", "--learning-rate", "1e6"]),
])
def test_divergence_stops_the_run(tmp_path, algo, flags):
    proc = subprocess.run([sys.executable, f"algos/{algo}.py", "--env", "torch:simple_spread", "--run-dir",
                           str(tmp_path), "--total-timesteps", "400000", "--eval-every", "0", "--eval-episodes", "2",
                           "--eval-num-envs", "2", "--no-cuda", *flags], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "diverged at env step" in out
    (run,) = glob.glob(str(tmp_path / "*"))
    summary = strict_json(os.path.join(run, "summary.json"))
    assert summary["status"] == "diverged" and summary["global_step"] < 400000
    assert summary["diverged"].split()[0] in out


def test_non_finite_checkpoint_is_refused_and_the_last_finite_one_kept(tmp_path):
    recorder = RunRecorder(_Args(), "mappo", str(tmp_path), None, torch.device("cpu"))
    recorder.save_checkpoint({"algo": "mappo", "args": {}, "actor": {"w": torch.ones(2)}, "global_step": 10})
    with pytest.raises(RunDiverged, match="actor.w"):
        recorder.save_checkpoint({"algo": "mappo", "args": {}, "actor": {"w": torch.tensor([1.0, float("nan")])},
                                  "global_step": 20})
    kept = load_checkpoint(str(tmp_path))
    assert kept["global_step"] == 10 and torch.equal(kept["actor"]["w"], torch.ones(2))
    summary = strict_json(tmp_path / "summary.json")
    assert summary["status"] == "diverged" and summary["global_step"] == 20


def test_json_is_always_valid(tmp_path):
    write_json_atomic(str(tmp_path / "x.json"), {"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert strict_json(tmp_path / "x.json") == {"a": None, "b": [None, 1.5], "c": {"d": None}}
