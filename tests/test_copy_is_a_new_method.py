"""A copy of an algorithm file is a new method (docs/how-to.md#start-a-new-method-from-a-copy): the
copy, under any name and in any folder, names its runs, checkpoints and summary.json after itself
(each file's `ALGO` is its file name), resumes and evaluates its own runs, is refused another file's
runs with the file to use, and keeps what the original says of itself (turn-based play). All
through the real command line, as a researcher would meet it."""
import ast
import glob
import json
import os
import shutil
import subprocess
import sys

import torch

from common.turns import TURN_BASED_ALGOS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--env", "torch:simple_spread", "--num-envs", "4", "--num-steps", "16", "--eval-every", "0",
        "--eval-episodes", "2", "--eval-num-envs", "2", "--hidden-sizes", "16", "--no-cuda"]


def run(cwd, *argv):
    out = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=180)
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    return out


def test_a_copy_elsewhere_runs_resumes_and_evaluates_under_its_own_name(tmp_path):
    shutil.copy(os.path.join(ROOT, "algos", "mappo.py"), tmp_path / "my_method.py")
    first = run(tmp_path, "my_method.py", *TINY, "--total-timesteps", "128", "--run-dir", "runs")
    assert first.returncode == 0, first.stdout + first.stderr
    (run_path,) = glob.glob(str(tmp_path / "runs" / "*"))
    assert os.path.basename(run_path).startswith("my_method__torch-simple_spread__")
    with open(os.path.join(run_path, "summary.json")) as f:
        assert json.load(f)["algo"] == "my_method"
    assert torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)["algo"] == "my_method"
    assert glob.glob(os.path.join(run_path, "events.out.tfevents.*"))

    resumed = run(tmp_path, "my_method.py", "--resume", run_path, "--total-timesteps", "256")
    assert resumed.returncode == 0 and "resuming" in resumed.stdout, resumed.stdout + resumed.stderr
    evaluated = run(tmp_path, "my_method.py", "--evaluate-checkpoint", run_path, "--eval-episodes", "2",
                    "--eval-num-envs", "2")
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr

    # the original refuses the copy's run, naming the file that made it
    refused = run(ROOT, "algos/mappo.py", "--evaluate-checkpoint", run_path)
    assert refused.returncode == 2 and "holds a my_method run" in refused.stderr
    assert "algos/my_method.py" in refused.stderr


def test_a_copy_keeps_turn_based_play(tmp_path):
    shutil.copy(os.path.join(ROOT, "algos", "ippo.py"), tmp_path / "my_ippo.py")
    out = run(tmp_path, "my_ippo.py", "--env", "classic:tictactoe", "--num-envs", "4", "--num-steps", "16",
              "--total-timesteps", "64", "--eval-every", "0", "--eval-episodes", "2", "--eval-num-envs", "2",
              "--hidden-sizes", "16", "--no-cuda", "--run-dir", "runs")
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_file_is_named_by_its_file_and_says_itself_whether_it_plays_turns():
    """No algorithm file writes its own name as a string (a copy would carry the original's), and
    the files that pass turn_based=True to policy_map are exactly common.turns.TURN_BASED_ALGOS
    (the list the league and the refusal message read)."""
    turn_based = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "algos", "*.py"))):
        name = os.path.basename(path)[:-3]
        if name == "__init__":
            continue
        source = open(path).read()
        assert "ALGO = Path(__file__).stem" in source, path
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                    "policy_map", "start_or_resume", "evaluate_checkpoint", "RunRecorder"):
                assert any(isinstance(a, ast.Name) and a.id == "ALGO" for a in node.args), (path, node.lineno)
                if any(k.arg == "turn_based" and getattr(k.value, "value", False) for k in node.keywords):
                    turn_based.add(name)
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "algo":
                        assert isinstance(value, ast.Name) and value.id == "ALGO", (path, node.lineno)
    assert turn_based == set(TURN_BASED_ALGOS)
