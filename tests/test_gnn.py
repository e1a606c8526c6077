"""Graph networks over the agent axis (nets/gnn.py) and their use in MAPPO / IPPO.

The layer is permutation-equivariant; "from_pos" builds exactly the edges within the radius;
"empty" is a per-agent MLP; separate parameters are whole per-agent GNNs; bad settings fail at
once; MAPPO and IPPO train, resume and evaluate with GNN actors and critics, recurrent ones
included. Learning (GNN vs MLP on simple_spread) is measured in benchmarks/learning_gnn.py."""
import math
import os

import pytest
import torch

from algos import ippo, mappo
from common import gnn_args
from common.cli import ConfigError
from common.groups import GroupArgs
from envs import MPE_AGENT_FEATURES, TORCH_SCENARIOS, agent_feature_slices, make_env
from nets import MLP, GraphNet, MessagePassing, adjacency, edge_features
from tests.test_algos import check_summary

ALGOS = {"mappo": mappo, "ippo": ippo}
SPREAD = {"pos_slice": (2, 4), "vel_slice": (0, 2)}  # simple_spread's own velocity and position


def graph_net(seed=0, in_dim=10, out_dim=3, n_agents=4, **kwargs):
    torch.manual_seed(seed)
    settings = dict(hidden_sizes=(16, 16), gnn_layers=2, **SPREAD)
    return GraphNet(in_dim, out_dim, n_agents, **{**settings, **kwargs})


# ----------------------------------------------------------------------------- the graph
def test_from_pos_builds_exactly_the_edges_within_the_radius():
    # distances from agent 0: 0.3 to agent 1, 0.49 to agent 3; agent 4 is exactly 0.5 from agent 2
    pos = torch.tensor([[0.0, 0.0], [0.3, 0.0], [1.0, 0.0], [0.0, 0.49], [1.5, 0.0]])
    expected = torch.zeros(5, 5, dtype=torch.bool)
    for i, j in [(0, 1), (0, 3)]:  # (1, 3) is 0.574 apart, (2, 4) 0.5: not closer than the radius
        expected[i, j] = expected[j, i] = True
    assert torch.equal(adjacency("from_pos", 5, pos, edge_radius=0.5), expected)
    assert torch.equal(adjacency("from_pos", 5, pos, 0.5, self_loops=True), expected | torch.eye(5, dtype=torch.bool))
    # batched: each (step, env) gets its own graph from its own positions
    moved = pos.clone()
    moved[2] = torch.tensor([0.1, 0.1])  # now within 0.5 of agents 0, 1 and 3
    both = adjacency("from_pos", 5, torch.stack([pos, moved])[None], 0.5)  # (1, 2, 5, 5)
    assert both.shape == (1, 2, 5, 5) and torch.equal(both[0, 0], expected)
    assert both[0, 1, 2].tolist() == [True, True, False, True, False]


def test_full_and_empty_topologies():
    eye = torch.eye(3, dtype=torch.bool)
    assert torch.equal(adjacency("full", 3), ~eye)
    assert torch.equal(adjacency("full", 3, self_loops=True), torch.ones(3, 3, dtype=torch.bool))
    assert not adjacency("empty", 3).any()
    assert torch.equal(adjacency("empty", 3, self_loops=True), eye)


def test_edge_features_are_relative_position_distance_and_velocity():
    pos = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    vel = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    e = edge_features(pos, vel)  # (N_recv, N_send, 2 + 1 + 2)
    assert e[0, 1].tolist() == [3.0, 4.0, 5.0, -1.0, 2.0]  # agent 1 as seen by agent 0
    assert e[1, 0].tolist() == [-3.0, -4.0, 5.0, 1.0, -2.0]
    assert edge_features(None, vel).shape == (2, 2, 2) and edge_features(None, None) is None


def test_messages_reach_only_neighbours():
    net = graph_net(topology="from_pos", edge_radius=0.5, gnn_layers=1)
    x = torch.randn(1, 1, 4, 10)
    x[..., 2:4] = torch.tensor([[0.0, 0.0], [0.3, 0.0], [2.0, 2.0], [0.0, 0.4]])  # agent 2 is alone
    out, _ = net(x)
    changed = x.clone()
    changed[..., 0, 4:] += 1.0  # agent 0's other features (not its position: the graph stays the same)
    out2, _ = net(changed)
    moved = (out2 - out).abs().amax(-1)[0, 0]  # (N,)
    assert moved[2] == 0 and moved[1] > 0 and moved[3] > 0 and moved[0] > 0


# ----------------------------------------------------------------------------- equivariance, empty, sharing
@pytest.mark.parametrize("topology", ["full", "empty", "from_pos"])
@pytest.mark.parametrize("self_loops", [False, True])
@pytest.mark.parametrize("edges", [True, False], ids=["edge_features", "no_edge_features"])
def test_shared_gnn_is_permutation_equivariant(topology, self_loops, edges):
    net = graph_net(topology=topology, self_loops=self_loops, edge_radius=1.0, edge_features=edges)
    x = torch.randn(3, 2, 4, 10)
    perm = torch.tensor([2, 0, 3, 1])
    out, _ = net(x)
    out_perm, _ = net(x[..., perm, :])
    torch.testing.assert_close(out_perm, out[..., perm, :])
    if topology == "full":  # and the agents do interact: another agent's input changes my output
        other = x.clone()
        other[..., 1, :] += 1.0
        assert not torch.allclose(net(other)[0][..., 0, :], out[..., 0, :])


def test_message_passing_layer_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = MessagePassing(6, 8, edge_dim=3)
    h, adj, e = torch.randn(5, 4, 1, 6), torch.rand(5, 4, 4) < 0.5, torch.randn(5, 4, 4, 3)
    perm = torch.tensor([3, 1, 0, 2])
    out = layer(h, adj, e)
    out_perm = layer(h[:, perm], adj[:, perm][:, :, perm], e[:, perm][:, :, perm])
    torch.testing.assert_close(out_perm, out[:, perm])


@pytest.mark.parametrize("topology", ["full", "from_pos"])
@pytest.mark.parametrize("share_params", [True, False])
def test_messages_without_edge_features_equal_zero_edge_weights(topology, share_params):
    """The layer's two paths (messages from the sender alone, one matmul; messages per edge)
    agree when the edge weights are zero."""
    with_edges = graph_net(topology=topology, share_params=share_params)
    without = graph_net(topology=topology, share_params=share_params, edge_features=False)
    with torch.no_grad():
        for layer in with_edges.gnn:
            layer.edge_lin.weight.zero_()
            layer.edge_lin.bias.zero_()
    without.load_state_dict({k: v for k, v in with_edges.state_dict().items() if ".edge_lin." not in k})
    x = torch.randn(2, 3, 4, 10)
    torch.testing.assert_close(with_edges(x)[0], without(x)[0])


@pytest.mark.parametrize("share_params", [True, False])
def test_empty_topology_is_a_per_agent_mlp(share_params):
    """With no edges every message-passing layer is act(W_s h + b_s): copying those weights into
    nets.MLP (separate: agent i gets GNN copy i's) gives the same outputs."""
    net = graph_net(topology="empty", share_params=share_params)
    mlp = MLP(10, (16, 16), 3, None if share_params else 4)
    linears = [layer.self_lin for layer in net.gnn] + [net.head]
    targets = [m for m in mlp.net if not isinstance(m, torch.nn.Tanh)]
    assert len(linears) == len(targets) == 3
    with torch.no_grad():
        for source, target in zip(linears, targets):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
    x = torch.randn(2, 3, 4, 10)
    torch.testing.assert_close(net(x)[0], mlp(x))


def test_separate_gnns_equal_the_shared_one_when_their_weights_are_its_copies():
    shared = graph_net(share_params=True)
    separate = graph_net(share_params=False, seed=1)
    n_shared = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in separate.parameters()) == 4 * n_shared  # one whole GNN per agent
    x = torch.randn(2, 3, 4, 10)
    assert not torch.allclose(shared(x)[0], separate(x)[0])
    with torch.no_grad():
        for (name, p), q in zip(shared.named_parameters(), separate.parameters()):
            # nn.Linear weight (out, in) -> AgentLinear (N, in, out); bias (out,) -> (N, 1, out)
            q.copy_((p.T if name.endswith("weight") else p[None]).expand_as(q))
    torch.testing.assert_close(separate(x)[0], shared(x)[0])


def test_separate_gnn_agent_output_depends_only_on_its_own_copy():
    """Changing GNN copy k (every tensor's index k) changes agent k's output and no other's, even
    through two message-passing layers: agent i's output is what GNN i computes at node i."""
    net = graph_net(share_params=False)
    x = torch.randn(2, 3, 4, 10)
    out, _ = net(x)
    with torch.no_grad():
        for p in net.parameters():
            p[1] += 0.1
    moved = (net(x)[0] - out).abs().amax((0, 1, 3))  # (N,)
    assert moved[1] > 0 and moved[[0, 2, 3]].max() == 0


def test_mean_pool_gives_every_agent_the_mean_output():
    per_agent, pooled = graph_net(), graph_net(pool="mean")  # same seed: same weights
    x = torch.randn(2, 3, 4, 10)
    out, mean = per_agent(x)[0], pooled(x)[0]
    torch.testing.assert_close(mean, out.mean(-2, keepdim=True).expand_as(out))


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_recurrent_graph_net_sequence_equals_stepping(kind):
    """The GNN runs before the recurrent core, which keeps one state per agent: a whole sequence
    (with an episode start in the middle) gives what stepping one step at a time gives."""
    net = graph_net(topology="from_pos", recurrent=kind, share_params=False)
    x = torch.randn(6, 3, 4, 10)
    starts = torch.zeros(6, 3, 4)
    starts[0] = 1.0
    starts[3, 1] = 1.0
    seq, _ = net(x, net.initial_state(3), starts)
    state, steps = net.initial_state(3), []
    for t in range(6):
        out, state = net(x[t:t + 1], state, starts[t:t + 1])
        steps.append(out)
    torch.testing.assert_close(seq, torch.cat(steps))


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,match", [
    ({"topology": "from_pos", "pos_slice": None}, "pos_slice"),
    ({"pos_slice": (8, 12)}, "0 <= start < end <= in_dim = 10"),
    ({"vel_slice": (3, 3)}, "vel_slice"),
    ({"topology": "ring"}, "full, empty, from_pos"),
    ({"gnn_layers": 3}, "gnn_layers must be between 1 and len"),
    ({"pool": "max"}, "pool"),
    ({"topology": "from_pos", "edge_radius": 0.0}, "edge_radius"),
])
def test_bad_graph_settings_fail_with_a_message(kwargs, match):
    with pytest.raises(ValueError, match=match):
        graph_net(**kwargs)


def test_input_without_the_agent_axis_fails():
    net = graph_net()
    with pytest.raises(ValueError, match="agent axis"):
        net(torch.randn(3, 4 * 10))  # agents folded into the features
    with pytest.raises(ValueError, match="agent axis"):
        net(torch.randn(3, 2, 10, 4))  # agents moved after the features


BAD_ALGO = {  # (algo, Args overrides, what the message says)
    "from_pos_without_positions": ("mappo", {"env": "torch:simple_reference", "actor_model": "gnn",
                                                 "gnn_topology": "from_pos"}, "--gnn-pos-slice START END"),
    "slice_outside_obs": ("ippo", {"actor_model": "gnn", "gnn_pos_slice": (17, 19)}, "0 <= START < END <= 18"),
    "slice_outside_smallest_obs": ("ippo", {"env": "simple_speaker_listener", "critic_model": "gnn",
                                                "gnn_vel_slice": (2, 4)}, "END <= 3"),
    "gnn_layers": ("mappo", {"critic_model": "gnn", "gnn_layers": 2}, "--gnn-layers must be between 1 and 1"),
    "critic_input": ("mappo", {"critic_model": "gnn", "critic_input": "concat_obs"}, "--critic-input"),
    "uncentralised_critic": ("mappo", {"critic_model": "gnn", "gnn_topology": "empty", "gnn_critic_pool": "none"},
                             "IPPO"),
    "edge_radius": ("ippo", {"actor_model": "gnn", "gnn_topology": "from_pos", "gnn_edge_radius": 0.0},
                    "--gnn-edge-radius"),
}


@pytest.mark.parametrize("case", BAD_ALGO)
def test_bad_gnn_options_fail_before_the_run_starts(tiny, tmp_path, case):
    algo, overrides, match = BAD_ALGO[case]
    with pytest.raises(ConfigError, match=match):
        ALGOS[algo].main(tiny(ALGOS[algo], **overrides))
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- where positions are
@pytest.mark.parametrize("name", sorted(set(MPE_AGENT_FEATURES) & set(TORCH_SCENARIOS)))
def test_reported_slices_hold_each_agents_position_and_velocity(name):
    env = make_env(f"torch:{name}", 3, seed=0)
    env.reset()
    g = torch.Generator().manual_seed(0)
    pos, vel = torch.randn(3, env.n_entities, 2, generator=g), torch.randn(3, env.n_entities, 2, generator=g)
    env.set_world(pos, vel)
    obs = env.observation()  # (E, N, obs_dim)
    N = env.n_agents
    for key, truth in (("pos", pos[:, :N]), ("vel", vel[:, :N])):
        if key in MPE_AGENT_FEATURES[name]:
            start, end = agent_feature_slices(f"torch:{name}")[key]
            torch.testing.assert_close(obs[..., start:end], truth)


@pytest.mark.parametrize("name", ["simple_spread", "collect_treasure"])
def test_reported_slices_match_mpe2(name):
    env = make_env(name, 1, seed=0)
    obs = env.reset()[0]  # (1, N, obs_dim)
    agents = env.envs[0].unwrapped.world.agents
    slices = agent_feature_slices(f"mpe2:{name}")
    for n, agent in enumerate(agents):
        for key, truth in (("pos", agent.state.p_pos), ("vel", agent.state.p_vel)):
            start, end = slices[key]
            assert obs[0, n, start:end].tolist() == pytest.approx(truth.tolist(), abs=1e-6)
    env.close()


def test_envs_without_known_positions_report_none():
    assert agent_feature_slices("torch:simple_adversary") == {} and agent_feature_slices("matrix_game") == {}
    assert agent_feature_slices("simple_reference") == {"vel": (0, 2)}


# ----------------------------------------------------------------------------- MAPPO / IPPO
RECURRENT = {"num_steps": 6, "chunk_len": 3, "total_timesteps": 24, "num_minibatches": 2}
SMOKE = [  # (algo, share_params, recurrent, topology)
    ("mappo", "all", "gru", "from_pos"),
    ("mappo", "none", "none", "full"),
    ("ippo", "all", "lstm", "full"),
    ("ippo", "none", "gru", "from_pos"),
]


@pytest.mark.parametrize("algo,share_params,recurrent,topology", SMOKE,
                         ids=[f"{a}-{s}-{r}-{t}" for a, s, r, t in SMOKE])
def test_smoke_gnn_actor_and_critic(tiny, algo, share_params, recurrent, topology):
    module = ALGOS[algo]
    args = tiny(module, env="torch:simple_spread", actor_model="gnn", critic_model="gnn", share_params=share_params,
                recurrent=recurrent, gnn_topology=topology, hidden_sizes=(16, 16), gnn_layers=2,
                **(RECURRENT if recurrent != "none" else {}))
    summary = module.main(args)
    check_summary(summary, algo, args)
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    assert any(k.startswith("net.gnn.1.") for k in ckpt["actor"])  # the GNN's two layers were saved
    assert any(k.startswith("net.gnn.1.") for k in ckpt["critic"])


@pytest.mark.parametrize("algo", ALGOS)
def test_gnn_first_update_step_reproduces_rollout_log_probs(tiny, algo):
    """As tests/test_algos.py's check for the MLP: the update's recurrent chunks, stored states,
    episode resets and per-step "from_pos" graphs rebuild exactly the rollout's log-probs."""
    args = tiny(ALGOS[algo], env="torch:simple_spread", actor_model="gnn", critic_model="gnn",
                gnn_topology="from_pos", gnn_edge_radius=1.0, recurrent="gru", num_steps=6, chunk_len=3,
                total_timesteps=36, update_epochs=1, num_minibatches=1, env_kwargs=("max_cycles=4",),
                learning_rate=0.05, anneal_lr=False)
    losses = ALGOS[algo].main(args)["final_losses"]
    assert losses["approx_kl"] < 1e-8 and losses["clipfrac"] == 0.0


def test_gnn_checkpoint_resume_and_evaluate(tiny):
    settings = dict(env="torch:simple_spread", actor_model="gnn", critic_model="gnn", gnn_topology="from_pos",
                    gnn_self_loops=True, recurrent="gru", **RECURRENT)
    per_iteration = 2 * 6
    first = mappo.main(tiny(mappo, **{**settings, "total_timesteps": 2 * per_iteration}))
    run_path = first["run_dir"]
    # tiny() sets num_steps again: give the run's own recurrent settings with the resume
    resumed = mappo.main(tiny(mappo, **{**RECURRENT, "total_timesteps": 3 * per_iteration}, resume=run_path))
    assert resumed["global_step"] == 3 * per_iteration and resumed["run_dir"] == run_path
    assert all(math.isfinite(v) for v in resumed["final_losses"].values())
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["args"]["actor_model"] == "gnn" and ckpt["args"]["gnn_topology"] == "from_pos"
    result = mappo.main(tiny(mappo, **RECURRENT, evaluate_checkpoint=run_path))  # rebuilds the GNN from saved args
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])


def test_mappo_and_ippo_share_the_gnn_options_and_builder():
    """The GNN options, their checks and graph_net are written once (common/gnn_args.py), as are the
    team options (common/groups.py): both files' Args subclass them and both build GNNs with one function."""
    assert mappo.graph_net is ippo.graph_net is gnn_args.graph_net
    for module in (mappo, ippo):
        assert issubclass(module.Args, gnn_args.GNNArgs) and issubclass(module.Args, GroupArgs)
