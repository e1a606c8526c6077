"""IPG, IA2C and MAA2C: returns-to-go and n-step targets worked by hand (termination vs
truncation), the copied pure functions against one reference (`algos/mappo.py`, itself checked
by hand in tests/test_gae.py), smoke runs on two envs with discrete and continuous actions,
A2C against PPO with one epoch, determinism, checkpoint / resume / evaluation, and the option
combinations that must be refused. Learning checks live in benchmarks/."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from algos import ia2c, ipg, maa2c, mappo, ippo
from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, field_names, make_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = {"ipg": ipg, "ia2c": ia2c, "maa2c": maa2c}
A2C = [ia2c, maa2c]
SUMMARY_KEYS = {"algo", "env", "seed", "status", "global_step", "wall_time_s", "sps", "eval_return_mean",
                "eval_return_std", "eval_episodes", "eval_policy", "eval_history", "run_dir", "final_losses",
                "eval_group_returns"}
LOSS_KEYS = {"policy_loss", "value_loss", "entropy", "grad_norm", "explained_variance"}
GAMMA = 0.9

# 2 iterations of 2 envs x 5 steps; episodes of 5 steps, so every IPG rollout is one whole episode.
SMALL = dict(env="torch:simple_spread", env_kwargs=("max_cycles=5",), num_envs=2, num_steps=5, total_timesteps=20,
             eval_episodes=2, eval_num_envs=1, hidden_sizes=(16,), cuda=False)
CONTINUOUS = dict(env="simple_spread", env_kwargs=("max_cycles=5", "continuous_actions=true"))  # PettingZoo mpe2


@pytest.fixture
def small(tmp_path):
    """small(module, **overrides) -> module.Args with tiny CPU settings and a run_dir under tmp_path."""

    def build(module, **overrides):
        return make_args(module.Args, **{**SMALL, "run_dir": str(tmp_path / "runs"), **overrides})

    return build


def column(*values):
    """(T,) values -> (T, 1, 1): one env copy, one agent."""
    return torch.tensor(values, dtype=torch.float64)[:, None, None]


def columns(*cols):
    """Each argument a (T,) list for one env copy -> (T, E, 1)."""
    return torch.tensor(cols, dtype=torch.float64).T[:, :, None]


# ----------------------------------------------------------------------------- IPG: returns-to-go by hand
def test_returns_to_go_worked_by_hand():
    """T=3, four env copies (one agent), rewards 1, 2, 3, gamma 0.9.
    copy 0: terminated at t=1, the next episode hits its time limit at t=2;
    copy 1: time limit at t=1, the next episode terminates at t=2 (same returns as copy 0: a
            Monte Carlo return stops at a time limit exactly as at a termination);
    copy 2: the rollout cuts the episode after t=2 and V(o_T) = 10 continues it (--bootstrap-cut);
    copy 3: the same cut with nothing to continue it (last value 0)."""
    rewards = columns([1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3])
    terminated = columns([0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0])
    truncated = columns([0, 0, 1], [0, 1, 0], [0, 0, 0], [0, 0, 0])
    last = torch.tensor([[100.0], [100.0], [10.0], [0.0]], dtype=torch.float64)  # (E, N); 100s must not be used
    # By hand: copies 0, 1: G_2 = 3, G_1 = 2, G_0 = 1 + 0.9 * 2 = 2.8
    #          copy 2: G_2 = 3 + 0.9 * 10 = 12, G_1 = 2 + 0.9 * 12 = 12.8, G_0 = 1 + 0.9 * 12.8 = 12.52
    #          copy 3: G_2 = 3, G_1 = 2 + 0.9 * 3 = 4.7, G_0 = 1 + 0.9 * 4.7 = 5.23
    expected = columns([2.8, 2, 3], [2.8, 2, 3], [12.52, 12.8, 12], [5.23, 4.7, 3])
    torch.testing.assert_close(ipg.returns_to_go(rewards, terminated, truncated, last, GAMMA), expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_returns_to_go_is_gae_with_lambda_one_and_no_time_limit_bootstrap(seed):
    """Against the reference: GAE with lambda = 1, next_values[t] = values[t + 1] inside the
    rollout and V(o_T) at its end, every episode end treated as a termination. The values cancel,
    whatever they are."""
    g = torch.Generator().manual_seed(seed)
    T, E, N = 8, 3, 2
    rewards, values = torch.randn(T, E, N, generator=g), torch.randn(T, E, N, generator=g)
    last = torch.randn(E, N, generator=g)
    terminated = (torch.rand(T, E, N, generator=g) < 0.2).float()
    truncated = (torch.rand(T, E, N, generator=g) < 0.2).float()
    next_values = torch.cat([values[1:], last[None]])
    _, reference = mappo.compute_gae(rewards, values, next_values, torch.maximum(terminated, truncated),
                                     torch.zeros_like(truncated), 0.97, 1.0)
    torch.testing.assert_close(ipg.returns_to_go(rewards, terminated, truncated, last, 0.97), reference)


def test_masked_mean_copies_agree():
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(4, 3, 2, generator=g), (torch.rand(4, 3, 2, generator=g) < 0.5).float()
    for module in (ipg, ia2c, maa2c):
        assert torch.equal(module.masked_mean(x, mask), mappo.masked_mean(x, mask))
        assert module.masked_mean(x, torch.zeros_like(x)).item() == 0.0


# ----------------------------------------------------------------------------- A2C: n-step targets by hand
@pytest.mark.parametrize("algo", A2C, ids=lambda m: m.__name__)
def test_n_step_targets_worked_by_hand(algo):
    """gae_lambda = 1 gives A3C's n-step returns. T=3, rewards 1, 2, 3, V(s_t) = 0.5, 1.0, 1.5,
    V(s_3) = 2.0 at the rollout's end, gamma 0.9.
    copy 0: terminated at t=1 (no bootstrap); t=2 starts an episode that the rollout cuts;
    copy 1: truncated at t=1, V(final obs) = 4.0 (bootstrap: the task was cut, not over);
    copy 2: no episode end: n = 3, 2, 1 steps to the rollout's end."""
    rewards = columns([1, 2, 3], [1, 2, 3], [1, 2, 3])
    values = columns([0.5, 1.0, 1.5], [0.5, 1.0, 1.5], [0.5, 1.0, 1.5])
    # next_values[t] = V(s_{t+1}); 99 at copy 0's termination must be ignored
    next_values = columns([1.0, 99.0, 2.0], [1.0, 4.0, 2.0], [1.0, 1.5, 2.0])
    terminated = columns([0, 1, 0], [0, 0, 0], [0, 0, 0])
    truncated = columns([0, 0, 0], [0, 1, 0], [0, 0, 0])
    # By hand: t=2 everywhere: 3 + 0.9 * 2.0 = 4.8
    #   copy 0: R_1 = 2,                 R_0 = 1 + 0.9 * 2 = 2.8
    #   copy 1: R_1 = 2 + 0.9 * 4 = 5.6, R_0 = 1 + 0.9 * 5.6 = 6.04
    #   copy 2: R_1 = 2 + 0.9 * 4.8 = 6.32, R_0 = 1 + 0.9 * 6.32 = 6.688 (= 1 + .9 * 2 + .81 * 3 + .729 * 2)
    expected = columns([2.8, 2, 4.8], [6.04, 5.6, 4.8], [6.688, 6.32, 4.8])
    advantages, returns = algo.compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, 1.0)
    torch.testing.assert_close(returns, expected)
    torch.testing.assert_close(advantages, expected - values)


@pytest.mark.parametrize("algo", A2C, ids=lambda m: m.__name__)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lam", [0.95, 1.0])
def test_gae_copies_agree_with_the_reference(algo, seed, lam):
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(7, 3, 2, generator=g) for _ in range(3)]
    flags = [(torch.rand(7, 3, 2, generator=g) < 0.25).float() for _ in range(2)]
    a = algo.compute_gae(*tensors, *flags, 0.99, lam)
    b = mappo.compute_gae(*tensors, *flags, 0.99, lam)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_maa2c_critic_inputs_copy_agrees():
    obs, state = torch.randn(4, 3, 5), torch.randn(4, 15)
    for kind in ("state", "concat_obs"):
        # mappo's (E, 1, D) is one input for every agent (stored once per env copy; nets.Critic broadcasts it)
        once = mappo.critic_inputs(obs, state, kind).expand(4, 3, -1)
        assert torch.equal(maa2c.critic_inputs(obs, state, kind), once)
    assert torch.equal(ia2c.local_critic_inputs(obs, state), ippo.local_critic_inputs(obs, state))


# ----------------------------------------------------------------------------- smoke runs
def check_summary(summary, algo, args, loss_keys=LOSS_KEYS):
    assert set(summary) == SUMMARY_KEYS
    assert summary["algo"] == algo and summary["env"] == args.env and summary["seed"] == args.seed
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert summary["eval_episodes"] == args.eval_episodes
    assert math.isfinite(summary["eval_return_mean"])
    assert set(summary["final_losses"]) == loss_keys
    for key, value in summary["final_losses"].items():
        assert math.isfinite(value), (key, value)
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    for name in ("checkpoint.pt", "args.json"):
        assert os.path.isfile(os.path.join(summary["run_dir"], name))


# (algo, env settings, share_params, recurrent): both envs, both action kinds, every core, per algorithm
SMOKE = [(name, env, share, rec) for name, runs in {
    "ipg": [({}, "all", "none"), (CONTINUOUS, "none", "gru"), ({}, "none", "lstm")],
    "ia2c": [({}, "all", "lstm"), (CONTINUOUS, "none", "none"), (CONTINUOUS, "all", "gru")],
    "maa2c": [({}, "all", "none"), (CONTINUOUS, "all", "lstm"), ({}, "none", "gru")],
}.items() for env, share, rec in runs]


@pytest.mark.parametrize("algo,env,share_params,recurrent", SMOKE,
                         ids=[f"{a}-{'cont' if e else 'disc'}-{s}-{r}"
                              for a, e, s, r in SMOKE])
def test_smoke(small, algo, env, share_params, recurrent):
    args = small(ALGOS[algo], share_params=share_params, recurrent=recurrent, **env)
    check_summary(ALGOS[algo].main(args), algo, args)


@pytest.mark.parametrize("algo", ALGOS)
def test_heterogeneous_agents(small, algo):
    """Speaker and listener: different observation sizes and action counts (padding, masks)."""
    args = small(ALGOS[algo], env="simple_speaker_listener")
    check_summary(ALGOS[algo].main(args), algo, args)


def test_maa2c_concat_obs_critic(small):
    args = small(maa2c, critic_input="concat_obs")
    summary = maa2c.main(args)
    check_summary(summary, "maa2c", args)
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    first = next(k for k in ckpt["critic"] if k.endswith("weight"))
    assert ckpt["critic"][first].shape[-1] == 3 * 18 + 3  # N * obs_dim + the agent one-hot


def test_ipg_without_baseline(small):
    args = small(ipg, baseline=False, value_norm=False, norm_adv=False)
    summary = ipg.main(args)
    check_summary(summary, "ipg", args, loss_keys={"policy_loss", "entropy", "grad_norm"})
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    assert ckpt["critic"] == {}


def test_ipg_baseline_sees_the_time_feature(small):
    summary = ipg.main(small(ipg, share_params="none"))
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    first = next(k for k in ckpt["critic"] if k.endswith("weight"))
    assert ckpt["critic"][first].shape[-2] == 18 + 1  # (N, in, out): own observation + elapsed fraction
    summary = ipg.main(small(ipg, share_params="none", time_feature=False))
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    assert ckpt["critic"][first].shape[-2] == 18


@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_ipg_bootstrap_cut(small, monkeypatch, recurrent):
    """Rollouts of 3 steps cut episodes of 5; --bootstrap-cut finishes them with V(o_T). With a
    zero learning rate the policy never changes, so replaying all rollouts as one sequence from
    the initial state must rebuild the log-probs the rollouts stored: the episode starts and
    the recurrent state carried across rollouts line up."""
    batches, batch = [], MultiAgentRolloutBuffer.batch

    def batch_and_keep(self, device=None, keys=None):
        batches.append(batch(self, device, keys))
        return batches[-1]

    monkeypatch.setattr(MultiAgentRolloutBuffer, "batch", batch_and_keep)
    built = {}
    build = ipg.build_networks
    monkeypatch.setattr(ipg, "build_networks", lambda *a: built.setdefault("nets", build(*a)))
    args = small(ipg, num_steps=3, total_timesteps=24, bootstrap_cut=True, recurrent=recurrent, learning_rate=0.0)
    check_summary(ipg.main(args), "ipg", args)
    full = {k: torch.cat([b[k] for b in batches]) for k in ("obs", "episode_starts", "actions", "log_probs")}
    assert full["episode_starts"][:, 0, 0].tolist() == [1, 0, 0, 0, 0] * 2 + [1, 0]  # episodes of 5, rollouts of 3
    actor = built["nets"][0]
    with torch.no_grad():
        dist, _ = actor(full["obs"], actor.initial_state(2), full["episode_starts"])
    torch.testing.assert_close(dist.log_prob(full["actions"]), full["log_probs"])


# ----------------------------------------------------------------------------- A2C is PPO's first step
@pytest.mark.parametrize("a2c,ppo", [(maa2c, mappo), (ia2c, ippo)], ids=["maa2c-mappo", "ia2c-ippo"])
@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_a2c_equals_ppo_with_one_epoch_and_one_minibatch(small, a2c, ppo, recurrent):
    """On its first gradient step PPO's ratio is 1 and no clip is active, so PPO with one epoch,
    one minibatch and chunks as long as the rollout takes A2C's step exactly (the same gradients,
    hence grad_norm; policy_loss differs only by a constant). Episodes of 3 steps end inside
    the 5-step rollouts, so truncation bootstrapping and recurrent resets are compared too."""
    a2c_args = small(a2c, env_kwargs=("max_cycles=3",), recurrent=recurrent, learning_rate=0.01, total_timesteps=30)
    shared = {f: getattr(a2c_args, f) for f in field_names(a2c.Args) if f in field_names(ppo.Args)}  # gamma, ...
    a = a2c.main(a2c_args)
    p = ppo.main(small(ppo, **shared, update_epochs=1, num_minibatches=1, chunk_len=5))
    for key in ("value_loss", "entropy", "grad_norm", "explained_variance"):
        assert a["final_losses"][key] == pytest.approx(p["final_losses"][key], rel=1e-4, abs=1e-6), key
    assert a["eval_return_mean"] == pytest.approx(p["eval_return_mean"], rel=1e-5)


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_losses(small, tmp_path, algo):
    module = ALGOS[algo]
    runs = [module.main(small(module, seed=seed, run_dir=str(tmp_path / f"run{i}")))
            for i, seed in enumerate((3, 3, 4))]
    assert runs[0]["final_losses"] == runs[1]["final_losses"]
    assert runs[0]["eval_return_mean"] == runs[1]["eval_return_mean"]
    assert runs[0]["final_losses"] != runs[2]["final_losses"]


# ----------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("algo", ALGOS)
def test_checkpoint_resume_and_evaluate(small, algo):
    module, per_iteration = ALGOS[algo], 2 * 5
    first = module.main(small(module, total_timesteps=2 * per_iteration, checkpoint_every=per_iteration))
    run_path = first["run_dir"]
    resumed = module.main(small(module, total_timesteps=4 * per_iteration, resume=run_path))
    assert resumed["global_step"] == 4 * per_iteration and resumed["run_dir"] == run_path
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == algo and ckpt["global_step"] == 4 * per_iteration and ckpt["iteration"] == 4
    # the optimizer went on from the saved one, with exactly one gradient step per rollout
    assert ckpt["optimizer"]["state"][0]["step"].item() == 4
    assert all(math.isfinite(v) for v in resumed["final_losses"].values())

    result = module.main(small(module, evaluate_checkpoint=run_path, eval_episodes=3))
    assert result["eval_episodes"] == 3 and math.isfinite(result["eval_return_mean"])
    other = ia2c if module is not ia2c else maa2c
    with pytest.raises(ConfigError, match=f"algos/{algo}.py"):
        other.main(small(other, evaluate_checkpoint=run_path))
    with pytest.raises(ConfigError, match=algo):
        other.main(small(other, total_timesteps=6 * per_iteration, resume=run_path))


# ----------------------------------------------------------------------------- refused options
def test_unsupported_options_fail_with_a_clear_config_error(small):
    with pytest.raises(ConfigError, match="--bootstrap-cut .* needs --baseline"):
        ipg.main(small(ipg, bootstrap_cut=True, baseline=False))
    # a rollout of 3 steps cuts episodes of 5: Monte Carlo returns cannot be finished
    with pytest.raises(ConfigError, match="multiple of the episode length"):
        ipg.main(small(ipg, num_steps=3))
    for module in A2C:
        with pytest.raises(ConfigError, match="--gae-lambda"):
            module.main(small(module, gae_lambda=1.5))
    for module in ALGOS.values():
        with pytest.raises(ConfigError, match="--num-envs"):
            module.main(small(module, num_envs=0))
        with pytest.raises(ConfigError, match="--render-gif needs --evaluate-checkpoint"):
            module.main(small(module, render_gif="x.gif"))
        with pytest.raises(ConfigError, match="unknown argument"):
            small(module, update_epochs=2)  # A2C and REINFORCE take one gradient step per rollout


# ----------------------------------------------------------------------------- the command line
def test_command_line(tmp_path):
    """One real CLI call per algorithm, run side by side."""
    procs = {name: subprocess.Popen(
        [sys.executable, f"algos/{name}.py", "--env", "torch:simple_spread", "--env-kwargs", "max_cycles=5",
         "--num-envs", "2", "--num-steps", "5", "--total-timesteps", "10", "--eval-episodes", "1",
         "--eval-num-envs", "1", "--hidden-sizes", "16", "--no-cuda", "--run-dir", str(tmp_path / name)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in ALGOS}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        (run,) = os.listdir(tmp_path / name)
        with open(tmp_path / name / run / "summary.json") as f:
            assert json.load(f)["algo"] == name
