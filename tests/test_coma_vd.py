"""COMA, VDA2C and VDPPO: the counterfactual baseline and TD(lambda) targets by hand, the team
advantage from the mixed value, the copied short functions against their references, smoke runs,
COMA's refusal of continuous actions, resume, evaluation and determinism."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from algos import coma, mappo, qmix, vda2c, vdppo
from common.cli import ConfigError, make_args
from nets import QMixer, VDNMixer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = {"coma": coma, "vda2c": vda2c, "vdppo": vdppo}
VD = [vda2c, vdppo]
LOSS_KEYS = {
    "coma": {"policy_loss", "td_loss", "entropy", "q_taken_mean", "grad_norm", "explained_variance"},
    "vda2c": {"policy_loss", "value_loss", "entropy", "grad_norm", "explained_variance"},
    "vdppo": {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "explained_variance"},
}
CONTINUOUS = ("continuous_actions=true",)


def tiny(name, tmp_path, **overrides):
    """2 iterations of 2 env copies x 5 steps, 16-unit networks, CPU, evaluation only at the end."""
    base = dict(num_envs=2, num_steps=5, total_timesteps=20, eval_episodes=2, eval_num_envs=1, eval_every=0,
                hidden_sizes=(16,), cuda=False, run_dir=str(tmp_path / "runs"), env="torch:simple_spread")
    if name == "coma":
        base.update(critic_hidden_sizes=(16,), critic_epochs=2)
    if name == "vdppo":
        base.update(update_epochs=2, num_minibatches=1)
    base.update(overrides)
    return make_args(ALGOS[name].Args, **base)


# ----------------------------------------------------------------------------- COMA by hand
def test_counterfactual_baseline_by_hand():
    """Two agents, three actions. b_i = sum_a pi_i(a) Q_i(s, (a_-i, a)); A_i = Q_i(s, a_i) - b_i."""
    q = torch.tensor([[1.0, 2.0, 4.0],     # agent 0: Q_0(s, (a_1, a)) for a = 0, 1, 2
                      [10.0, 0.0, -5.0]])  # agent 1
    probs = torch.tensor([[0.5, 0.25, 0.25],
                          [0.2, 0.0, 0.8]])  # agent 1's action 1 is masked out (probability 0)
    actions = torch.tensor([2, 0])
    # agent 0: b = 0.5 * 1 + 0.25 * 2 + 0.25 * 4 = 2.0,   A = 4 - 2 = 2
    # agent 1: b = 0.2 * 10 + 0 * 0 + 0.8 * (-5) = -2.0, A = 10 - (-2) = 12
    adv = coma.counterfactual_advantage(q, probs, actions)
    torch.testing.assert_close(adv, torch.tensor([2.0, 12.0]))
    # The baseline is the policy's expectation of Q: under the policy, the advantage averages to zero.
    g = torch.Generator().manual_seed(0)
    q, logits = torch.randn(4, 3, 5, generator=g), torch.randn(4, 3, 5, generator=g)
    probs = logits.softmax(-1)
    expected = sum(probs[..., a] * coma.counterfactual_advantage(q, probs, torch.full((4, 3), a)) for a in range(5))
    torch.testing.assert_close(expected, torch.zeros(4, 3), atol=1e-6, rtol=0)


def test_coma_exploration_mix():
    """(1 - eps) pi + eps uniform over the available actions: masked actions stay at 0, eps 0 is pi,
    eps 1 is uniform, gradients reach the logits, and the anneal runs from eps_start to eps_finish."""
    from nets import MaskedCategorical
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5]], requires_grad=True)
    mask = torch.tensor([[True, True, False, True]])
    pi = MaskedCategorical(logits, mask)
    torch.testing.assert_close(coma.behaviour_policy(pi, 0.0).probs, pi.probs)
    torch.testing.assert_close(coma.behaviour_policy(pi, 1.0).probs, torch.tensor([[1 / 3, 1 / 3, 0.0, 1 / 3]]))
    mixed = coma.behaviour_policy(pi, 0.3)
    torch.testing.assert_close(mixed.probs, 0.7 * pi.probs + 0.1 * mask.float())
    assert mixed.probs[0, 2] == 0.0 and not bool((mixed.sample((2000,)) == 2).any())
    mixed.log_prob(torch.tensor([1])).sum().backward()
    assert logits.grad.abs().sum() > 0
    args = coma.Args(eps_start=0.5, eps_finish=0.05, eps_anneal_steps=1000)
    assert [coma.epsilon_at(args, s) for s in (0, 500, 1000, 5000)] == pytest.approx([0.5, 0.275, 0.05, 0.05])


def test_critic_inputs_hide_own_action():
    """Agent i's row: the state, its own observation, the others' one-hot actions, its own block zero
    (three inputs, which the critic concatenates after encoding each)."""
    state = torch.tensor([[7.0, 8.0]])  # (E=1, S=2)
    obs = torch.tensor([[[0.1], [0.2], [0.3]]])  # (E=1, N=3, obs_dim=1)
    actions = F.one_hot(torch.tensor([[1, 0, 1]]), 2).float()  # (E=1, N=3, A=2)
    x = torch.cat(coma.counterfactual_critic_inputs(state, obs, actions), dim=-1)
    assert x.shape == (1, 3, 2 + 1 + 3 * 2)
    torch.testing.assert_close(x[0], torch.tensor([
        [7.0, 8.0, 0.1, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0],
        [7.0, 8.0, 0.2, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        [7.0, 8.0, 0.3, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0],
    ]))


def test_coma_td_lambda_targets_by_hand():
    """(T=3, E=1, N=2): agent columns share the team reward; column order kept. gamma 0.5, lambda 0.5.
    The episode is truncated at t=2, the rollout's last step: the target bootstraps from next_q there."""
    r = torch.tensor([1.0, 2.0, 3.0])[:, None, None].expand(3, 1, 2)
    next_q = torch.tensor([[4.0, 40.0], [6.0, 60.0], [8.0, 80.0]])[:, None, :]  # (T, E, N)
    term = torch.zeros(3, 1, 2)
    ended = torch.zeros(3, 1, 2)
    ended[2] = 1.0
    y = coma.td_lambda_targets(r, next_q, term, ended, gamma=0.5, lam=0.5)
    y2 = 3 + 0.5 * 8                        # 7
    y1 = 2 + 0.5 * (0.5 * 6 + 0.5 * y2)     # 2 + 0.5 * 6.5 = 5.25
    y0 = 1 + 0.5 * (0.5 * 4 + 0.5 * y1)     # 1 + 0.5 * 4.625 = 3.3125
    torch.testing.assert_close(y[:, 0, 0], torch.tensor([y0, y1, y2]))
    # terminated at t=2: no bootstrap at all
    y = coma.td_lambda_targets(r, next_q, ended, ended, gamma=0.5, lam=0.5)
    torch.testing.assert_close(y[2, 0], torch.tensor([3.0, 3.0]))


@pytest.mark.parametrize("seed", [0, 1])
def test_coma_copies_agree_with_qmix(seed):
    g = torch.Generator().manual_seed(seed)
    T, E, N = 9, 3, 2
    r, nq = torch.randn(T, E, N, generator=g), torch.randn(T, E, N, generator=g)
    ended = (torch.rand(T, E, N, generator=g) < 0.3).float()
    term = ended * (torch.rand(T, E, N, generator=g) < 0.5).float()
    for lam in (0.0, 0.6, 1.0):
        assert torch.equal(coma.td_lambda_targets(r, nq, term, ended, 0.97, lam),
                           qmix.td_lambda_targets(r, nq, term, ended, 0.97, lam))
    online, a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    coma.soft_update(a, online, 0.3)
    qmix.soft_update(b, online, 0.3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# ----------------------------------------------------------------------------- value decomposition by hand
@pytest.mark.parametrize("algo", VD, ids=lambda m: m.__name__)
def test_team_advantage_uses_the_mixed_value(algo):
    """VDN mixer, two agents, one env copy, T=2; the episode is truncated at t=1.
    V_tot = V_0 + V_1 and the team reward r_0 + r_1 drive one advantage for both agents."""
    agent_values = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])  # (T, E, N)
    final_agent_values = torch.tensor([[6.0, 6.0]])  # V_i of the final observation after t=1, (E, N)
    rewards = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]]])  # (T, E, N)
    truncated = torch.tensor([[[0.0, 0.0]], [[1.0, 1.0]]])
    ends = truncated.clone()
    mixer = VDNMixer()
    values = mixer(agent_values)  # (T, E) = [[3], [7]]
    next_values = torch.stack([values[1], mixer(final_agent_values)])  # V_tot(s_1), V_tot(final) = 12
    terminated, trunc = algo.team_flags(truncated, ends)
    assert terminated.sum() == 0 and torch.equal(trunc, torch.tensor([[0.0], [1.0]]))
    adv, ret = algo.compute_gae(rewards.sum(-1), values, next_values, terminated, trunc, 0.5, 0.5)
    # t=1: delta = 2 + 0.5 * 12 - 7 = 1,      A_1 = 1 (the episode ends: nothing after it)
    # t=0: delta = 1 + 0.5 * 7 - 3 = 1.5,     A_0 = 1.5 + 0.5 * 0.5 * 1 = 1.75
    torch.testing.assert_close(adv, torch.tensor([[1.75], [1.0]]))
    torch.testing.assert_close(ret, adv + values)


def test_team_flags_termination_and_dead_agents():
    truncated = torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 1.0]]])  # (T=3, E=1, N=2)
    ends = torch.tensor([[[0.0, 0.0]], [[1.0, 1.0]], [[1.0, 1.0]]])  # t=1 ended by the task, t=2 by the clock
    for algo in (vda2c, vdppo, coma):
        terminated, trunc = algo.team_flags(truncated, ends)
        torch.testing.assert_close(terminated, torch.tensor([[0.0], [1.0], [0.0]]))
        torch.testing.assert_close(trunc, torch.tensor([[0.0], [0.0], [1.0]]))


@pytest.mark.parametrize("algo", VD, ids=lambda m: m.__name__)
@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_gae_gets_the_mixers_team_value_and_reward(tmp_path, monkeypatch, algo, mixer):
    """Inside main: GAE's values are mixer(V_i(o_i), s) of the stored steps, its rewards the team's."""
    from buffers import MultiAgentRolloutBuffer

    captured, checked = {}, []
    build, gae, batch = algo.build_networks, algo.compute_gae, MultiAgentRolloutBuffer.batch

    def build_and_keep(args, env, device, *learning):
        nets = build(args, env, device, *learning)
        captured["critic"], captured["mixer"] = nets[1], nets[2]
        return nets

    def batch_and_keep(self, device=None, keys=None):
        captured["batch"] = batch(self, device, keys)
        return captured["batch"]

    def gae_and_check(rewards, values, next_values, terminated, truncated, gamma, lam):
        b = captured["batch"]
        with torch.no_grad():
            agent_values, _ = captured["critic"](b["obs"])  # (T, E, N), feed-forward critic
            expected = captured["mixer"](agent_values, b["global_states"])  # (T, E, 1): one team
        assert isinstance(captured["mixer"].mixers[0], QMixer if mixer == "qmix" else VDNMixer)
        torch.testing.assert_close(values, expected)
        torch.testing.assert_close(rewards, b["rewards"].sum(-1, keepdim=True))
        checked.append(True)
        return gae(rewards, values, next_values, terminated, truncated, gamma, lam)

    monkeypatch.setattr(algo, "build_networks", build_and_keep)
    monkeypatch.setattr(algo, "compute_gae", gae_and_check)
    monkeypatch.setattr(MultiAgentRolloutBuffer, "batch", batch_and_keep)
    algo.main(tiny(algo.__name__.split(".")[-1], tmp_path, mixer=mixer, value_norm=False,
                   env_kwargs=("max_cycles=3",)))
    assert len(checked) == 2


# ----------------------------------------------------------------------------- copies against references
@pytest.mark.parametrize("algo", VD, ids=lambda m: m.__name__)
@pytest.mark.parametrize("shape", [(7, 3), (7, 3, 2)])
def test_vd_copies_agree_with_mappo(algo, shape):
    g = torch.Generator().manual_seed(len(shape))
    tensors = [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(3)]
    flags = [(torch.rand(*shape, generator=g) < 0.3).double() for _ in range(2)]
    for ours, ref in zip(algo.compute_gae(*tensors, *flags, 0.97, 0.9), mappo.compute_gae(*tensors, *flags, 0.97, 0.9)):
        assert torch.equal(ours, ref)
    mask = (torch.rand(*shape, generator=g) < 0.7).double()
    assert torch.equal(algo.masked_mean(tensors[0], mask), mappo.masked_mean(tensors[0], mask))
    assert algo.masked_mean(tensors[0], torch.zeros_like(mask)).item() == 0.0


def test_copies_of_short_functions_agree():
    x = torch.randn(6, 2, 3, 4)
    for L in (1, 2, 3):
        assert torch.equal(vdppo.to_chunks(x, L), mappo.to_chunks(x, L))
        assert torch.equal(vdppo.to_chunks(x[..., 0, 0], L), mappo.to_chunks(x[..., 0, 0], L))  # team tensors (T, E)
    mask = (torch.rand(6, 2, 3) < 0.5).float()
    assert torch.equal(coma.masked_mean(x[..., 0], mask), mappo.masked_mean(x[..., 0], mask))
    for other in (coma, vda2c):
        assert all(torch.equal(a, b) for a, b in zip(other.team_flags(mask, mask), vdppo.team_flags(mask, mask)))


@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_vda2c_step_is_vdppos_first_step(tmp_path, mixer):
    """With one epoch, one minibatch and no value clipping, PPO's first step on a rollout is the A2C step
    (the ratio is 1, and its gradient is that of log pi): same seed, same settings, same losses."""
    common = dict(mixer=mixer, learning_rate=1e-3, value_norm=True, total_timesteps=30)
    a2c = vda2c.main(tiny("vda2c", tmp_path, **common))["final_losses"]
    ppo = vdppo.main(tiny("vdppo", tmp_path, update_epochs=1, num_minibatches=1, clip_vloss=False, **common))
    ppo = ppo["final_losses"]
    for key in ("value_loss", "entropy", "grad_norm", "explained_variance"):
        assert a2c[key] == pytest.approx(ppo[key], rel=1e-4, abs=1e-6), key


# ----------------------------------------------------------------------------- smoke runs
def check_summary(summary, name, args):
    assert summary["algo"] == name and summary["env"] == args.env and summary["seed"] == args.seed
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert summary["eval_episodes"] == args.eval_episodes and math.isfinite(summary["eval_return_mean"])
    assert set(summary["final_losses"]) == LOSS_KEYS[name]
    assert all(math.isfinite(v) for v in summary["final_losses"].values()), summary["final_losses"]
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    for file in ("checkpoint.pt", "args.json"):
        assert os.path.isfile(os.path.join(summary["run_dir"], file))


SMOKE = [
    ("coma", "torch:simple_spread", (), dict()),
    ("coma", "simple_reference", (), dict(recurrent="gru", share_params="none", critic_minibatches=3, norm_adv=True)),
    ("coma", "torch:simple_spread", (), dict(recurrent="lstm", value_norm=False, tau=1.0, target_update_interval=2)),
    ("vda2c", "torch:simple_spread", (), dict(mixer="qmix")),
    ("vda2c", "simple_reference", (), dict(recurrent="gru", share_params="none")),
    ("vda2c", "simple_spread", CONTINUOUS, dict(mixer="qmix", recurrent="lstm", value_norm=False)),
    ("vdppo", "torch:simple_spread", (), dict(mixer="qmix", num_minibatches=2)),
    ("vdppo", "simple_reference", (), dict(recurrent="lstm", num_steps=6, chunk_len=3, total_timesteps=24,
                                           num_minibatches=2, share_params="none")),
    ("vdppo", "simple_spread", CONTINUOUS, dict(mixer="qmix", recurrent="gru", num_steps=6, chunk_len=3,
                                                total_timesteps=24, clip_vloss=False)),
]


@pytest.mark.parametrize("name,env,env_kwargs,extra", SMOKE,
                         ids=[f"{n}-{e}-{'cont' if k else 'disc'}-{'-'.join(f'{a}={b}' for a, b in x.items())}"
                              for n, e, k, x in SMOKE])
def test_smoke(tmp_path, name, env, env_kwargs, extra):
    args = tiny(name, tmp_path, env=env, env_kwargs=env_kwargs, **extra)
    check_summary(ALGOS[name].main(args), name, args)


@pytest.mark.parametrize("name", ALGOS)
def test_cli(tmp_path, name):
    """One real command-line call per algorithm."""
    out = subprocess.run([sys.executable, f"algos/{name}.py", "--env", "torch:simple_spread", "--num-envs", "2",
                          "--num-steps", "5", "--total-timesteps", "10", "--eval-episodes", "1", "--eval-num-envs",
                          "1", "--hidden-sizes", "8", "--no-cuda", "--run-dir", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "eval_return" in out.stdout


def test_coma_rejects_continuous_actions(tmp_path):
    args = tiny("coma", tmp_path, env="simple_spread", env_kwargs=CONTINUOUS)
    with pytest.raises(ConfigError, match=r"discrete actions.*mappo.*ippo.*vdppo.*vda2c"):
        coma.main(args)
    assert not os.path.exists(args.run_dir)  # failed before any run folder was made


def test_bad_options_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="tau"):
        coma.main(tiny("coma", tmp_path, tau=0.0))
    with pytest.raises(ConfigError, match="critic-minibatches"):
        coma.main(tiny("coma", tmp_path, critic_minibatches=11))
    with pytest.raises(ConfigError, match="chunk-len"):
        vdppo.main(tiny("vdppo", tmp_path, recurrent="gru", chunk_len=3))
    with pytest.raises(ConfigError, match="gae-lambda"):
        vda2c.main(tiny("vda2c", tmp_path, gae_lambda=1.5))


# ----------------------------------------------------------------------------- determinism, resume, evaluation
@pytest.mark.parametrize("name", ALGOS)
def test_same_seed_same_losses(tmp_path, name):
    runs = [ALGOS[name].main(tiny(name, tmp_path, seed=seed, run_dir=str(tmp_path / f"run{i}")))
            for i, seed in enumerate((3, 3, 4))]
    assert runs[0]["final_losses"] == runs[1]["final_losses"]
    assert runs[0]["eval_return_mean"] == runs[1]["eval_return_mean"]
    assert runs[0]["final_losses"] != runs[2]["final_losses"]


@pytest.mark.parametrize("name", ALGOS)
def test_resume_and_evaluate_checkpoint(tmp_path, name):
    module, per_iteration = ALGOS[name], 2 * 5
    first = module.main(tiny(name, tmp_path, total_timesteps=2 * per_iteration, checkpoint_every=per_iteration))
    run_path = first["run_dir"]
    resumed = module.main(tiny(name, tmp_path, total_timesteps=4 * per_iteration, resume=run_path))
    assert resumed["global_step"] == 4 * per_iteration and resumed["run_dir"] == run_path
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == name and ckpt["global_step"] == 4 * per_iteration and ckpt["iteration"] == 4
    # the optimisers went on from the saved ones: 4 iterations of their gradient steps
    if name == "coma":
        assert ckpt["actor_optimizer"]["state"][0]["step"].item() == 4
        assert ckpt["critic_optimizer"]["state"][0]["step"].item() == 4 * 2 and ckpt["critic_updates"] == 8
    else:
        assert ckpt["optimizer"]["state"][0]["step"].item() == 4 * (2 if name == "vdppo" else 1)

    result = module.main(tiny(name, tmp_path, evaluate_checkpoint=run_path))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])
    other = "vdppo" if name != "vdppo" else "coma"
    with pytest.raises(ConfigError, match=name):
        ALGOS[other].main(tiny(other, tmp_path, total_timesteps=4 * per_iteration, resume=run_path))
    with pytest.raises(ConfigError, match=f"algos/{name}.py"):
        ALGOS[other].main(tiny(other, tmp_path, evaluate_checkpoint=run_path))



def test_coma_critic_check_runs_on_a_checkpoint(tmp_path):
    """benchmarks/coma_critic_check.py: Monte Carlo copies of torch: worlds against the critic's Q over own actions."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    import coma_critic_check
    summary = coma.main(tiny("coma", tmp_path))
    r = coma_critic_check.check(summary["run_dir"], states=4, copies=3, t0=2, agent=1, seed=0)
    assert -1.0 <= r["correlation"] <= 1.0 and r["chance"] == pytest.approx(0.2)
    assert r["mc_standard_error"] > 0 and r["mc_spread"] > 0  # the forced own actions change the return
    assert -80.0 < r["mc_mean"] < 0.0  # discounted team reward of 23 steps plus the critic's bootstrap
    other = mappo.main(make_args(mappo.Args, num_envs=2, num_steps=5, total_timesteps=10, eval_episodes=1,
                                 eval_num_envs=1, hidden_sizes=(8,), cuda=False, run_dir=str(tmp_path / "m"),
                                 env="torch:simple_spread"))
    with pytest.raises(SystemExit, match="COMA runs"):
        coma_critic_check.check(other["run_dir"], states=2, copies=1, t0=1, agent=0, seed=0)
