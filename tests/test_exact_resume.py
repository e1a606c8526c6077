"""Exact resume: a torch: run killed with `kill -9` and resumed from its last checkpoint ends with
the summary.json of the run that was never stopped, bit for bit on the CPU; the torch MPE's
state_dict round-trips exactly; a PettingZoo-backed run says that its episodes restart."""
import glob
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from common.cli import parse_args
from envs import TORCH_SCENARIOS, make_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPARED = ("eval_history", "eval_return_mean", "final_losses", "global_step")  # timings aside
TINY = ["--env", "torch:simple_spread", "--no-cuda", "--num-envs", "4", "--eval-episodes", "2", "--eval-num-envs", "2"]
# Each algorithm's defaults, scaled down; 7-step rollouts put checkpoints mid-episode (episodes last 25 steps).
# --total-timesteps leaves the killed run a few seconds after its first checkpoint, so the kill lands before the end.
SETTINGS = {
    "mappo": ["--num-steps", "7", "--total-timesteps", "2100", "--checkpoint-every", "420", "--eval-every", "400",
              "--num-minibatches", "2"],
    # recurrent: the hidden states and episode starts carried from one rollout into the next are restored too
    "mappo-gru": ["--num-steps", "7", "--total-timesteps", "2100", "--checkpoint-every", "420",
                  "--eval-every", "400", "--num-minibatches", "2", "--recurrent", "gru", "--chunk-len", "7"],
    "qmix": ["--total-timesteps", "3000", "--checkpoint-every", "500", "--eval-every", "400", "--batch-size", "8",
             "--updates-per-iteration", "2"],
    "maddpg": ["--num-steps", "7", "--total-timesteps", "3000", "--checkpoint-every", "500", "--eval-every", "400",
               "--learning-starts", "300", "--updates-per-iteration", "2"],
}


def summary(run_path: str) -> dict:
    with open(os.path.join(run_path, "summary.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("run", list(SETTINGS))
def test_killed_and_resumed_run_ends_as_the_uninterrupted_one(run, tmp_path):
    algo = run.split("-")[0]
    module = importlib.import_module(f"algos.{algo}")
    argv = TINY + SETTINGS[run]
    whole = module.main(parse_args(module.Args, argv + ["--run-dir", str(tmp_path / "whole")]))

    # The same command in its own process, killed without warning once its first checkpoint is written.
    killed = subprocess.Popen([sys.executable, f"algos/{algo}.py", *argv, "--run-dir", str(tmp_path / "killed")],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not glob.glob(str(tmp_path / "killed" / "*" / "checkpoint.pt")):
        assert killed.poll() is None, killed.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "no checkpoint.pt after 120 s"
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    run_path = os.path.dirname(glob.glob(str(tmp_path / "killed" / "*" / "checkpoint.pt"))[0])
    saved_step = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)["global_step"]
    assert saved_step < whole["global_step"], "the run finished before the kill: give it a larger --total-timesteps"

    module.main(parse_args(module.Args, ["--resume", run_path]))
    resumed, uninterrupted = summary(run_path), summary(whole["run_dir"])
    assert resumed["status"] == "finished" and len(uninterrupted["eval_history"]) >= 3
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}


@pytest.mark.parametrize("name", sorted(TORCH_SCENARIOS))
def test_torch_mpe_state_dict_round_trips_exactly(name):
    """An env loaded from another's state_dict (through torch.save / weights_only torch.load)
    shows what that env's last step returned and takes the same next 30 steps."""
    env = make_env(f"torch:{name}", 3, seed=0)
    env.reset()
    for _ in range(20):  # mid-episode, after some copies' actions spoke and moved
        last = env.step(env.sample_actions())
    buffer = io.BytesIO()
    torch.save(env.state_dict(), buffer)
    buffer.seek(0)
    copy = make_env(f"torch:{name}", 3, seed=123)
    copy.load_state_dict(torch.load(buffer, weights_only=True))

    obs, state, mask = copy.observe()
    assert torch.equal(obs, last.obs) and torch.equal(state, last.state) and torch.equal(mask, last.action_mask)
    for _ in range(30):  # across an episode end (25 steps): auto-resets draw from the restored generator
        actions = env.sample_actions()
        assert torch.equal(actions, copy.sample_actions())
        a, b = env.step(actions), copy.step(actions)
        for field in ("obs", "state", "reward", "terminated", "truncated", "final_obs", "done", "episode_return",
                      "episode_length"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_matrix_game_state_dict_round_trips():
    env, copy = make_env("matrix_game", 4, seed=0), make_env("matrix_game", 4, seed=9)
    env.sample_actions()
    copy.load_state_dict(env.state_dict())
    assert torch.equal(env.sample_actions(), copy.sample_actions())
    assert torch.equal(copy.observe()[0], env.reset()[0])


def test_pettingzoo_run_resumes_and_says_its_episodes_restart(tiny, capsys):
    mappo = importlib.import_module("algos.mappo")
    first = mappo.main(tiny(mappo, env="simple_spread", total_timesteps=10, checkpoint_every=10))
    capsys.readouterr()
    resumed = mappo.main(tiny(mappo, env="simple_spread", total_timesteps=20, resume=first["run_dir"]))
    assert resumed["global_step"] == 20
    assert "every env copy starts a new episode" in capsys.readouterr().out


def test_run_trained_on_a_gpu_resumes_on_a_cpu(tmp_path):
    """A torch: env's generator saved on a GPU (a CUDA generator's state: 16 bytes, where a CPU one takes
    5,056) cannot go into a CPU generator. Resumed on the CPU, the run says why its episodes restart and
    finishes, through the real command line, with no traceback."""
    mappo = importlib.import_module("algos.mappo")
    argv = TINY + ["--num-steps", "7", "--eval-every", "0", "--run-dir", str(tmp_path)]
    first = mappo.main(parse_args(mappo.Args, argv + ["--total-timesteps", "28"]))
    path = os.path.join(first["run_dir"], "checkpoint.pt")
    ckpt = torch.load(path, weights_only=True)
    ckpt["envs"] = [{**state, "gen": torch.zeros(16, dtype=torch.uint8)} for state in ckpt["envs"]]
    torch.save(ckpt, path)
    out = subprocess.run([sys.executable, "algos/mappo.py", "--resume", first["run_dir"], "--total-timesteps", "56"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out.stderr[-2000:]
    assert "saved on another kind of device" in out.stdout and "every env copy starts a new episode" in out.stdout
    assert summary(first["run_dir"])["global_step"] == 56
