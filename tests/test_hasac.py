"""HASAC: the sequential actor update worked by hand (agent i_m's loss sees the NEW actions of the agents
updated before it and the current ones of those after it), team flags and the team critics' inputs (the
copies of MASAC's short functions are checked in tests/test_copies.py); smoke runs (cooperative, heterogeneous agents, two
learning teams, a fixed group and a group acting as another algorithm's run), discrete actions refused,
resume, evaluation, determinism and one real command line."""
import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from algos import hasac, masac
from common.cli import ConfigError, make_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_KEYS = {"td_loss", "policy_loss", "q_taken_mean", "target_mean", "grad_norm", "actor_grad_norm", "entropy",
             "alpha", "alpha_loss"}


def tiny(tmp_path, **overrides):
    """4 iterations of 2 env copies x 5 steps, random actions in the first, 2 updates after each, 16-unit networks."""
    base = dict(num_envs=2, num_steps=5, total_timesteps=40, learning_starts=10, buffer_size=100, batch_size=2,
                updates_per_iteration=2, hidden_sizes=(16,), eval_every=0, eval_episodes=2, eval_num_envs=1,
                checkpoint_every=0, cuda=False, torch_threads=1, run_dir=str(tmp_path / "runs"),
                env="torch:simple_spread")
    base.update(overrides)
    return make_args(hasac.Args, **base)


# ---------------------------------------------------------------------------- the sequential update by hand
class PointPolicy:
    """A "distribution" whose every draw is the point theta (N, A), broadcast over the batch; log pi = 0."""

    def __init__(self, theta, B):
        self.theta, self.B = theta, B

    def rsample_with_log_prob(self):
        return self.theta.expand(self.B, *self.theta.shape), torch.zeros(self.B, self.theta.shape[0])

    def sample(self):
        return self.rsample_with_log_prob()[0].detach().clone()


class PointActor(torch.nn.Module):
    """Agent n's policy always plays theta[n]: what the update makes of it is known exactly."""

    def __init__(self, theta):
        super().__init__()
        self.theta = torch.nn.Parameter(theta.clone())

    def forward(self, obs, state=None, starts=None, action_mask=None):
        return PointPolicy(self.theta, obs.shape[0]), None


class SpyCritic(torch.nn.Module):
    """Q(s, a) = -|a - goal|^2 summed over the joint action, for each of K teams; records every joint it values."""

    def __init__(self, goal, seen):
        super().__init__()
        self.goal, self.seen = goal, seen

    def forward(self, x):
        info, joint = x  # (B, K, D), (B, K, N * A)
        self.seen.append(joint[:, 0].detach().clone())
        return -((joint - self.goal.reshape(-1)) ** 2).sum(-1), None  # (B, K)


def test_sequential_update_conditions_each_agent_on_the_new_actions_of_those_before_it():
    """Three agents, order 2 -> 0 -> 1. Plain SGD (lr 0.1) on -Q = |a - goal|^2 moves agent n's point to
    theta_n - 0.2 (theta_n - goal_n). When agent 0 takes its step, slot 2 must hold agent 2's NEW point and
    slot 1 its old one; when agent 1 takes its step, slots 2 and 0 hold new points."""
    N, A, B = 3, 2, 4
    theta = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    goal = torch.zeros(N, A)
    new = theta - 0.2 * (theta - goal)  # each agent's point after its one step
    actor = PointActor(theta)
    seen = []
    critics = [SpyCritic(goal, seen), SpyCritic(goal, seen)]
    optimizers = [torch.optim.SGD(actor.parameters(), lr=0.1) for _ in range(N)]
    order = [2, 0, 1]
    out = hasac.sequential_soft_actor_update(
        actor, critics, optimizers, set_of=[0, 1, 2], order=order, team_of=[0, 0, 0], obs=torch.zeros(B, N, 1),
        info=torch.zeros(B, 3), replay_actions=torch.full((B, N, A), -9.0), learning=torch.ones(N, 1, dtype=torch.bool),
        alpha=torch.ones(N), alive=torch.ones(B, N), max_grad_norm=1e9)
    torch.testing.assert_close(actor.theta.detach(), new)  # every agent took exactly one step of its own
    joints = [seen[2 * m].view(B, N, A)[0] for m in range(N)]  # the joint each agent's loss valued (2 critics each)
    assert torch.equal(joints[0], theta)  # agent 2 first: everyone's current point
    assert torch.equal(joints[1][2], new[2]) and torch.equal(joints[1][[0, 1]], theta[[0, 1]])
    assert torch.equal(joints[2][[2, 0]], new[[2, 0]]) and torch.equal(joints[2][1], theta[1])
    # the losses: -Q at the joint each agent's loss saw (its own slot its pre-step point)
    for (loss, log_pi, _), joint in zip(out, joints, strict=True):
        assert loss.item() == pytest.approx((joint ** 2).sum().item())
        assert log_pi.shape == (B, 1)


def test_fixed_agents_keep_their_played_actions_and_dead_steps_do_not_count():
    """Agent 1 is fixed (its group does not learn): its slot holds the replayed action, it takes no step. Agent 0
    is dead in half the batch: its loss is the mean over the other half only."""
    N, A, B = 2, 1, 4
    theta = torch.tensor([[1.0], [2.0]])
    seen = []
    actor = PointActor(theta)
    goal = torch.zeros(N, A)
    alive = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    replay = torch.tensor([[7.0], [8.0]]).expand(B, N, A).clone()
    replay[2:, 1] = 100.0  # the fixed agent played something else in the rows where agent 0 is dead
    optimizers = [torch.optim.SGD(actor.parameters(), lr=0.1) for _ in range(N)]
    (loss, _, _), = hasac.sequential_soft_actor_update(
        actor, [SpyCritic(goal, seen), SpyCritic(goal, seen)], optimizers, set_of=[0, 1], order=[0], team_of=[0, 0],
        obs=torch.zeros(B, N, 1), info=torch.zeros(B, 3), replay_actions=replay,
        learning=torch.tensor([[True], [False]]), alpha=torch.ones(N), alive=alive, max_grad_norm=1e9)
    joint = seen[0].view(B, N, A)
    assert torch.equal(joint[:, 1], replay[:, 1])  # the fixed agent's played action, not its actor's point
    assert loss.item() == pytest.approx(1.0 + 8.0 ** 2)  # only the rows where agent 0 is alive
    assert actor.theta[1].item() == 2.0  # the fixed agent's point is untouched


def test_with_agent_action_replaces_one_slot_and_passes_gradients_to_it_only():
    joint = torch.tensor([[[1.0], [2.0], [3.0]]])
    own = torch.tensor([[[20.0]]], requires_grad=True)
    out = hasac.with_agent_action(joint, 1, own)
    assert out[0, :, 0].tolist() == [1.0, 20.0, 3.0]
    out.sum().backward()
    assert own.grad.item() == 1.0
    info, flat = hasac.team_critic_inputs(torch.tensor([[7.0, 8.0]]), out.detach(), K=2)
    assert info.shape == (1, 2, 2) and flat.shape == (1, 2, 3) and flat[0, 1].tolist() == [1.0, 20.0, 3.0]


def test_team_flags_by_hand():
    """Team 0 = agents 0, 1; team 1 = agent 2. Row 0: agent 0 terminates, agent 1 goes on -> team 0 goes on.
    Row 1: agent 0 terminates, agent 1 was already gone -> team 0 terminated. Row 2: the clock cuts everyone ->
    ended but not terminated (bootstrapped). Row 3: team 1's agent is gone -> terminated, not alive."""
    dones = torch.tensor([[1.0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    truncated = torch.tensor([[0.0, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    alive = torch.tensor([[1.0, 1, 1], [1, 0, 1], [1, 1, 1], [1, 1, 0]])
    terminated, ended, team_alive = hasac.learning_team_flags(dones, truncated, alive, [[0, 1], [2]])
    assert terminated.tolist() == [[0, 0], [1, 0], [0, 0], [0, 1]]
    assert ended.tolist() == [[0, 0], [1, 0], [1, 1], [0, 1]]
    assert team_alive.tolist() == [[1, 1], [1, 1], [1, 1], [1, 0]]


# ---------------------------------------------------------------------------- runs
@pytest.mark.parametrize("env", ["torch:simple_spread", "simple_speaker_listener"])
def test_smoke(env, tmp_path):
    """Cooperative runs; speaker-listener has agents of different sizes (the speaker 3 action dims, the listener 5)."""
    summary = hasac.main(tiny(tmp_path, env=env, eval_every=20))
    assert summary["algo"] == "hasac" and summary["global_step"] == 40
    assert len(summary["eval_history"]) == 2 and math.isfinite(summary["eval_return_mean"])
    losses = summary["final_losses"]
    assert LOSS_KEYS <= set(losses) and all(math.isfinite(v) for v in losses.values()), losses
    assert losses["alpha"] > 0
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    N = len(ckpt["agents"])
    assert len(ckpt["actor_optimizers"]) == N and len(ckpt["alpha_optimizers"]) == N  # one per agent (none shared)
    assert ckpt["updates"] == 4 * 2 and (ckpt["log_alpha"] != math.log(0.2)).all()  # every temperature tuned


def test_two_teams_a_fixed_group_and_a_group_acting_as_another_run(tmp_path):
    """torch:simple_tag (3 predators `adversary`, 1 prey `agent`): two learning teams (two critics each);
    then the prey copied from that run and fixed (its weights unchanged bit for bit); then the prey acting
    as a MASAC run while the predators learn."""
    kwargs = dict(env="torch:simple_tag", env_kwargs=("max_cycles=4", "continuous_actions=true"), share_params="group")
    source = hasac.main(tiny(tmp_path / "a", **kwargs))
    ckpt = torch.load(os.path.join(source["run_dir"], "checkpoint.pt"), weights_only=True)
    assert sorted(source["eval_group_returns"]) == ["adversary", "agent"]
    assert ckpt["critics"]["0.net.head.weight"].shape[0] == 2  # one head per learning team
    fixed = hasac.main(tiny(tmp_path / "b", seed=7, train_groups=("adversary",),
                            load_group=(f"agent={source['run_dir']}",), **kwargs))
    assert all(math.isfinite(v) for v in fixed["final_losses"].values())
    after = torch.load(os.path.join(fixed["run_dir"], "checkpoint.pt"), weights_only=True)
    rows = after["agent_rows"]["actor"]
    for name, r in rows.items():
        if r is not None:
            assert torch.equal(after["actor"][name][r[3]], ckpt["actor"][name][r[3]]), name  # the prey
    assert after["log_alpha"][3] == ckpt["log_alpha"][3]
    other = masac.main(make_args(masac.Args, num_envs=2, num_steps=5, total_timesteps=20, learning_starts=10,
                                 buffer_size=100, batch_size=2, hidden_sizes=(16,), eval_episodes=2, eval_num_envs=1,
                                 cuda=False, run_dir=str(tmp_path / "c"), **kwargs))
    loaded = hasac.main(tiny(tmp_path / "d", load_group=(f"agent={other['run_dir']}",), **kwargs))
    assert all(math.isfinite(v) for v in loaded["final_losses"].values())


def test_discrete_actions_are_refused_naming_the_files_that_take_them(tmp_path):
    with pytest.raises(ConfigError, match="happo"):
        hasac.main(tiny(tmp_path, env_kwargs=("continuous_actions=false",)))


def test_resume_goes_on_as_the_uninterrupted_run_and_evaluation_loads_the_actor(tmp_path):
    whole = hasac.main(tiny(tmp_path / "whole", total_timesteps=60))
    first = hasac.main(tiny(tmp_path / "cut", total_timesteps=30))
    resumed = hasac.main(make_args(hasac.Args, resume=first["run_dir"], total_timesteps=60))
    assert resumed["global_step"] == 60 and resumed["run_dir"] == first["run_dir"]
    assert resumed["final_losses"] == whole["final_losses"]  # optimisers, replay, RNGs and agent orders restored
    result = hasac.main(tiny(tmp_path, evaluate_checkpoint=first["run_dir"]))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])


def test_same_seed_same_losses(tmp_path):
    a = hasac.main(tiny(tmp_path / "a"))
    b = hasac.main(tiny(tmp_path / "b"))
    c = hasac.main(tiny(tmp_path / "c", seed=2))
    assert a["final_losses"] == b["final_losses"] and a["eval_return_mean"] == b["eval_return_mean"]
    assert a["final_losses"] != c["final_losses"]


def test_real_command_line_run(tmp_path):
    flags = ["--env", "torch:simple_spread", "--total-timesteps", "40", "--num-envs", "2", "--num-steps", "5",
             "--learning-starts", "10", "--buffer-size", "100", "--batch-size", "2", "--hidden-sizes", "16",
             "--eval-episodes", "1", "--eval-num-envs", "1", "--run-dir", str(tmp_path), "--no-cuda"]
    proc = subprocess.run([sys.executable, os.path.join("algos", "hasac.py"), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (path,) = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(path) as f:
        summary = json.load(f)
    assert summary["algo"] == "hasac" and summary["global_step"] == 40


@pytest.mark.skipif(importlib.util.find_spec("gymnasium_robotics") is None, reason="needs gymnasium-robotics")
def test_halfcheetah_preset_runs(tmp_path):
    """The MaMuJoCo preset (HARL's HASAC settings) trains and evaluates on two agents of different observation sizes."""
    preset = os.path.join(REPO, "configs", "hasac", "mamujoco_HalfCheetah-2x3.yaml")
    args = make_args(hasac.Args, config=preset, total_timesteps=300, learning_starts=100, buffer_size=1000, batch_size=2,
                     hidden_sizes=(16,), env_kwargs=("max_episode_steps=50",), eval_every=0, eval_episodes=2,
                     eval_num_envs=2, checkpoint_every=0, cuda=False, torch_threads=1, run_dir=str(tmp_path / "runs"))
    assert args.env == "mamujoco:HalfCheetah-2x3" and args.gamma == 0.99 and args.share_params == "none"
    summary = hasac.main(args)
    assert summary["global_step"] == 300 and all(math.isfinite(v) for v in summary["final_losses"].values())
