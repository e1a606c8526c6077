"""MAPPO's --share-critic: actors per group (or per agent) and one centralised critic for all.

- the critic is one parameter set read by every agent (with the agent-id one-hot) while the
  actors keep one set per group; without the flag the critics are per group (regression);
- one update moves the shared critic with each group's value loss alone, and with both
  together differently from either; per-group critics never see the other group's loss;
- --train-groups and --load-group with a shared critic (the actor loads, the critic cannot),
  resume and evaluation round trips, the refused combinations, one real command line.
"""
import glob
import json
import os
import subprocess
import sys

import pytest
import torch

from algos import mappo
from common.cli import ConfigError
from envs import make_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDATORS, PREY = [0, 1, 2], [3]  # torch:simple_tag: adversary_0..2, agent_0


def tag_args(tiny, **overrides):
    """One iteration (2 copies x 5 steps, episodes of 5 steps) of MAPPO on torch:simple_tag, a policy per group."""
    settings = {"env": "torch:simple_tag", "env_kwargs": ("max_cycles=5",), "share_params": "group",
                "share_critic": True, "total_timesteps": 10, "eval_episodes": 1}
    return tiny(mappo, **{**settings, **overrides})


def load(run_dir):
    return torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)


def weights_of(ckpt, net, agents):
    """{parameter name: what `agents` read}: their rows of a per-set tensor, the whole tensor when it is shared."""
    rows = ckpt["agent_rows"][net]
    return {k: ckpt[net][k] if rows[k] is None else ckpt[net][k][rows[k][agents]] for k in rows}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def all_differ(a, b):
    return all(not torch.equal(a[k], b[k]) for k in a)


def networks(share_params, share_critic):
    env = make_env("torch:simple_tag", 2, 0, {"max_cycles": 5})
    args = mappo.Args(env="torch:simple_tag", share_params=share_params, share_critic=share_critic, hidden_sizes=(16,))
    actor, critic = mappo.build_networks(args, env, torch.device("cpu"))
    obs, state, _ = env.reset()
    return actor, critic, torch.as_tensor(obs), torch.as_tensor(state)


def grads(module, loss):
    return dict(zip([n for n, _ in module.named_parameters()], torch.autograd.grad(loss, list(module.parameters()),
                                                                                   retain_graph=True)))


# ----------------------------------------------------------------------------- structure
@pytest.mark.parametrize("share_params", ["group", "none"])
def test_actors_per_group_and_one_critic_for_every_agent(share_params):
    actor, critic, obs, state = networks(share_params, share_critic=True)
    sets = [0, 0, 0, 1] if share_params == "group" else [0, 1, 2, 3]
    assert all(rows.tolist() == sets for rows in actor.agent_rows().values())  # one actor set per group / agent
    assert all(rows is None for rows in critic.agent_rows().values())  # one critic tensor read by all
    assert critic.net.agent_id_input  # ... with the one-hot: it knows whose value it predicts
    value, _ = critic(mappo.critic_inputs(obs, state, "state")[None])  # (1, E, N)
    assert not torch.allclose(value[..., 0], value[..., 3])  # same state, other agent, other value
    # Every agent's value reads the very same parameter objects: both sides' values send gradient into each.
    g_pred, g_prey = grads(critic, value[..., PREDATORS].sum()), grads(critic, value[..., PREY].sum())
    for name in g_pred:
        assert g_pred[name].abs().sum() > 0 and g_prey[name].abs().sum() > 0, name
    # The actors do not share: the prey's log-probabilities reach only the prey's set of weights.
    dist, _ = actor(obs[None])
    g_actor = grads(actor, dist.log_prob(dist.sample())[..., PREY].sum())
    prey_set = sets[PREY[0]]
    for name, g in g_actor.items():
        assert g[prey_set].abs().sum() > 0 and all(g[s].abs().sum() == 0 for s in set(sets) - {prey_set}), name


def test_without_the_flag_each_group_has_its_own_critic():
    _, critic, obs, state = networks("group", share_critic=False)
    assert all(rows.tolist() == [0, 0, 0, 1] for rows in critic.agent_rows().values())
    value, _ = critic(mappo.critic_inputs(obs, state, "state")[None])
    for name, g in grads(critic, value[..., PREY].sum()).items():
        assert g[1].abs().sum() > 0 and g[0].abs().sum() == 0, name  # the prey's value never reaches the predators'


def test_with_share_params_all_the_flag_changes_nothing():
    built = []
    for share_critic in (False, True):
        torch.manual_seed(0)
        built.append(networks("all", share_critic)[:2])
    for a, b in zip(*built):
        assert same(a.state_dict(), b.state_dict())


def test_refused_combinations(tiny):
    with pytest.raises(ConfigError, match="--share-critic.*--critic-model gnn.*--share-params all"):
        mappo.main(tag_args(tiny, share_params="none", critic_model="gnn"))


# ----------------------------------------------------------------------------- the update
def test_each_groups_value_loss_moves_the_shared_critic(tiny, tmp_path):
    """One update from the same start and the same rollout: learning rate 0 (the start), only the predators
    learning, only the prey, both. Adam moves a weight exactly where its gradient is non-zero."""
    def critic_after(share_critic, name, **overrides):
        summary = mappo.main(tag_args(tiny, share_critic=share_critic, run_dir=str(tmp_path / name), **overrides))
        return load(summary["run_dir"])

    start = critic_after(True, "start", learning_rate=0.0)
    pred = critic_after(True, "pred", train_groups=("adversary",))
    prey = critic_after(True, "prey", train_groups=("agent",))
    both = critic_after(True, "both")
    # The weights the prey's value reads move with the predators' loss alone, and the other way round.
    assert all_differ(weights_of(pred, "critic", PREY), weights_of(start, "critic", PREY))
    assert all_differ(weights_of(prey, "critic", PREDATORS), weights_of(start, "critic", PREDATORS))
    # Both losses in one update: a move unlike either alone.
    assert all_differ(both["critic"], pred["critic"]) and all_differ(both["critic"], prey["critic"])
    # The fixed group's actor stays as it was.
    assert same(weights_of(pred, "actor", PREY), weights_of(start, "actor", PREY))

    # Regression: per-group critics, a group's loss never reaches the other group's critic.
    start = critic_after(False, "start_g", learning_rate=0.0)
    pred = critic_after(False, "pred_g", train_groups=("adversary",))
    assert same(weights_of(pred, "critic", PREY), weights_of(start, "critic", PREY))
    assert all_differ(weights_of(pred, "critic", PREDATORS), weights_of(start, "critic", PREDATORS))


# ----------------------------------------------------------------------------- checkpoints
def test_resume_and_evaluate_round_trip(tiny, tmp_path):
    first = mappo.main(tag_args(tiny, run_dir=str(tmp_path / "a")))
    saved = load(first["run_dir"])
    # Resumed at learning rate 0: the shared critic (and the optimiser's state for it) load and stay put.
    resumed = mappo.main(tag_args(tiny, resume=first["run_dir"], total_timesteps=20, learning_rate=0.0))
    end = load(resumed["run_dir"])
    assert resumed["global_step"] == 20 and end["args"]["share_critic"] is True
    assert same(end["critic"], saved["critic"]) and same(end["actor"], saved["actor"])
    assert all(rows is None for rows in end["agent_rows"]["critic"].values())
    assert end["optimizer"]["state"][0]["step"].item() == 2 * 2 * mappo.Args.num_minibatches
    with pytest.raises(ConfigError, match="made with --share-critic True"):
        mappo.main(tag_args(tiny, resume=first["run_dir"], total_timesteps=30, share_critic=False))
    result = mappo.main(tag_args(tiny, evaluate_checkpoint=first["run_dir"]))
    assert result["eval_episodes"] == 1


def test_load_group_with_a_shared_critic(tiny, tmp_path):
    source = mappo.main(tag_args(tiny, share_critic=False, run_dir=str(tmp_path / "source")))
    src = load(source["run_dir"])
    # The prey's actor comes from a run with per-group critics and stays fixed; the shared critic starts fresh.
    run = mappo.main(tag_args(tiny, seed=7, run_dir=str(tmp_path / "run"), train_groups=("adversary",),
                              load_group=(f"agent={source['run_dir']}",)))
    dst = load(run["run_dir"])
    assert same(weights_of(src, "actor", PREY), weights_of(dst, "actor", PREY))
    assert not same(weights_of(src, "actor", PREDATORS), weights_of(dst, "actor", PREDATORS))
    assert dst["value_norm"]["debiasing_term"][1] == 0  # the prey's statistics are not taken without its critic
    # A shared-critic run lends its actors to another shared-critic run ...
    again = mappo.main(tag_args(tiny, seed=8, run_dir=str(tmp_path / "again"), load_group=(f"agent={run['run_dir']}",)))
    assert load(again["run_dir"])["global_step"] == 10
    # ... but holds no group's critic for a run with per-group critics.
    with pytest.raises(ConfigError, match="critic parameter .* in that run .*--share-critic"):
        mappo.main(tag_args(tiny, share_critic=False, run_dir=str(tmp_path / "bad"),
                            load_group=(f"agent={run['run_dir']}",)))


# ----------------------------------------------------------------------------- runs
def test_smoke_recurrent_per_agent_actors(tiny):
    summary = mappo.main(tiny(mappo, env="torch:simple_speaker_listener", env_kwargs=("max_cycles=5",),
                              share_params="none", share_critic=True, recurrent="gru", chunk_len=5,
                              num_minibatches=2, agent_groups=("speaker=speaker", "listener=listener")))
    assert all(torch.isfinite(torch.tensor(v)) for v in summary["final_losses"].values())
    assert sorted(summary["eval_group_returns"]) == ["listener", "speaker"]


def test_real_command_line(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join("algos", "mappo.py"), "--env", "torch:simple_speaker_listener",
                           "--share-params", "group", "--share-critic", "--total-timesteps", "20", "--num-envs", "2",
                           "--num-steps", "5", "--eval-episodes", "1", "--eval-num-envs", "1", "--hidden-sizes", "16",
                           "--run-dir", str(tmp_path), "--no-cuda"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    (path,) = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(path) as f:
        assert json.load(f)["global_step"] == 20
    ckpt = load(os.path.dirname(path))
    assert ckpt["args"]["share_critic"] is True and ckpt["critic"]["net.head.weight"].shape == (1, 16)
