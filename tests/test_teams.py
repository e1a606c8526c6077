"""Teams and policy mapping in MAPPO/IPPO: groups from name prefixes or --agent-groups, one
network per group (--share-params group), fixed groups (--train-groups), a group's weights
taken from another run (--load-group), per-group statistics and returns, and bad names."""
import glob
import math
import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from algos import ippo, mappo
from common.cli import ConfigError, parse_args
from common.groups import assign_groups, make_teams
from nets import AgentLinear, AgentNet, ValueNorm

ALGOS = {"mappo": mappo, "ippo": ippo}
TAG = ["adversary_0", "adversary_1", "adversary_2", "agent_0"]
SHORT = ("max_cycles=5",)  # episodes end inside the tiny runs, so training returns get logged


def teams_args(tiny, module, **overrides):
    settings = dict(env="torch:simple_tag", env_kwargs=SHORT, share_params="group")
    return tiny(module, **{**settings, **overrides})


def load(run_dir):
    return torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)


def group_rows(ckpt, net, agents):
    """{parameter name: the rows of `agents` (indices)}: the weights those agents act with."""
    rows = ckpt["agent_rows"][net]
    return {k: ckpt[net][k][rows[k][agents]] for k in rows}


def same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- grouping
def test_groups_come_from_name_prefixes():
    assert assign_groups(TAG) == (["adversary", "agent"], [0, 0, 0, 1])
    world = ["leadadversary_0", "adversary_0", "adversary_1", "agent_0", "agent_1"]
    assert assign_groups(world) == (["leadadversary", "adversary", "agent"], [0, 1, 1, 2, 2])
    # where the prefixes are roles of one team, the env says so (common.groups.TEAMS)
    assert assign_groups(world, env="simple_world_comm") == (["adversary", "agent"], [0, 0, 0, 1, 1])
    assert assign_groups(["speaker_0", "listener_0"], env="torch:simple_speaker_listener") == (["team"], [0, 0])
    assert assign_groups(["agent_0", "agent_1", "agent_2"]) == (["agent"], [0, 0, 0])  # cooperative: one team
    assert assign_groups(["speaker_0", "listener_0"]) == (["speaker", "listener"], [0, 1])


def test_groups_from_an_explicit_mapping():
    world = ["leadadversary_0", "adversary_0", "adversary_1", "agent_0", "agent_1"]
    # an agent by name, a whole prefix group by its prefix
    assert assign_groups(world, ["leadadversary_0=adversary", "agent=prey"]) == (
        ["adversary", "prey"], [0, 0, 0, 1, 1])
    # the exact agent name wins over its prefix
    assert assign_groups(TAG, ["adversary=predator", "adversary_2=lone"]) == (
        ["predator", "lone", "agent"], [0, 0, 1, 2])
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        assign_groups(TAG, ["adversary"])


def test_unknown_names_fail_with_the_agent_and_group_names(tiny):
    with pytest.raises(ConfigError) as err:
        make_teams(TAG, "group", train_groups=["predator"])
    assert "predator" in str(err.value) and all(a in str(err.value) for a in TAG)
    assert "adversary:" in str(err.value) and "agent:" in str(err.value)
    with pytest.raises(ConfigError, match="adversary_0, adversary_1, adversary_2, agent_0"):
        make_teams(TAG, "group", agent_groups=["prey_0=prey"])
    with pytest.raises(ConfigError, match="agent_0"):
        make_teams(TAG, "group", load_groups=["prey=runs/x"])
    # the algorithm itself fails at once, before training
    with pytest.raises(ConfigError, match="adversary_0"):
        mappo.main(teams_args(tiny, mappo, train_groups=("predator",)))
    # fixed or loaded groups need weights of their own
    with pytest.raises(ConfigError, match="--share-params group"):
        make_teams(TAG, "all", train_groups=["adversary"])
    with pytest.raises(ConfigError, match="all, group or none"):
        mappo.validate(teams_args(tiny, mappo, share_params=True))  # the old boolean spelling


def test_share_params_cli_choices():
    assert parse_args(mappo.Args, ["--share-params", "group", "--train-groups", "adversary",
                                   "--load-group", "agent=runs/x"]).share_params == "group"
    with pytest.raises(SystemExit):
        parse_args(ippo.Args, ["--share-params", "teams"])
    with pytest.raises(SystemExit):
        parse_args(ippo.Args, ["--no-share-params"])  # the old flag is gone


# ----------------------------------------------------------------------------- group parameters
def test_agent_linear_with_sets_equals_a_loop_over_agents():
    torch.manual_seed(0)
    sets = [0, 0, 1, 0]
    layer = AgentLinear(2, 4, 5, set_of_agent=sets)
    with torch.no_grad():
        layer.bias.normal_()
    x = torch.randn(7, 4, 4)
    y = layer(x)
    for n, s in enumerate(sets):
        torch.testing.assert_close(y[:, n], x[:, n] @ layer.weight[s] + layer.bias[s, 0])


def test_group_parameters_are_shared_within_and_separate_across_groups():
    torch.manual_seed(0)
    net = AgentNet(6, 3, n_agents=4, hidden_sizes=(8,), recurrent="gru", param_groups=[0, 0, 0, 1])
    assert net.n_sets == 2 and net.agent_id_input  # three agents per set: the one-hot tells them apart
    for name, p in net.named_parameters():
        assert p.shape[0] == 2, name  # one parameter set per group, not per agent
    x = torch.randn(1, 5, 4, 6)
    before, _ = net(x, net.initial_state(5), torch.ones(1, 5, 4))
    with torch.no_grad():
        net.head.weight[1].add_(1.0)  # change the second group's weights only
    after, _ = net(x, net.initial_state(5), torch.ones(1, 5, 4))
    torch.testing.assert_close(after[..., :3, :], before[..., :3, :])
    assert not torch.allclose(after[..., 3, :], before[..., 3, :])
    # one group's loss sends gradient into its own set only, summed over its agents
    net.zero_grad()
    out, _ = net(x, net.initial_state(5), torch.ones(1, 5, 4))
    out[..., :2, :].sum().backward()
    assert net.body.net[0].weight.grad[0].abs().sum() > 0
    assert net.body.net[0].weight.grad[1].abs().sum() == 0
    assert net.agent_rows()["head.weight"].tolist() == [0, 0, 0, 1]
    # one group only: the plain shared network (its checkpoints are the all-shared ones)
    assert AgentNet(6, 3, 4, param_groups=[0, 0, 0, 0]).agent_rows()["head.weight"] is None


def test_value_norm_keeps_each_groups_statistics():
    vn = ValueNorm(beta=0.9, groups=[0, 0, 1])
    predators = torch.full((50, 2), 10.0)
    prey = torch.full((50, 1), -10.0)
    vn.update(torch.cat([predators, prey], -1))
    mean, _ = vn.stats()
    torch.testing.assert_close(mean, torch.tensor([10.0, 10.0, -10.0]))  # rivals' returns never mix
    mask = torch.tensor([[1.0, 1.0, 0.0]]).expand(50, 3)  # the prey's group is masked out
    vn.update(torch.zeros(50, 3), mask)
    mean, _ = vn.stats()
    assert mean[2].item() == pytest.approx(-10.0) and mean[0].item() < 10.0


def test_group_mean_by_hand_and_the_copies_agree():
    x = torch.tensor([[[1.0, 3.0, 10.0], [5.0, 7.0, 20.0]]])  # (T=1, E=2, N=3)
    mask = torch.tensor([[[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]])
    onehot = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # agents 0, 1 in group 0; agent 2 in group 1
    expected = torch.tensor([3.0, 3.0, 15.0])  # (1 + 3 + 5) / 3 for group 0, (10 + 20) / 2 for group 1
    torch.testing.assert_close(mappo.group_mean(x, mask, onehot), expected)
    g = torch.Generator().manual_seed(0)
    x, mask = torch.randn(4, 3, 5, generator=g), (torch.rand(4, 3, 5, generator=g) > 0.3).float()
    onehot = torch.nn.functional.one_hot(torch.tensor([0, 1, 1, 2, 0])).float()
    for name in ("ippo", "ia2c", "ipg", "maa2c", "itrpo", "matrpo"):  # every copy computes the same
        copy = __import__(f"algos.{name}", fromlist=["group_mean"]).group_mean
        torch.testing.assert_close(copy(x, mask, onehot), mappo.group_mean(x, mask, onehot))
    # the HA files' team_mean: the same masked mean, over a team axis (..., K) instead of agents
    teams_x, teams_mask = x[..., :2], mask[..., :2]  # (T, E, K=2)
    expected = torch.stack([(teams_x[..., k] * teams_mask[..., k]).sum() / teams_mask[..., k].sum() for k in range(2)])
    for name in ("happo", "hatrpo", "haa2c"):
        copy = __import__(f"algos.{name}", fromlist=["team_mean"]).team_mean
        torch.testing.assert_close(copy(teams_x, teams_mask), expected)


# ----------------------------------------------------------------------------- runs
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", ["torch:simple_tag", "torch:simple_adversary"])
def test_smoke_competitive_envs(tiny, algo, env):
    module = ALGOS[algo]
    summary = module.main(teams_args(tiny, module, env=env))
    names = ["adversary", "agent"]
    assert sorted(summary["eval_group_returns"]) == names
    assert all(math.isfinite(v) for v in summary["final_losses"].values())
    # the groups' returns add up to the total (greedy returns, summed over each group's agents)
    assert sum(summary["eval_group_returns"].values()) == pytest.approx(summary["eval_return_mean"], abs=1e-3)
    expected = {"torch:simple_tag": ["adversary"] * 3 + ["agent"],
                "torch:simple_adversary": ["adversary", "agent", "agent"]}[env]
    assert load(summary["run_dir"])["agent_groups"] == expected


def test_world_comm_groups_with_different_action_counts(tiny):
    """The PettingZoo scenario whose leader (20 actions; the others 5, padded and masked) is on the
    adversaries' side (common.groups.TEAMS); --agent-groups makes it a group of its own: three
    groups, observations of 34 and 28 (padded)."""
    summary = mappo.main(tiny(mappo, env="simple_world_comm", env_kwargs=SHORT, share_params="group"))
    assert list(summary["eval_group_returns"]) == ["adversary", "agent"]
    summary = mappo.main(tiny(mappo, env="simple_world_comm", env_kwargs=SHORT, share_params="group",
                              agent_groups=("leadadversary=lead", "agent=prey"), train_groups=("lead", "adversary")))
    assert list(summary["eval_group_returns"]) == ["lead", "adversary", "prey"]
    ckpt = load(summary["run_dir"])
    assert ckpt["actor"]["net.head.weight"].shape == (3, 16, 20)  # one output layer per group, padded to 20
    assert all(math.isfinite(v) for v in summary["final_losses"].values())


def test_per_group_returns_are_logged(tiny):
    summary = mappo.main(teams_args(tiny, mappo, eval_every=10))
    (events,) = glob.glob(os.path.join(summary["run_dir"], "events.out.tfevents*"))
    tags = set(EventAccumulator(events).Reload().Tags()["scalars"])
    assert {"charts/episodic_return", "charts/team_adversary/episodic_return", "charts/team_agent/episodic_return",
            "eval/episodic_return", "eval/team_adversary/episodic_return", "eval/team_agent/episodic_return"} <= tags
    # one team (cooperative simple_spread): no per-team charts, the total says it all
    summary = mappo.main(tiny(mappo, env_kwargs=SHORT, share_params="group", eval_every=10))
    (events,) = glob.glob(os.path.join(summary["run_dir"], "events.out.tfevents*"))
    assert not any("team_" in t for t in EventAccumulator(events).Reload().Tags()["scalars"])
    assert list(summary["eval_group_returns"]) == ["agent"]


def test_one_group_is_the_all_shared_network(tiny, tmp_path):
    shared = mappo.main(tiny(mappo, share_params="all", run_dir=str(tmp_path / "a")))
    grouped = mappo.main(tiny(mappo, share_params="group", run_dir=str(tmp_path / "b")))
    assert shared["final_losses"] == grouped["final_losses"]


@pytest.mark.parametrize("algo", ALGOS)
def test_fixed_groups_keep_their_weights_and_trained_groups_learn(tiny, algo):
    module = ALGOS[algo]
    first = module.main(teams_args(tiny, module, train_groups=("adversary",), total_timesteps=10))
    start = load(first["run_dir"])
    resumed = module.main(teams_args(tiny, module, train_groups=("adversary",), total_timesteps=30,
                                     resume=first["run_dir"]))
    end = load(resumed["run_dir"])
    assert end["global_step"] == 30
    for net in ("actor", "critic"):
        assert same(group_rows(start, net, [3]), group_rows(end, net, [3]))  # the prey: fixed
        assert not same(group_rows(start, net, [0, 1, 2]), group_rows(end, net, [0, 1, 2]))  # the predators: learn


def test_load_group_restores_a_groups_weights_from_another_run(tiny, tmp_path):
    source = mappo.main(teams_args(tiny, mappo, run_dir=str(tmp_path / "source")))
    src = load(source["run_dir"])
    # The prey come from the source run and stay fixed; the predators start afresh and learn.
    run = mappo.main(teams_args(tiny, mappo, seed=7, run_dir=str(tmp_path / "run"), train_groups=("adversary",),
                                load_group=(f"agent={source['run_dir']}",)))
    dst = load(run["run_dir"])
    for net in ("actor", "critic"):
        assert same(group_rows(src, net, [3]), group_rows(dst, net, [3]))
        assert not same(group_rows(src, net, [0, 1, 2]), group_rows(dst, net, [0, 1, 2]))
    assert dst["value_norm"]["running_mean"][1] == src["value_norm"]["running_mean"][1]
    result = mappo.main(tiny(mappo, evaluate_checkpoint=run["run_dir"]))  # a group run's checkpoint plays back
    assert math.isfinite(result["eval_return_mean"])

    # Another algorithm's run is not copied: its group acts as that run (tests/test_policy_mapping.py), fixed.
    other = ippo.main(teams_args(tiny, ippo, run_dir=str(tmp_path / "ippo")))
    run = mappo.main(teams_args(tiny, mappo, run_dir=str(tmp_path / "mixed"),
                                load_group=(f"adversary={other['run_dir']}",)))
    dst = load(run["run_dir"])
    assert not same(group_rows(load(other["run_dir"]), "actor", [0]), group_rows(dst, "actor", [0]))
    with pytest.raises(ConfigError, match="stays fixed"):
        mappo.main(teams_args(tiny, mappo, run_dir=str(tmp_path / "bad"), train_groups=("adversary",),
                              load_group=(f"adversary={other['run_dir']}",)))

    # A run that gave each predator its own network (no agent-id input) does not fit a shared predator one.
    separate = mappo.main(teams_args(tiny, mappo, share_params="none", run_dir=str(tmp_path / "none")))
    with pytest.raises(ConfigError, match="is \\(16, 16\\) there and \\(20, 16\\) here"):
        mappo.main(teams_args(tiny, mappo, run_dir=str(tmp_path / "bad"),
                              load_group=(f"adversary={separate['run_dir']}",)))
    # ... but fills a run with a network per agent, agent by agent.
    run = mappo.main(teams_args(tiny, mappo, share_params="none", seed=7, run_dir=str(tmp_path / "none2"),
                                train_groups=("agent",), load_group=(f"adversary={separate['run_dir']}",)))
    predators = [0, 1, 2]
    assert same(group_rows(load(separate["run_dir"]), "actor", predators),
                group_rows(load(run["run_dir"]), "actor", predators))
