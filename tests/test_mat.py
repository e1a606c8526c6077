"""MAT and MAT-Dec (algos/mat.py, nets/transformer.py): the training pass (one decoder pass over the
shifted actions) gives the log-probabilities of acting one agent at a time, the causal masks keep an
agent's distribution from reading later agents' actions, MAT-Dec reads no other agent's action (nor
observation), the encoder is permutation-equivariant, given actions condition the later agents; smoke
runs (discrete and continuous, heterogeneous agents, the env's action masks, agents that die), determinism, exact resume, evaluation of a checkpoint, groups
loaded from runs, refused options and the command line. Learning checks live in benchmarks/."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import envs
from algos import mappo, mat
from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, make_args
from nets.transformer import MultiAgentTransformer
from tests.test_env_families_pz import LeavingAgent  # two agents, the second dies in step 2 of 4

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_KEYS = {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "explained_variance"}
# 2 iterations of 2 envs x 5 steps on 5-step episodes, a small transformer
SMALL = dict(env="torch:simple_spread", env_kwargs=("max_cycles=5",), num_envs=2, num_steps=5, total_timesteps=20,
             eval_episodes=2, eval_num_envs=1, n_embd=16, n_head=2, num_minibatches=2, update_epochs=2, cuda=False)
CONTINUOUS = ("max_cycles=5", "continuous_actions=true")
TAG = dict(env="torch:simple_tag", env_kwargs=("max_cycles=4", "continuous_actions=false"))  # 3 predators, 1 prey


@pytest.fixture
def small(tmp_path):
    """small(**overrides) -> mat.Args with tiny CPU settings and a run_dir under tmp_path."""
    return lambda **overrides: make_args(mat.Args, **{**SMALL, "run_dir": str(tmp_path / "runs"), **overrides})


# ----------------------------------------------------------------------------- the transformer by hand
def tiny_mat(discrete=True, decoder="mat", seed=0, N=4, A=5, dim_mask=None):
    """A small double-precision MAT whose weights are pushed away from the near-zero initial ones, so
    that every input visibly moves every output it may reach."""
    torch.manual_seed(seed)
    mask = torch.ones(N, A, dtype=torch.bool) if dim_mask is None else dim_mask
    net = MultiAgentTransformer(6, N, discrete, A, mask, n_block=2, n_embd=16, n_head=2, decoder=decoder).double()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return net


def tiny_obs(B=7, N=4, seed=1):
    return torch.randn(B, N, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_training_pass_gives_the_log_probs_of_acting_one_agent_at_a_time(discrete):
    """The shift is right: one parallel decoder pass over the stored actions gives every agent the
    distribution it was drawn from in the autoregressive rollout (sampled and greedy)."""
    dim_mask = torch.tensor([[True] * 5] * 3 + [[True, True, True, False, False]])  # agent 3 has fewer
    net, obs = tiny_mat(discrete, dim_mask=dim_mask), tiny_obs()
    legal = None
    if discrete:  # the env's own action masks: agent 0 may not pick action 0 in half the envs
        legal = dim_mask.expand(7, 4, 5).clone()
        legal[::2, 0, 0] = False
    with torch.no_grad():
        actions, log_probs, values = net.act(obs, legal)
        values_train, dist = net.evaluate(obs, actions, legal)
        assert torch.allclose(dist.log_prob(actions), log_probs, atol=1e-10)
        assert torch.equal(values_train, values)
        greedy, _, _ = net.act(obs, legal, greedy=True)
        assert torch.allclose(net.evaluate(obs, greedy, legal)[1].mode().double(), greedy.double(), atol=1e-10)
        # a wrong shift (no start token: each agent reads its own action) gives other log-probs
        wrong = net.decode(net.encode(obs)[1], obs, torch.cat([net.shift(actions)[:, 1:], net.shift(actions)[:, :1]], 1))
        assert not torch.allclose(net.distribution(wrong, legal).log_prob(actions), log_probs, atol=1e-3)
    if discrete:
        assert (actions[::2, 0] != 0).all() and (actions[:, 3] < 3).all()  # masked and padded actions never drawn


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_an_agent_reads_the_actions_of_earlier_agents_only(discrete):
    """Causal masks: changing agent j's action leaves agents 0..j's distributions exactly as they were
    and changes every later agent's."""
    net, obs = tiny_mat(discrete), tiny_obs()
    with torch.no_grad():
        actions, _, _ = net.act(obs)
        for j in range(4):
            other = actions.clone()
            if discrete:
                other[:, j] = (other[:, j] + 1) % 5
            else:
                other[:, j] += 0.7
            out, out_other = (net.decode(net.encode(obs)[1], obs, net.shift(a)) for a in (actions, other))
            assert torch.equal(out[:, :j + 1], out_other[:, :j + 1]), j
            if j < 3:
                assert (out[:, j + 1:] - out_other[:, j + 1:]).abs().amax((0, 2)).min() > 1e-4, j


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
def test_mat_dec_reads_no_other_agents_actions_or_observations(discrete):
    net, obs = tiny_mat(discrete, decoder="dec"), tiny_obs()
    with torch.no_grad():
        actions, log_probs, values = net.act(obs)
        other = net.act(obs)[0] if discrete else actions + 0.5  # other joint actions
        _, dist, = net.evaluate(obs, actions)
        _, dist_other = net.evaluate(obs, other)
        assert torch.allclose(dist.log_prob(actions), log_probs, atol=1e-12)
        assert torch.equal(dist.mode(), dist_other.mode())  # the same distribution whatever the others do
        moved = obs.clone()
        moved[:, 1:] = tiny_obs(seed=2)[:, 1:]  # every agent but agent 0 sees something else
        values_moved, dist_moved = net.evaluate(moved, actions)
        assert torch.equal(dist_moved.mode()[:, 0], dist.mode()[:, 0])  # agent 0 acts on its own observation
        assert not torch.allclose(values_moved[:, 0], values[:, 0])  # while its value reads everyone's
    assert not hasattr(net, "decoder")


def test_encoder_is_permutation_equivariant_and_the_decoder_order_matters():
    """Permuting the agents permutes the encoder's values (self-attention without a mask or positions)
    and MAT-Dec's action distributions; MAT's decoder is not equivariant: the order says who conditions
    on whom."""
    perm = torch.tensor([2, 0, 3, 1])
    obs = tiny_obs()
    dec, seq = tiny_mat(decoder="dec"), tiny_mat(decoder="mat")
    with torch.no_grad():
        for net in (dec, seq):
            values, rep = net.encode(obs)
            values_p, rep_p = net.encode(obs[:, perm])
            assert torch.allclose(values_p, values[:, perm], atol=1e-12)
            assert torch.allclose(rep_p, rep[:, perm], atol=1e-12)
        actions = seq.act(obs)[0]
        logits = dec.decode(None, obs, None)
        assert torch.allclose(dec.decode(None, obs[:, perm], None), logits[:, perm], atol=1e-12)
        out = seq.decode(seq.encode(obs)[1], obs, seq.shift(actions))
        out_p = seq.decode(seq.encode(obs[:, perm])[1], obs[:, perm], seq.shift(actions[:, perm]))
        assert not torch.allclose(out_p, out[:, perm], atol=1e-4)


@pytest.mark.parametrize("decoder", ["mat", "dec"])
def test_given_actions_are_kept_and_later_agents_condition_on_them(decoder):
    """What a group loaded from another run does in the rollout: its agents' actions are given, the
    others are decoded after them, and the training pass on the joint action reproduces their log-probs."""
    net, obs = tiny_mat(decoder=decoder), tiny_obs()
    given = torch.randint(0, 5, (7, 4), generator=torch.Generator().manual_seed(3))
    rows = [False, True, False, False]
    with torch.no_grad():
        actions, log_probs, _ = net.act(obs, given=(given, rows))
        assert torch.equal(actions[:, 1], given[:, 1])
        assert torch.allclose(net.evaluate(obs, actions)[1].log_prob(actions), log_probs, atol=1e-10)
        if decoder == "mat":  # agent 2 acts differently when agent 1's action is another one
            out = lambda g: net.decode(net.encode(obs)[1], obs, net.shift(g))[:, 2]  # noqa: E731
            other = actions.clone()
            other[:, 1] = (other[:, 1] + 1) % 5
            assert not torch.allclose(out(actions), out(other))


def test_continuous_padded_dimensions_stay_out():
    """An agent's padded action dimensions are neither fed to the next agent nor counted in its
    log-probability; the log-std starts at -0.5 in every dimension."""
    dim_mask = torch.tensor([[True, True, False], [True, True, True]])
    net = tiny_mat(False, N=2, A=3, dim_mask=dim_mask)
    assert torch.equal(MultiAgentTransformer(6, 2, False, 3, dim_mask).log_std.data, torch.full((3,), -0.5))
    with torch.no_grad():
        obs = tiny_obs(N=2)
        actions = net.act(obs)[0]
        moved = actions.clone()
        moved[:, 0, 2] += 3.0  # agent 0's padded dimension
        assert torch.equal(net.shift(actions), net.shift(moved))
        _, dist = net.evaluate(obs, actions)
        assert torch.equal(dist.log_prob(actions), dist.log_prob(moved))
        assert not torch.equal(dist.log_prob(actions), dist.log_prob(actions + 0.3))


# ----------------------------------------------------------------------------- runs
def check_summary(summary, args):
    assert summary["algo"] == "mat" and summary["env"] == args.env and summary["seed"] == args.seed
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert summary["eval_episodes"] == args.eval_episodes and math.isfinite(summary["eval_return_mean"])
    assert set(summary["final_losses"]) == LOSS_KEYS
    for key, value in summary["final_losses"].items():
        assert key == "explained_variance" or math.isfinite(value), (key, value)
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    for name in ("checkpoint.pt", "args.json"):
        assert os.path.isfile(os.path.join(summary["run_dir"], name))


@pytest.mark.parametrize("env,env_kwargs,decoder", [
    ("torch:simple_spread", ("max_cycles=5",), "mat"),
    ("torch:simple_spread", ("max_cycles=5",), "dec"),
    ("simple_spread", CONTINUOUS, "mat"),  # PettingZoo mpe2, continuous actions
    ("torch:simple_spread", CONTINUOUS, "dec"),
    ("simple_speaker_listener", ("max_cycles=5",), "mat"),  # obs 3 and 11, actions 3 and 5
], ids=["torch-disc-mat", "torch-disc-dec", "pz-cont-mat", "torch-cont-dec", "listener-mat"])
def test_smoke(small, env, env_kwargs, decoder):
    args = small(env=env, env_kwargs=env_kwargs, decoder=decoder)
    check_summary(mat.main(args), args)


def test_env_action_masks_are_obeyed(small, monkeypatch):
    pytest.importorskip("lbforaging")
    batches, batch = [], MultiAgentRolloutBuffer.batch
    monkeypatch.setattr(MultiAgentRolloutBuffer, "batch", lambda self, *a, **k: batches.append(batch(self, *a, **k))
                        or batches[-1])
    args = small(env="lbf:Foraging-8x8-2p-3f-v3", env_kwargs=("max_episode_steps=4",))
    check_summary(mat.main(args), args)
    b = batches[0]
    chosen = b["action_masks"].gather(-1, b["actions"][..., None].long())
    assert chosen.all() and not b["action_masks"].all()  # some actions were illegal, none was taken


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_dead_agents_stay_out_of_the_losses(small, monkeypatch, continuous):
    """Agent b dies in step 2 of 4: its steps after that are alive = 0 and carry no advantage."""
    seen = []
    original = mat.group_mean
    monkeypatch.setattr(mat, "make_env", lambda name, num_envs, seed, *a, **k:
                        envs.PettingZooVecEnv(lambda: LeavingAgent(continuous), num_envs, seed))
    monkeypatch.setattr(mat, "group_mean", lambda x, mask, onehot: seen.append(mask.clone()) or original(x, mask, onehot))
    args = small(env="simple_spread", env_kwargs=(), num_steps=4, total_timesteps=16)
    check_summary(mat.main(args), args)
    learn = seen[0]  # (T, E, N)
    assert learn[2:, :, 1].eq(0).all() and learn[:, :, 0].eq(1).all() and learn[:2, :, 1].eq(1).all()


def test_same_seed_same_losses(small, tmp_path):
    runs = [mat.main(small(seed=seed, run_dir=str(tmp_path / f"run{i}"))) for i, seed in enumerate((3, 3, 4))]
    assert runs[0]["final_losses"] == runs[1]["final_losses"]
    assert runs[0]["eval_return_mean"] == runs[1]["eval_return_mean"]
    assert runs[0]["final_losses"] != runs[2]["final_losses"]


def test_resume_goes_on_exactly_and_evaluate_checkpoint(small, tmp_path):
    """A run stopped after 2 of 4 iterations and resumed ends with the losses of the run never stopped
    (torch: env states, RNGs, Adam and the value statistics restored); its checkpoint evaluates."""
    per_iteration = 2 * 5
    common = dict(total_timesteps=4 * per_iteration, eval_every=2 * per_iteration, lr_decay_steps=100)
    whole = mat.main(small(**common, run_dir=str(tmp_path / "whole")))
    part = mat.main(small(**{**common, "total_timesteps": 2 * per_iteration}, run_dir=str(tmp_path / "part")))
    resumed = mat.main(small(**common, resume=part["run_dir"]))
    assert resumed["global_step"] == whole["global_step"] == 4 * per_iteration
    assert resumed["final_losses"] == whole["final_losses"]
    assert resumed["eval_return_mean"] == whole["eval_return_mean"]
    ckpt = torch.load(os.path.join(part["run_dir"], "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == "mat" and ckpt["iteration"] == 4
    assert ckpt["optimizer"]["state"][0]["step"].item() == 4 * 2 * 2  # iterations x epochs x minibatches
    result = mat.main(small(evaluate_checkpoint=part["run_dir"], eval_episodes=3))
    assert result["eval_episodes"] == 3 and math.isfinite(result["eval_return_mean"])
    with pytest.raises(ConfigError, match="algos/mat.py"):
        mappo.main(make_args(mappo.Args, evaluate_checkpoint=part["run_dir"], cuda=False))


def test_the_observation_layernorm_option_and_runs_saved_with_it(small, tmp_path):
    """Off (the default), the encoder sees an observation's scale: o and 3 o give different values; on
    (the authors'), a LayerNorm over the features makes them the same. A checkpoint with the LayerNorm
    whose saved args predate the option (a run from before it) still evaluates."""
    obs = tiny_obs()
    for layernorm in (False, True):
        torch.manual_seed(0)
        net = MultiAgentTransformer(6, 4, True, 5, torch.ones(4, 5, dtype=torch.bool), obs_layernorm=layernorm)
        net = net.double()
        same = torch.allclose(net.encode(obs)[0], net.encode(3 * obs)[0], atol=1e-6)
        assert same == layernorm
    run = mat.main(small(obs_layernorm=True))
    path = os.path.join(run["run_dir"], "checkpoint.pt")
    ckpt = torch.load(path, weights_only=True)
    assert "obs_embed.0.weight" in ckpt["transformer"]
    del ckpt["args"]["obs_layernorm"]  # as the runs written before the option
    torch.save(ckpt, path)
    result = mat.main(small(evaluate_checkpoint=run["run_dir"], eval_episodes=2))
    assert math.isfinite(result["eval_return_mean"])


# ----------------------------------------------------------------------------- groups
def test_groups_loaded_from_runs_act_as_them_and_stay_out_of_the_losses(small, tmp_path, monkeypatch):
    """On simple_tag the prey acts as a MAPPO run, then as a MAT run (which acts for all four agents;
    its prey's actions are taken): the predators learn, the prey's rows carry no advantage, and the
    checkpoint evaluates with the prey acting as that run again."""
    source = mappo.main(make_args(mappo.Args, **TAG, num_envs=2, num_steps=4, total_timesteps=8, eval_every=0,
                                  eval_episodes=1, eval_num_envs=1, hidden_sizes=(16,), share_params="group",
                                  cuda=False, run_dir=str(tmp_path / "mappo")))["run_dir"]
    seen = []
    original = mat.group_mean
    monkeypatch.setattr(mat, "group_mean", lambda x, mask, onehot: seen.append(mask.clone()) or original(x, mask, onehot))
    for share in ("all", "group"):
        summary = mat.main(small(**TAG, share_params=share, load_group=(f"agent={source}",),
                                 run_dir=str(tmp_path / share)))
        assert sorted(summary["eval_group_returns"]) == ["adversary", "agent"]
        assert seen[-1][..., 3].eq(0).all() and seen[-1][..., :3].eq(1).all()
        again = mat.main(small(**TAG, evaluate_checkpoint=summary["run_dir"]))
        assert again["eval_return_mean"] == pytest.approx(summary["eval_return_mean"])
    mat_source = summary["run_dir"]
    loaded = mat.main(small(**TAG, load_group=(f"agent={mat_source}",), run_dir=str(tmp_path / "from_mat")))
    assert math.isfinite(loaded["final_losses"]["policy_loss"])


def test_the_entropy_bonus_is_constant_or_goes_linearly_to_its_final_value(small):
    constant = small(ent_coef=0.04, total_timesteps=1000)
    assert [mat.entropy_coef_at(constant, t) for t in (0, 500, 1000)] == [0.04, 0.04, 0.04]
    decaying = small(ent_coef=0.06, ent_coef_final=0.01, total_timesteps=1000)
    assert [mat.entropy_coef_at(decaying, t) for t in (0, 500, 1000, 1010)] == pytest.approx([0.06, 0.035, 0.01, 0.01])


def test_options_that_cannot_hold_are_refused(small, tmp_path):
    cases = [
        (dict(share_params="none"), "--share-params none"),
        (dict(recurrent="gru"), "--recurrent gru"),
        (dict(n_embd=16, n_head=3), "--n-head 3 must divide --n-embd 16"),
        (dict(n_block=0), "--n-block must be at least 1"),
        (dict(ent_coef_final=-0.01), "--ent-coef-final must be at least 0"),
        (dict(num_minibatches=11), "--num-minibatches must be between 1 and 10"),
        (dict(**TAG, share_params="group"), "--share-params group with groups"),
        (dict(**TAG, train_groups=("adversary",)), "leaves \\['agent'\\] fixed"),
        (dict(**TAG, train_groups=("predator",)), "match no agent"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            mat.main(small(**overrides))
    assert not os.path.exists(tmp_path / "runs")  # refused before a run folder is written


def test_command_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "algos/mat.py", "--env", "torch:simple_spread", "--env-kwargs", "max_cycles=5",
         "--num-envs", "2", "--num-steps", "5", "--total-timesteps", "10", "--eval-episodes", "1",
         "--eval-num-envs", "1", "--n-embd", "16", "--num-minibatches", "1", "--decoder", "mat", "--no-cuda",
         "--run-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    (run,) = os.listdir(tmp_path)
    with open(tmp_path / run / "summary.json") as f:
        assert json.load(f)["algo"] == "mat"
    refused = subprocess.run([sys.executable, "algos/mat.py", "--share-params", "none", "--no-cuda"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "one transformer" in refused.stderr
