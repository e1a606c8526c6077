"""MAPPO and IPPO in depth, the two files the others were copied from: smoke runs over every
axis (actions, parameter sharing, recurrence; in-process, two iterations), determinism, checkpoint /
resume / evaluation, next values at episode ends, learning-rate schedules. Every file's smoke run
(with groups, fixed and loaded) is in test_policy_mapping.py, its bad input in test_fail_well.py;
learning checks live in benchmarks/."""
import json
import math
import os

import pytest
import torch

from algos import ippo, mappo
from common.cli import ConfigError, make_args, parse_args

ALGOS = {"mappo": mappo, "ippo": ippo}
SUMMARY_KEYS = {"algo", "env", "seed", "global_step", "wall_time_s", "sps", "eval_return_mean", "eval_episodes"}
LOSS_KEYS = {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "explained_variance"}
CONTINUOUS = ("continuous_actions=true",)

# (algo, env_kwargs, share_params, recurrent): every value of every axis at least once per algorithm
SMOKE = [
    ("mappo", (), "all", "none"),
    ("mappo", (), "none", "gru"),
    ("mappo", CONTINUOUS, "all", "lstm"),
    ("mappo", CONTINUOUS, "none", "none"),
    ("ippo", (), "all", "lstm"),
    ("ippo", (), "none", "none"),
    ("ippo", CONTINUOUS, "all", "gru"),
    ("ippo", CONTINUOUS, "none", "lstm"),
]


def recurrent_settings(recurrent):
    # 2 iterations of 2 envs x 6 steps, trained as chunks of 3 steps in 2 minibatches
    return dict(num_steps=6, chunk_len=3, total_timesteps=24, num_minibatches=2) if recurrent != "none" else {}


def check_summary(summary, algo, args):
    assert SUMMARY_KEYS <= set(summary)
    assert summary["algo"] == algo and summary["env"] == args.env and summary["seed"] == args.seed
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert summary["eval_episodes"] == args.eval_episodes
    assert math.isfinite(summary["eval_return_mean"])
    assert summary["wall_time_s"] > 0 and summary["sps"] > 0
    losses = summary["final_losses"]
    assert set(losses) == LOSS_KEYS
    for key, value in losses.items():
        assert math.isfinite(value), (key, value)
    run_path = summary["run_dir"]
    assert os.path.commonpath([run_path, args.run_dir]) == args.run_dir
    with open(os.path.join(run_path, "summary.json")) as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(summary))  # same content (tuples become lists)
    assert os.path.isfile(os.path.join(run_path, "checkpoint.pt"))
    assert os.path.isfile(os.path.join(run_path, "args.json"))
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(run_path))


@pytest.mark.parametrize("algo,env_kwargs,share_params,recurrent", SMOKE,
                         ids=[f"{a}-{'cont' if k else 'disc'}-{s}-{r}"
                              for a, k, s, r in SMOKE])
def test_smoke(tiny, algo, env_kwargs, share_params, recurrent):
    args = tiny(ALGOS[algo], env_kwargs=env_kwargs, share_params=share_params, recurrent=recurrent,
                **recurrent_settings(recurrent))
    summary = ALGOS[algo].main(args)
    check_summary(summary, algo, args)


def test_mappo_concat_obs_critic(tiny):
    args = tiny(mappo, critic_input="concat_obs")
    summary = mappo.main(args)
    check_summary(summary, "mappo", args)
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    first = next(k for k in ckpt["critic"] if k.endswith("weight"))
    # shared critic: N * obs_dim inputs + the N-agent one-hot (3 * 18 + 3)
    assert ckpt["critic"][first].shape[-1] == 3 * 18 + 3


@pytest.mark.parametrize("algo", ALGOS)
def test_heterogeneous_agents(tiny, algo):
    args = tiny(ALGOS[algo], env="simple_speaker_listener")
    check_summary(ALGOS[algo].main(args), algo, args)


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_losses(tiny, tmp_path, algo):
    module = ALGOS[algo]
    runs = [module.main(tiny(module, seed=seed, run_dir=str(tmp_path / f"run{i}")))
            for i, seed in enumerate((3, 3, 4))]
    assert runs[0]["final_losses"] == runs[1]["final_losses"]
    assert runs[0]["eval_return_mean"] == runs[1]["eval_return_mean"]
    assert runs[0]["final_losses"] != runs[2]["final_losses"]


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoint_resume_and_evaluate(tiny):
    per_iteration = 2 * 5
    first = mappo.main(tiny(mappo, total_timesteps=2 * per_iteration, checkpoint_every=per_iteration))
    run_path = first["run_dir"]
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == "mappo" and ckpt["global_step"] == 2 * per_iteration and ckpt["iteration"] == 2
    assert 0 < ckpt["train_time_s"] <= ckpt["wall_time_s"]
    ckpt.update(wall_time_s=1000.0, train_time_s=900.0)  # as if the first process had trained for 15 minutes
    torch.save(ckpt, os.path.join(run_path, "checkpoint.pt"))

    resumed = mappo.main(tiny(mappo, total_timesteps=4 * per_iteration, resume=run_path))
    assert resumed["global_step"] == 4 * per_iteration
    # the summary's time and speed are the whole run's, the process before the resume included
    assert resumed["wall_time_s"] > 1000 and resumed["sps"] < 4 * per_iteration / 900
    assert resumed["run_dir"] == run_path  # continues in the same folder
    with open(os.path.join(run_path, "summary.json")) as f:
        assert json.load(f)["global_step"] == 4 * per_iteration
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["global_step"] == 4 * per_iteration and ckpt["iteration"] == 4
    # the optimizer went on from the saved one: 4 iterations x 2 epochs x num_minibatches Adam steps
    assert ckpt["optimizer"]["state"][0]["step"].item() == 4 * 2 * mappo.Args.num_minibatches
    assert all(math.isfinite(v) for v in resumed["final_losses"].values())

    result = mappo.main(tiny(mappo, evaluate_checkpoint=run_path))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])
    # a checkpoint file path works as well as the folder
    result = mappo.main(tiny(mappo, evaluate_checkpoint=os.path.join(run_path, "checkpoint.pt"), eval_episodes=1))
    assert result["eval_episodes"] == 1

    with pytest.raises(ConfigError, match="mappo"):
        ippo.main(tiny(ippo, total_timesteps=4 * per_iteration, resume=run_path))
    with pytest.raises(ConfigError, match="algos/mappo.py"):
        ippo.main(tiny(ippo, evaluate_checkpoint=run_path))


def test_runs_started_together_get_their_own_folders(tiny):
    """Two runs with the same name in the same second must not write over each other."""
    first = mappo.main(tiny(mappo))
    second = mappo.main(tiny(mappo))
    assert first["run_dir"] != second["run_dir"]
    for summary in (first, second):
        with open(os.path.join(summary["run_dir"], "summary.json")) as f:
            assert json.load(f)["run_dir"] == summary["run_dir"]


# ----------------------------------------------------------------------------- update sees the rollout's policy
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("recurrent", ["none", "gru", "lstm"])
def test_first_update_step_reproduces_rollout_log_probs(tiny, algo, recurrent):
    """With one epoch and one minibatch, the reported approx_kl is measured before the only
    optimizer step of the last iteration, so the policy is the one that acted: the update must
    rebuild exactly the rollout's log-probs. For recurrent models this checks the chunk layout,
    the stored initial hidden states and the episode-start resets (episodes of 4 steps end
    inside the 6-step rollouts). A wrong chunk order gives approx_kl around 1e-4 here."""
    args = tiny(ALGOS[algo], recurrent=recurrent, num_steps=6, chunk_len=3, total_timesteps=36, update_epochs=1,
                num_minibatches=1, env_kwargs=("max_cycles=4",), learning_rate=0.05, anneal_lr=False)
    losses = ALGOS[algo].main(args)["final_losses"]
    assert losses["approx_kl"] < 1e-8
    assert losses["clipfrac"] == 0.0


@pytest.mark.parametrize("algo", ALGOS)
def test_optional_features_off(tiny, algo):
    args = tiny(ALGOS[algo], value_norm=False, clip_vloss=False, anneal_lr=False, activation="relu",
                num_minibatches=2, eval_every=10)
    summary = ALGOS[algo].main(args)
    check_summary(summary, algo, args)
    assert [step for step, _ in summary["eval_history"]] == [10, 20]  # periodic evaluation every 10 env steps


@pytest.mark.parametrize("algo", [mappo, ippo], ids=["mappo", "ippo"])
def test_next_values_are_the_values_of_the_true_next_states(tiny, monkeypatch, algo):
    """GAE's next_values[t] must be V(s_{t+1}) of the step's true next state: the next step's value
    while the episode goes on, the final observation's value where it ended (episodes of 3 steps
    end inside rollouts of 5, so both cases and the rollout's last step occur)."""
    from buffers import MultiAgentRolloutBuffer

    captured, checked = {}, []
    build, gae, batch = algo.build_networks, algo.compute_gae, MultiAgentRolloutBuffer.batch

    def build_and_keep(args, env, device):
        actor, critic = build(args, env, device)
        captured["critic"] = critic
        return actor, critic

    def batch_and_keep(self, device=None, keys=None):
        captured["batch"] = batch(self, device, keys)
        return captured["batch"]

    def gae_and_check(rewards, values, next_values, terminated, truncated, gamma, lam):
        next_states = captured["batch"]["next_obs"]  # (T, E, N, obs_dim), final obs where episodes ended
        T, E, N, _ = next_states.shape
        if algo is ippo:
            inputs = next_states
        else:  # the concatenated observations of every agent, for every agent
            inputs = next_states.reshape(T, E, 1, -1).expand(T, E, N, -1)
        with torch.no_grad():
            expected, _ = captured["critic"](inputs)  # (T, E, N), feed-forward critic
        assert torch.allclose(next_values, expected, atol=1e-6)
        checked.append(True)
        return gae(rewards, values, next_values, terminated, truncated, gamma, lam)

    monkeypatch.setattr(algo, "build_networks", build_and_keep)
    monkeypatch.setattr(algo, "compute_gae", gae_and_check)
    monkeypatch.setattr(MultiAgentRolloutBuffer, "batch", batch_and_keep)
    extra = {} if algo is ippo else {"critic_input": "concat_obs"}
    algo.main(tiny(algo, env_kwargs=("max_cycles=3",), value_norm=False, **extra))
    assert len(checked) == 2


@pytest.mark.parametrize("algo", [mappo, ippo], ids=["mappo", "ippo"])
def test_learning_rate_schedules(algo):
    """Linear: lr (1 - (k - 1) / K) over the run. Inverse-time: lr / (1 + t / D), which does not
    depend on the run's length, so a 2M-step point of a 10M-step run equals a 2M-step run."""
    short = make_args(algo.Args, total_timesteps=2_000_000, lr_decay_steps=300_000)
    long = make_args(algo.Args, total_timesteps=10_000_000, lr_decay_steps=300_000)
    for step in (0, 300_000, 1_999_200):
        k = step // short.batch_size + 1
        assert algo.learning_rate_at(short, k, step) == algo.learning_rate_at(long, k, step)
        assert math.isclose(algo.learning_rate_at(short, k, step), short.learning_rate / (1 + step / 300_000))
    linear = make_args(algo.Args, num_envs=32, total_timesteps=8_000, lr_decay_steps=0)  # 800 steps an iteration
    assert linear.num_iterations == 10
    assert math.isclose(algo.learning_rate_at(linear, 1, 0), linear.learning_rate)
    assert math.isclose(algo.learning_rate_at(linear, 10, 7_200), linear.learning_rate / 10)
    assert mappo.learning_rate_at(long, 7, 4_800) == ippo.learning_rate_at(long, 7, 4_800)  # the copies agree
    with pytest.raises(ConfigError, match="lr-decay-steps"):
        algo.main(make_args(algo.Args, lr_decay_steps=-1))


def test_eval_policy_sampled_draws_from_the_policy_and_greedy_takes_its_mode(tiny):
    """A policy with uniform logits: greedy evaluation always takes action 0 (mpe2's no-op), so every
    agent stays where it started; sampled evaluation moves the agents, so the returns differ."""
    import envs
    from common.run_utils import evaluate

    class Dist:  # the interface of nets' distributions: mode() and sample()
        def __init__(self, shape):
            self.logits = torch.zeros(*shape, 5)

        def mode(self):
            return self.logits.argmax(-1)

        def sample(self):
            return torch.distributions.Categorical(logits=self.logits).sample()

    class Uniform:
        def initial_state(self, E, device):
            return None

        def __call__(self, obs, state, starts, mask):
            return Dist(obs.shape[:3]), state

    def returns(greedy):
        torch.manual_seed(0)
        env = envs.make_env("torch:simple_spread", 4, seed=7)
        return evaluate(env, Uniform(), 8, torch.device("cpu"), greedy=greedy)

    assert (returns(True) == returns(True)).all()
    assert not (returns(True) == returns(False)).all()
    summary = mappo.main(tiny(mappo, eval_policy="sampled"))
    assert summary["eval_policy"] == "sampled"
    with pytest.raises(SystemExit):  # the command line accepts only greedy and sampled
        parse_args(mappo.Args, ["--eval-policy", "best"])
