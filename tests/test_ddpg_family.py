"""IDDPG, MADDPG, FACMAC, MATD3, MASAC: the Gumbel-softmax straight-through estimator, target policy
smoothing, the Polyak update, the temperature loss and the squashed Gaussian worked by hand; the copied
short functions against MADDPG's; smoke runs (continuous, and discrete where it applies); replay,
truncation and action bounds as stored; resume, evaluation, determinism and one real command line each."""
import glob
import importlib
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from common.cli import ConfigError, make_args
from nets import NonMonotonicMixer, SquashedGaussianActor
from nets.policy import SquashedGaussian

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ["iddpg", "maddpg", "facmac", "matd3", "masac"]
MODULES = {name: importlib.import_module(f"algos.{name}") for name in ALGOS}
REFERENCE = MODULES["maddpg"]  # the other files carry copies of its short functions: they must agree
DISCRETE_TOO = ["iddpg", "maddpg", "facmac"]  # Gumbel-softmax; MATD3 and MASAC are continuous only
CONTINUOUS = ("continuous_actions=true",)
DISCRETE = ("continuous_actions=false",)  # the files default to continuous actions where the env offers both
LOSS_KEYS = {"td_loss", "policy_loss", "q_taken_mean", "target_mean", "grad_norm", "actor_grad_norm"}


def tiny(algo, tmp_path, **overrides):
    """4 iterations of 2 env copies x 5 steps, random actions in the first, 2 updates after each, 16-unit networks."""
    base = dict(num_envs=2, num_steps=5, total_timesteps=40, learning_starts=10, buffer_size=100, batch_size=2,
                updates_per_iteration=2, hidden_sizes=(16,), eval_every=0, eval_episodes=2, eval_num_envs=1,
                checkpoint_every=0, cuda=False, run_dir=str(tmp_path / "runs"), env="torch:simple_spread")
    base.update(overrides)
    return make_args(MODULES[algo].Args, **base)


# ---------------------------------------------------------------------------- Gumbel-softmax
def test_gumbel_softmax_forward_is_one_hot_and_gradients_reach_the_logits():
    torch.manual_seed(0)
    logits = torch.randn(64, 3, 5, requires_grad=True)
    y = REFERENCE.gumbel_softmax_st(logits, temperature=1.0)
    assert set(y.unique().tolist()) == {0.0, 1.0}  # exactly one-hot, not approximately
    assert torch.equal(y.sum(-1), torch.ones(64, 3))
    weights = torch.randn(5)
    (y * weights).sum().backward()  # a "critic" that values each action differently
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    assert torch.isfinite(logits.grad).all()


def test_gumbel_softmax_draws_follow_the_softmax_and_skip_masked_actions():
    torch.manual_seed(1)
    logits = torch.tensor([1.0, 0.0, -1.0, torch.finfo(torch.float32).min])  # action 3 unavailable
    draws = REFERENCE.gumbel_softmax_st(logits.expand(20_000, 4), temperature=0.5)  # temperature: backward only
    freq = draws.mean(0)
    expected = torch.tensor([1.0, 0.0, -1.0]).softmax(-1)
    assert freq[3] == 0.0
    torch.testing.assert_close(freq[:3], expected, atol=0.015, rtol=0)


# ---------------------------------------------------------------------------- TD3 and SAC pieces
def test_target_policy_smoothing_respects_its_clip():
    torch.manual_seed(0)
    m = MODULES["matd3"]
    dim_mask = torch.tensor([[True, True, True], [True, True, False]])  # agent 1 has a padded dimension
    centre = torch.zeros(1000, 2, 3)
    out = m.smoothed_target_actions(centre, noise_std=100.0, noise_clip=0.3, dim_mask=dim_mask)
    assert out.abs().max() <= 0.3 + 1e-7  # |noise| <= noise_clip however large its std
    assert (out.abs() == 0.3).float()[:, 0].mean() > 0.9  # with std 100 nearly every draw hits the clip
    assert (out[:, 1, 2] == 0).all()  # padding stays 0
    edge = torch.full((1000, 2, 3), 0.9)
    out = m.smoothed_target_actions(edge, noise_std=100.0, noise_clip=0.5, dim_mask=dim_mask)
    assert out.max() <= 1.0 and out[:, 0].min() >= 0.4 - 1e-6  # inside the action box and the clip
    small = m.smoothed_target_actions(centre, noise_std=0.01, noise_clip=0.5, dim_mask=dim_mask)
    assert 0.005 < small[:, 0].std() < 0.02  # a small std is left alone by the clip


@pytest.mark.parametrize("algo", ALGOS)
def test_polyak_update_equals_its_formula(algo):
    torch.manual_seed(0)
    online, target = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    before = [p.detach().clone() for p in target.parameters()]
    MODULES[algo].soft_update(target, online, tau=0.1)
    for old, new, o in zip(before, target.parameters(), online.parameters(), strict=True):
        torch.testing.assert_close(new, 0.9 * old + 0.1 * o, rtol=0, atol=1e-7)
    MODULES[algo].soft_update(target, online, tau=1.0)  # tau = 1 is a hard copy
    for new, o in zip(target.parameters(), online.parameters(), strict=True):
        assert torch.equal(new, o)


def test_temperature_loss_moves_the_temperature_towards_the_target_entropy():
    """Agent 0's policy is too certain (entropy 1 < target 3): alpha must rise. Agent 1's is too
    random (entropy 5 > target 3): alpha must fall."""
    m = MODULES["masac"]
    log_alpha = torch.zeros(2, requires_grad=True)
    log_pi = torch.tensor([[-1.0, -5.0]]).expand(8, 2)  # (B, N): entropy estimates -log pi = 1 and 5
    target = torch.tensor([3.0, 3.0])
    optimizer = torch.optim.SGD([log_alpha], lr=0.1)
    loss = m.temperature_loss(log_alpha, log_pi, target, torch.ones(8, 2))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert log_alpha[0] > 0 > log_alpha[1]
    # the gradient with respect to log alpha_i is -(log pi_i + H_target_i), averaged over agents
    torch.testing.assert_close(log_alpha.detach(), 0.1 * torch.tensor([-1.0 + 3.0, -5.0 + 3.0]) / 2)


def test_squashed_gaussian_log_prob_is_the_change_of_variables():
    torch.manual_seed(0)
    mean, log_std = torch.randn(6, 2, 3), torch.randn(6, 2, 3) * 0.3
    dist = SquashedGaussian(mean, log_std, torch.tensor([[True, True, True], [True, True, False]]))
    a, log_prob = dist.rsample_with_log_prob()
    assert a.abs().max() < 1 and (a[:, 1, 2] == 0).all()
    u = torch.atanh(a.clamp(-1 + 1e-6, 1 - 1e-6))
    direct = torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log(1 - a**2)
    direct = direct * torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    torch.testing.assert_close(log_prob, direct.sum(-1), atol=2e-3, rtol=1e-3)
    actor = SquashedGaussianActor(obs_dim=4, n_agents=2, action_dim=3,
                                  action_dim_mask=torch.tensor([[True, True, True], [True, True, False]]))
    greedy, _ = actor(torch.randn(1, 5, 2, 4))
    assert greedy.mode().shape == (1, 5, 2, 3) and (greedy.mode()[..., 1, 2] == 0).all()


def test_non_monotonic_mixer_can_decrease_in_an_agent_value():
    torch.manual_seed(3)
    mixer = NonMonotonicMixer(n_agents=2, state_dim=4, embed_dim=8, hypernet_hidden=16)
    state = torch.randn(256, 4)
    qs = torch.randn(256, 2, requires_grad=True)
    mixer(qs, state).sum().backward()
    assert (qs.grad < 0).any() and (qs.grad > 0).any()  # QMixer's gradients would all be >= 0


@pytest.mark.parametrize("kind, monotone", [("qmix", True), ("nonmonotonic", False), ("vdn", True)])
def test_facmac_builds_the_mixer_asked_for(kind, monotone):
    """--mixer qmix (the default, as the authors' continuous-task config) keeps dQ_tot/dQ_i >= 0;
    nonmonotonic lets it take either sign; vdn is the plain sum."""
    facmac = MODULES["facmac"]
    env = SimpleNamespace(n_agents=2, state_dim=4, obs_shape=(6,), obs_dims=[6, 6], discrete=False, action_dim=2,
                          n_actions=0, action_dims=[2, 2], action_dim_mask=torch.ones(2, 2, dtype=torch.bool))
    args = make_args(facmac.Args, mixer=kind, mixer_embed_dim=8, hypernet_hidden=16)
    assert facmac.Args().mixer == "qmix"
    torch.manual_seed(3)
    _, _, mixer = facmac.build_networks(args, env, torch.device("cpu"))
    for p in mixer.parameters():  # weights of both signs, so a missing abs() shows
        torch.nn.init.normal_(p)
    qs = torch.randn(256, 2, requires_grad=True)
    q_tot = mixer(qs, torch.randn(256, 4))
    q_tot.sum().backward()
    assert bool((qs.grad >= 0).all()) == monotone
    if kind == "vdn":
        torch.testing.assert_close(q_tot, qs.sum(-1, keepdim=True))  # one team of every agent: (B, 1)


# ---------------------------------------------------------------------------- MADDPG's policy-gradient input
def test_with_own_action_replaces_only_the_agents_own_slot():
    replay = torch.tensor([[[1.0], [2.0], [3.0]]])  # (B=1, N=3, A=1)
    own = torch.tensor([[[10.0], [20.0], [30.0]]])
    joint = REFERENCE.with_own_action(replay, own)  # (1, 3, 3, 1)
    assert joint[0, :, :, 0].tolist() == [[10.0, 2.0, 3.0], [1.0, 20.0, 3.0], [1.0, 2.0, 30.0]]
    x = torch.cat(REFERENCE.joint_action_critic_inputs(torch.tensor([[7.0, 8.0]]), joint), dim=-1)  # the critic's two inputs
    assert x.shape == (1, 3, 2 + 3) and x[0, 1].tolist() == [7.0, 8.0, 1.0, 20.0, 3.0]


@pytest.mark.parametrize("algo", ALGOS)
def test_td_lambda_targets_agree_with_qmix(algo):
    """The TD(lambda) targets along stored sequences are QMIX's function (worked by hand in
    tests/test_value_based.py: termination vs truncation, padding); per-agent columns stay apart."""
    from algos import qmix

    g = torch.Generator().manual_seed(0)
    r, q = torch.randn(6, 4, 3, generator=g), torch.randn(6, 4, 3, generator=g)
    term = (torch.rand(6, 4, 3, generator=g) < 0.2).float()
    ended = torch.maximum(term, (torch.rand(6, 4, 3, generator=g) < 0.2).float())
    ended[-1] = 1.0
    for lam in (0.0, 0.8):
        assert torch.equal(MODULES[algo].td_lambda_targets(r, q, term, ended, 0.95, lam),
                           qmix.td_lambda_targets(r, q, term, ended, 0.95, lam))
    # lambda = 0 is the one-step target: r + gamma (1 - terminated) Q'(s')
    torch.testing.assert_close(MODULES[algo].td_lambda_targets(r, q, term, ended, 0.95, 0.0), r + 0.95 * (1 - term) * q)


@pytest.mark.parametrize("algo", [a for a in ALGOS if a != "maddpg"])
def test_copied_functions_agree_with_maddpg(algo):
    """STYLE.md allows short algorithmic copies across files, checked against one reference."""
    m = MODULES[algo]
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(6, 3, generator=g), (torch.rand(6, 3, generator=g) < 0.5).float()
    assert torch.equal(m.masked_mean(x, mask), REFERENCE.masked_mean(x, mask))
    if hasattr(m, "gumbel_softmax_st"):
        logits = torch.randn(5, 3, 4, generator=g)
        torch.manual_seed(7)
        a = m.gumbel_softmax_st(logits, 0.7)
        torch.manual_seed(7)
        assert torch.equal(a, REFERENCE.gumbel_softmax_st(logits, 0.7))
    if hasattr(m, "with_own_action"):
        replay, own = torch.randn(4, 3, 2, generator=g), torch.randn(4, 3, 2, generator=g)
        assert torch.equal(m.with_own_action(replay, own), REFERENCE.with_own_action(replay, own))
        info = torch.randn(4, 5, generator=g)
        joint = REFERENCE.with_own_action(replay, own)
        for part, reference in zip(m.joint_action_critic_inputs(info, joint), REFERENCE.joint_action_critic_inputs(info, joint), strict=True):
            assert torch.equal(part, reference)


# ---------------------------------------------------------------------------- runs
SMOKE = [(a, "torch:simple_spread", CONTINUOUS) for a in ALGOS] \
    + [(a, "simple_speaker_listener", CONTINUOUS) for a in ALGOS] \
    + [(a, "torch:simple_spread", DISCRETE) for a in DISCRETE_TOO] \
    + [(a, "simple_reference", DISCRETE) for a in DISCRETE_TOO]


@pytest.mark.parametrize("algo,env,env_kwargs", SMOKE,
                         ids=[f"{a}-{e}-{'cont' if k else 'disc'}" for a, e, k in SMOKE])
def test_smoke(algo, env, env_kwargs, tmp_path):
    args = tiny(algo, tmp_path, env=env, env_kwargs=env_kwargs, eval_every=20)
    summary = MODULES[algo].main(args)
    assert summary["algo"] == algo and summary["global_step"] == 40
    assert len(summary["eval_history"]) == 2 and math.isfinite(summary["eval_return_mean"])
    losses = summary["final_losses"]
    assert LOSS_KEYS <= set(losses)
    assert all(math.isfinite(v) for v in losses.values()), losses
    if algo == "masac":
        assert {"alpha", "alpha_loss", "entropy"} <= set(losses) and losses["alpha"] > 0
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f)["global_step"] == 40


@pytest.mark.parametrize("algo", ["matd3", "masac"])
def test_discrete_actions_are_refused_with_the_file_that_takes_them(algo, tmp_path):
    with pytest.raises(ConfigError, match="maddpg"):
        MODULES[algo].main(tiny(algo, tmp_path, env_kwargs=DISCRETE))


def test_continuous_actions_are_the_default_only_where_the_env_takes_the_argument(tmp_path):
    """The family's files ask mpe2 for continuous actions unless told otherwise; envs without the
    argument (MaMuJoCo, the matrix game) are not given it, an explicit value is kept, and the run's
    args record what was used (evaluation and resume rebuild the env from them)."""
    from envs import with_continuous_actions

    assert with_continuous_actions("torch:simple_spread", ()) == ("continuous_actions=true",)
    assert with_continuous_actions("simple_spread", ("N=4",)) == ("N=4", "continuous_actions=true")
    assert with_continuous_actions("simple_spread", ("continuous_actions=false",)) == ("continuous_actions=false",)
    assert with_continuous_actions("matrix_game", ()) == ()
    assert with_continuous_actions("no_such_env", ()) == ()  # make_env then says what is wrong
    summary = MODULES["matd3"].main(tiny("matd3", tmp_path, env_kwargs=()))
    with open(os.path.join(summary["run_dir"], "args.json")) as f:
        assert json.load(f)["env_kwargs"] == ["continuous_actions=true"]
    assert math.isfinite(MODULES["matd3"].main(tiny("matd3", tmp_path, evaluate_checkpoint=summary["run_dir"]))
                         ["eval_return_mean"])


@pytest.mark.parametrize("algo", ["maddpg", "masac"])
def test_replay_keeps_actions_in_bounds_and_final_observations_of_truncated_episodes(algo, tmp_path):
    """One 25-step MPE episode per copy: the last step is a truncation (bootstrapped), not a
    termination; its next observation is the true final one (agents still moving), not the reset
    one (velocity 0); stored actions lie in the normalised box, padded dimensions at 0."""
    args = tiny(algo, tmp_path, env="simple_speaker_listener", num_steps=25, total_timesteps=100, learning_starts=50,
                buffer_size=1000)
    summary = MODULES[algo].main(args)
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    episode = ckpt["replay"]["episodes"][-1]["core"]
    dones, truncated = episode["terminated"], episode["truncated"]  # (T, E, N)
    assert dones.sum() == 0 and (truncated[-1] == 1).all() and truncated[:-1].sum() == 0
    next_obs, obs = episode["next_obs"], episode["obs"]  # (T, E, N, obs_dim)
    assert torch.equal(next_obs[:-1], obs[1:])  # inside an episode, o_{t+1} is the next step's o
    listener_velocity = next_obs[-1, :, 1, :2]  # the listener's own velocity in its final observation
    assert (listener_velocity.abs().sum(-1) > 0).all()
    assert (obs[0, :, 1, :2] == 0).all()  # a fresh episode starts at rest
    actions = episode["actions"]  # (T, E, N, 5): the speaker has 3 real dimensions
    assert actions.abs().max() <= 1.0 and (actions[..., 0, 3:] == 0).all()


def test_resume_restores_replay_and_counters_and_evaluation_loads_the_actor(tmp_path):
    m = MODULES["maddpg"]
    first = m.main(tiny("maddpg", tmp_path, total_timesteps=40))
    ckpt = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)
    # updates start once learning_starts = 10 env steps are stored: after every one of the 4 iterations
    assert len(ckpt["replay"]["episodes"]) == 4 and ckpt["updates"] == 4 * 2 and ckpt["iteration"] == 4
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=60))
    assert resumed["global_step"] == 60 and resumed["run_dir"] == first["run_dir"]
    ckpt = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)
    assert ckpt["updates"] == 6 * 2 and ckpt["critic_optimizer"]["state"][0]["step"].item() == 6 * 2
    assert len(ckpt["replay"]["episodes"]) == 6  # the restored replay plus two new entries
    result = m.main(tiny("maddpg", tmp_path, evaluate_checkpoint=first["run_dir"]))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])
    with pytest.raises(ConfigError, match="algos/maddpg.py"):
        MODULES["matd3"].main(tiny("matd3", tmp_path, evaluate_checkpoint=first["run_dir"]))


@pytest.mark.parametrize("algo", ["facmac", "masac"])
def test_resume_of_the_other_layouts(algo, tmp_path):
    m = MODULES[algo]
    first = m.main(tiny(algo, tmp_path))
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=60))
    assert resumed["global_step"] == 60 and all(math.isfinite(v) for v in resumed["final_losses"].values())
    assert math.isfinite(m.main(tiny(algo, tmp_path, evaluate_checkpoint=first["run_dir"]))["eval_return_mean"])


def test_facmac_state_norm_reads_the_states_played_and_resumes(tmp_path):
    """--state-norm (as QMIX's): FACMAC's mixer reads SMAX's state standardised with running statistics of the
    states played, saved in the checkpoint and carried on by a resumed run."""
    m = MODULES["facmac"]
    first = m.main(tiny("facmac", tmp_path, env="torch:smax_3m", state_norm=True))
    saved = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)["state_norm"]
    assert saved["count"] == 40 and saved["mean"].abs().max() > 1.0  # one state per env step; map coordinates
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=60))
    assert all(math.isfinite(v) for v in resumed["final_losses"].values())
    later = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)["state_norm"]
    assert later["count"] == 60


@pytest.mark.parametrize("algo", ["maddpg", "matd3"])
def test_same_seed_same_losses(algo, tmp_path):
    m = MODULES[algo]
    a = m.main(tiny(algo, tmp_path / "a"))
    b = m.main(tiny(algo, tmp_path / "b"))
    c = m.main(tiny(algo, tmp_path / "c", seed=2))
    assert a["final_losses"] == b["final_losses"] and a["eval_return_mean"] == b["eval_return_mean"]
    assert a["final_losses"] != c["final_losses"]


@pytest.mark.parametrize("algo", ALGOS)
def test_real_command_line_run(algo, tmp_path):
    flags = ["--env", "torch:simple_spread", "--total-timesteps", "40", "--num-envs", "2", "--num-steps", "5",
             "--learning-starts", "10", "--buffer-size", "100", "--batch-size", "2", "--hidden-sizes", "16",
             "--eval-episodes", "1", "--eval-num-envs", "1", "--run-dir", str(tmp_path), "--no-cuda"]
    proc = subprocess.run([sys.executable, os.path.join("algos", f"{algo}.py"), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (path,) = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(path) as f:
        summary = json.load(f)
    assert summary["algo"] == algo and summary["global_step"] == 40


def test_actor_outputs_respect_padding_and_masks():
    """The deterministic actor: continuous actions in [-1, 1] with padded dimensions 0; discrete
    logits with unavailable actions at the dtype's minimum (never the argmax)."""
    from nets import DeterministicActor

    torch.manual_seed(0)
    dim_mask = torch.tensor([[True, True, True], [True, False, False]])
    cont = DeterministicActor(4, 2, False, 3, dim_mask, hidden_sizes=(8,))
    a = cont.output(torch.randn(10, 2, 4) * 100)
    assert a.abs().max() <= 1.0 and (a[:, 1, 1:] == 0).all()
    disc = DeterministicActor(4, 2, True, 3, dim_mask, hidden_sizes=(8,))
    dist, _ = disc(torch.randn(1, 10, 2, 4))
    assert (dist.mode()[..., 1] == 0).all()
    logits = disc.output(torch.randn(10, 2, 4))
    onehot = REFERENCE.gumbel_softmax_st(logits, 1.0)
    assert (onehot[:, 1, 1:] == 0).all() and torch.equal(onehot.argmax(-1)[:, 1], torch.zeros(10, dtype=torch.long))
    assert F.one_hot(onehot.argmax(-1), 3).float().equal(onehot)


@pytest.mark.skipif(importlib.util.find_spec("gymnasium_robotics") is None, reason="needs gymnasium-robotics")
def test_matd3_halfcheetah_preset_runs_and_the_benchmark_reports_the_robots_return(tmp_path):
    """The MaMuJoCo preset (no continuous_actions argument: MaMuJoCo has none) trains and
    evaluates; the benchmark divides the summed return by the 2 agents, who each get the robot's reward."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import learning_mamujoco

    preset = os.path.join(REPO, "configs", "matd3", "mamujoco_HalfCheetah-2x3.yaml")
    args = make_args(MODULES["matd3"].Args, config=preset, total_timesteps=300, learning_starts=100,
                     buffer_size=1000, env_kwargs=("max_episode_steps=50",), eval_every=0, eval_episodes=2,
                     eval_num_envs=2, checkpoint_every=0, cuda=False, run_dir=str(tmp_path / "runs"))
    assert args.env == "mamujoco:HalfCheetah-2x3" and args.gamma == 0.99 and args.td_lambda == 0.0
    summary = MODULES["matd3"].main(args)
    assert summary["global_step"] == 300 and math.isfinite(summary["final_losses"]["td_loss"])
    record = learning_mamujoco.read_run(summary["run_dir"])
    rows = learning_mamujoco.report([dict(record, label="matd3", seed=s) for s in (1, 2)], n=2)
    assert rows[0]["best_mean_eval"] == pytest.approx(summary["eval_return_mean"] / 2)
    assert rows[0]["met"] is None  # 300 steps: the 1M budget is not reached and the bar is not met
