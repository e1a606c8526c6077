"""ISAC (algos/isac.py): each agent's twin critics see its own observation and its own action only
(checked on tiny networks by perturbing the other agents' inputs); the short functions copied from
MASAC compute what MASAC's do (their text: tests/test_copies.py); smoke runs on a homogeneous and a heterogeneous env; discrete
actions refused with the files that take them; groups fixed and loaded; exact resume, evaluation of
a checkpoint, determinism and one real command line."""
import glob
import inspect
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from algos import isac, masac
from common.cli import ConfigError, make_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_KEYS = {"td_loss", "policy_loss", "q_taken_mean", "target_mean", "grad_norm", "actor_grad_norm", "entropy",
             "alpha", "alpha_loss"}


def tiny(tmp_path, **overrides):
    """2 env copies x 5 steps per iteration, random actions for the first 10 env steps, 2 updates after each."""
    base = dict(num_envs=2, num_steps=5, total_timesteps=40, learning_starts=10, buffer_size=100, batch_size=2,
                updates_per_iteration=2, hidden_sizes=(16,), eval_every=0, eval_episodes=2, eval_num_envs=1,
                checkpoint_every=0, cuda=False, torch_threads=1, run_dir=str(tmp_path / "runs"),
                env="torch:simple_spread")
    base.update(overrides)
    return make_args(isac.Args, **base)


def fake_env(n_agents=3, obs_dims=(4, 6, 6), action_dims=(2, 3, 3)):
    """What build_networks reads of an env: agents with different observation and action sizes."""
    mask = torch.arange(max(action_dims))[None] < torch.tensor(action_dims)[:, None]  # (N, A)
    return SimpleNamespace(n_agents=n_agents, obs_shape=(max(obs_dims),), obs_dims=list(obs_dims), discrete=False,
                           action_dim=max(action_dims), action_dims=list(action_dims), action_dim_mask=mask)


# ---------------------------------------------------------------------------- independence, by hand
@pytest.mark.parametrize("share_params", ["all", "none"])
def test_each_critic_sees_only_its_own_observation_and_action(share_params):
    """Q^k_i(o_i, a_i): changing agent j's observation or action moves Q^k_j only, never Q^k_i, i != j;
    its gradient with respect to the actions lies in agent i's own slot. MASAC's critic, fed the
    joint action, would move every agent's Q."""
    torch.manual_seed(0)
    env = fake_env()
    _, critics = isac.build_networks(make_args(isac.Args, share_params=share_params, hidden_sizes=(16,)), env, "cpu")
    assert len(critics) == 2
    B, N, A = 8, env.n_agents, env.action_dim
    obs = torch.randn(B, N, env.obs_shape[0]) * torch.tensor([[1.0] * 4 + [0.0] * 2, [1.0] * 6, [1.0] * 6])
    actions = (torch.rand(B, N, A) * 2 - 1) * env.action_dim_mask
    for critic in critics:
        q = critic((obs, actions))[0]  # (B, N)
        assert q.shape == (B, N)
        for j in range(N):
            obs2, actions2 = obs.clone(), actions.clone()
            obs2[:, j, :env.obs_dims[j]] += 1.0
            actions2[:, j, :env.action_dims[j]] = -actions2[:, j, :env.action_dims[j]]
            for changed in (critic((obs2, actions))[0], critic((obs, actions2))[0]):
                others = [i for i in range(N) if i != j]
                assert torch.equal(changed[:, others], q[:, others])  # bit for bit: nobody else's input
                assert not torch.allclose(changed[:, j], q[:, j])  # its own input does count
        a = actions.clone().requires_grad_(True)
        critic((obs, a))[0][:, 1].sum().backward()  # agent 1's Q
        assert a.grad[:, [0, 2]].abs().sum() == 0 and a.grad[:, 1].abs().sum() > 0
        if share_params == "none":  # separate sets read only agent 0's 4 true observation and 2 action inputs
            padded_obs, padded_act = obs.clone(), actions.clone()
            padded_obs[:, 0, 4:], padded_act[:, 0, 2:] = 5.0, 0.7
            assert torch.equal(critic((padded_obs, padded_act))[0], q)


def test_the_two_critics_start_apart_and_the_file_has_no_centralised_pieces():
    """Clipped double Q needs two different critics; nothing of MASAC's centralised input is left."""
    torch.manual_seed(0)
    actor, critics = isac.build_networks(make_args(isac.Args, hidden_sizes=(16,)), fake_env(), "cpu")
    obs, actions = torch.randn(5, 3, 6), torch.rand(5, 3, 3)
    assert not torch.equal(critics[0]((obs, actions))[0], critics[1]((obs, actions))[0])
    assert not hasattr(isac, "joint_action_critic_inputs") and not hasattr(isac, "with_own_action")
    assert "critic_input" not in isac.Args.__dataclass_fields__
    source = inspect.getsource(isac)
    assert "global_states" not in source and "centralised_input_shape" not in source
    dist, _ = actor(obs)
    assert dist.mode().abs().max() < 1 and (dist.mode()[:, 0, 2] == 0).all()  # in the box, padding at 0


def test_copied_functions_compute_what_masacs_do():
    g = torch.Generator().manual_seed(0)
    r, q = torch.randn(5, 4, 3, generator=g), torch.randn(5, 4, 3, generator=g)
    term = (torch.rand(5, 4, 3, generator=g) < 0.2).float()
    ended = torch.maximum(term, (torch.rand(5, 4, 3, generator=g) < 0.2).float())
    ended[-1] = 1.0
    for lam in (0.0, 0.8):
        assert torch.equal(isac.td_lambda_targets(r, q, term, ended, 0.95, lam),
                           masac.td_lambda_targets(r, q, term, ended, 0.95, lam))
    log_alpha, log_pi, mask = torch.randn(3), torch.randn(7, 3, generator=g), (torch.rand(7, 3, generator=g) < .7).float()
    target = torch.tensor([-2.0, -5.0, -5.0])
    assert torch.equal(isac.temperature_loss(log_alpha, log_pi, target, mask),
                       masac.temperature_loss(log_alpha, log_pi, target, mask))
    # the temperature of a too-certain agent rises, of a too-random one falls: each agent has its own
    log_alpha = torch.zeros(2, requires_grad=True)
    isac.temperature_loss(log_alpha, torch.tensor([[-1.0, -5.0]]), torch.tensor([3.0, 3.0]), torch.ones(1, 2)).backward()
    assert log_alpha.grad[0] < 0 < log_alpha.grad[1]


# ---------------------------------------------------------------------------- runs
@pytest.mark.parametrize("env", ["torch:simple_spread", "simple_speaker_listener"])
def test_smoke(env, tmp_path):
    summary = isac.main(tiny(tmp_path, env=env, eval_every=20))
    assert summary["algo"] == "isac" and summary["global_step"] == 40
    assert len(summary["eval_history"]) == 2 and math.isfinite(summary["eval_return_mean"])
    losses = summary["final_losses"]
    assert LOSS_KEYS <= set(losses) and all(math.isfinite(v) for v in losses.values()), losses
    assert losses["alpha"] > 0
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == "isac" and ckpt["log_alpha"].shape == (2 if "speaker" in env else 3,)
    episode = ckpt["replay"]["episodes"][-1]["core"]
    assert "global_states" not in episode  # no state is stored: the critics never see it
    assert ckpt["args"]["env_kwargs"] == ["continuous_actions=true"]  # added where the env takes it


def test_discrete_actions_are_refused_naming_the_files_that_take_them(tmp_path):
    with pytest.raises(ConfigError, match="algos/maddpg.py") as err:
        isac.main(tiny(tmp_path, env_kwargs=("continuous_actions=false",)))
    assert "algos/iql.py" in str(err.value)
    assert not os.path.exists(tmp_path / "runs")


def test_groups_fixed_and_loaded(tmp_path):
    """torch:simple_tag: predators learn while the prey's group stays fixed bit for bit; then the
    prey act as an IDDPG run (another algorithm), and a group copied from an ISAC run keeps its
    temperatures."""
    tag = dict(env="torch:simple_tag", env_kwargs=("max_cycles=4", "continuous_actions=true"), num_steps=4,
               total_timesteps=32, learning_starts=8, share_params="group")
    fixed = isac.main(tiny(tmp_path / "a", train_groups=("adversary",), **tag))
    ckpt = torch.load(os.path.join(fixed["run_dir"], "checkpoint.pt"), weights_only=True)
    assert sorted(fixed["eval_group_returns"]) == ["adversary", "agent"]
    assert ckpt["log_alpha"][3] == pytest.approx(math.log(0.2))  # the prey's temperature never moved
    assert ckpt["log_alpha"][0] != pytest.approx(math.log(0.2))
    from algos import iddpg

    base = tiny(tmp_path / "b", **tag).__dict__
    prey = iddpg.main(make_args(iddpg.Args, **{k: v for k, v in base.items() if k in iddpg.Args.__dataclass_fields__}))
    loaded = isac.main(tiny(tmp_path / "c", load_group=(f"agent={prey['run_dir']}",), **tag))
    assert all(math.isfinite(v) for v in loaded["final_losses"].values())
    again = isac.main(tiny(tmp_path / "c", evaluate_checkpoint=loaded["run_dir"]))
    assert again["eval_return_mean"] == pytest.approx(loaded["eval_return_mean"])
    copied = isac.main(tiny(tmp_path / "d", load_group=(f"adversary={fixed['run_dir']}",),
                            train_groups=("agent",), **tag))
    after = torch.load(os.path.join(copied["run_dir"], "checkpoint.pt"), weights_only=True)
    assert torch.equal(after["log_alpha"][:3], ckpt["log_alpha"][:3])  # copied, then fixed


def test_resume_goes_on_exactly_and_evaluation_loads_the_actor(tmp_path):
    """Stopped at 40 env steps and resumed to 80: the losses of one run of 80 steps (replay, optimisers,
    temperatures, counters and the replay's generator come back)."""
    whole = isac.main(tiny(tmp_path / "whole", total_timesteps=80))
    first = isac.main(tiny(tmp_path / "parts", total_timesteps=40))
    resumed = isac.main(make_args(isac.Args, resume=first["run_dir"], total_timesteps=80))
    assert resumed["global_step"] == 80 and resumed["run_dir"] == first["run_dir"]
    assert resumed["final_losses"] == whole["final_losses"]
    result = isac.main(tiny(tmp_path, evaluate_checkpoint=first["run_dir"]))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])
    with pytest.raises(ConfigError, match="algos/isac.py"):
        masac.main(make_args(masac.Args, evaluate_checkpoint=first["run_dir"], cuda=False))


def test_same_seed_same_losses(tmp_path):
    a, b = isac.main(tiny(tmp_path / "a")), isac.main(tiny(tmp_path / "b"))
    c = isac.main(tiny(tmp_path / "c", seed=2))
    assert a["final_losses"] == b["final_losses"] and a["eval_return_mean"] == b["eval_return_mean"]
    assert a["final_losses"] != c["final_losses"]


def test_real_command_line_run(tmp_path):
    flags = ["--env", "torch:simple_spread", "--total-timesteps", "40", "--num-envs", "2", "--num-steps", "5",
             "--learning-starts", "10", "--buffer-size", "100", "--batch-size", "2", "--hidden-sizes", "16",
             "--eval-episodes", "1", "--eval-num-envs", "1", "--run-dir", str(tmp_path), "--no-cuda",
             "--torch-threads", "1"]
    proc = subprocess.run([sys.executable, os.path.join("algos", "isac.py"), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (path,) = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(path) as f:
        summary = json.load(f)
    assert summary["algo"] == "isac" and summary["global_step"] == 40
    assert all(math.isfinite(v) for v in summary["final_losses"].values())
