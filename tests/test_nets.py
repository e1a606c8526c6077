"""Network parts: ValueNorm, RunningNorm, batched per-agent layers, parameter sharing, masked action
distributions and recurrent cores with episode resets."""
import math

import pytest
import torch
from torch.distributions import Normal

from nets import (MLP, AgentLinear, AgentNet, Critic, MaskedCategorical, MaskedGaussian, RecurrentCore, RunningNorm,
                  ValueNorm)
from nets.layers import Tanh


# ----------------------------------------------------------------------------- ValueNorm
def test_value_norm_round_trip():
    vn = ValueNorm()
    vn.update(torch.randn(100) * 4 + 2)
    x = torch.randn(3, 4, 5) * 10
    torch.testing.assert_close(vn.denormalize(vn.normalize(x)), x, rtol=1e-5, atol=1e-4)
    assert not torch.allclose(vn.normalize(x), x)  # it does transform


def test_value_norm_tracks_mean_and_std():
    g = torch.Generator().manual_seed(0)
    vn = ValueNorm()
    for _ in range(200):
        vn.update(torch.randn(1000, generator=g) * 3 + 5)
    mean, var = vn.stats()
    assert mean.item() == pytest.approx(5.0, abs=0.05)
    assert var.sqrt().item() == pytest.approx(3.0, abs=0.05)
    data = torch.randn(20000, generator=g) * 3 + 5
    z = vn.normalize(data)
    assert z.mean().item() == pytest.approx(0.0, abs=0.05)
    assert z.std().item() == pytest.approx(1.0, abs=0.05)


def test_value_norm_statistics_are_saved_with_the_model():
    vn = ValueNorm()
    vn.update(torch.full((10,), 7.0))
    restored = ValueNorm()
    restored.load_state_dict(vn.state_dict())
    assert restored.stats()[0].item() == pytest.approx(7.0)


def test_running_norm_equals_the_statistics_of_everything_seen():
    """Batches folded in one by one give the mean and variance of all of them at once, per feature;
    a feature constant so far maps to 0, and a far outlier is clipped."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 3, generator=g) * torch.tensor([1.0, 10.0, 0.0]) + torch.tensor([0.0, 16.0, 2.0])
    norm = RunningNorm(3)
    for chunk in (x[:7], x[7:1000], x[1000:]):
        norm.update(chunk.view(-1, 1, 3))  # any leading shape
    torch.testing.assert_close(norm.mean, x.mean(0))
    torch.testing.assert_close(norm.var, x.var(0, unbiased=False), rtol=1e-4, atol=1e-6)
    z = norm(x)
    torch.testing.assert_close(z[:, :2].mean(0), torch.zeros(2), atol=1e-4, rtol=0)
    torch.testing.assert_close(z[:, :2].std(0), torch.ones(2), atol=1e-3, rtol=0)
    assert torch.equal(z[:, 2], torch.zeros(3000))
    assert norm(torch.tensor([0.0, 1e6, 2.0]))[1] == norm.clip
    restored = RunningNorm(3)
    restored.load_state_dict(norm.state_dict())
    assert torch.equal(restored(x), z)


# ----------------------------------------------------------------------------- per-agent layers
def test_agent_linear_equals_per_agent_loop():
    torch.manual_seed(0)
    layer = AgentLinear(3, 4, 5)
    with torch.no_grad():
        layer.bias.normal_()  # the init is zero; a wrong bias index would go unnoticed
    x = torch.randn(2, 7, 3, 4)  # (..., N, in)
    y = layer(x)
    assert y.shape == (2, 7, 3, 5)
    for n in range(3):
        expected = x[..., n, :] @ layer.weight[n] + layer.bias[n, 0]
        torch.testing.assert_close(y[..., n, :], expected)


def test_separate_agents_differ_for_the_same_input():
    torch.manual_seed(0)
    net = AgentNet(4, 3, n_agents=3, share_params=False, hidden_sizes=(16,))
    x = torch.randn(1, 2, 1, 4).expand(1, 2, 3, 4)  # every agent sees the same input
    out, _ = net(x)
    assert out.shape == (1, 2, 3, 3)
    assert not torch.allclose(out[..., 0, :], out[..., 1, :])
    assert not torch.allclose(out[..., 1, :], out[..., 2, :])


def test_shared_params_with_agent_id_differ_per_agent():
    torch.manual_seed(0)
    net = AgentNet(4, 3, n_agents=3, share_params=True, hidden_sizes=(16,))
    x = torch.randn(1, 2, 1, 4).expand(1, 2, 3, 4)
    out, _ = net(x)
    assert not torch.allclose(out[..., 0, :], out[..., 1, :])
    assert not torch.allclose(out[..., 1, :], out[..., 2, :])
    # Control: a shared MLP without the one-hot cannot tell the agents apart.
    plain = MLP(4, (16,), 3)
    same = plain(x)
    torch.testing.assert_close(same[..., 0, :], same[..., 1, :])


# ----------------------------------------------------------------------------- distributions
def test_tanh_is_torch_tanh_to_rounding_with_its_first_and_second_derivatives():
    """nets.layers.Tanh computes 2 sigmoid(2x) - 1 on the CPU (torch's tanh kernel there is scalar):
    values within 2e-7 of torch.tanh, and the same first and second derivatives (TRPO's Fisher
    products differentiate twice)."""
    x = torch.linspace(-12, 12, 100_001)
    y = Tanh()(x)
    assert (y - torch.tanh(x)).abs().max() <= 2e-7 and y.abs().max() <= 1.0
    x = torch.randn(50, dtype=torch.double, requires_grad=True)
    (g,) = torch.autograd.grad(Tanh()(x).sum(), x, create_graph=True)
    (g_ref,) = torch.autograd.grad(torch.tanh(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, g_ref)
    torch.testing.assert_close(torch.autograd.grad(g.sum(), x)[0], torch.autograd.grad(g_ref.sum(), x)[0])


@pytest.mark.parametrize("share", [True, False])
def test_one_input_for_every_agent_gives_the_values_of_its_copies(share):
    """A centralised critic's global state given once, (L, B, 1, D), gives what the same state copied
    to each agent, (L, B, N, D), gives: a shared network runs its first layer once per row and adds
    each agent's one-hot column; separate networks get the copies. And that first layer equals the
    network on [x, one-hot] that it replaces, gradients included."""
    torch.manual_seed(0)
    critic = Critic(7, 3, share_params=share)
    state = torch.randn(2, 5, 1, 7)
    torch.testing.assert_close(critic(state)[0], critic(state.expand(2, 5, 3, 7))[0])
    if share:
        net = critic.net
        assert net.reads_one_input
        x = torch.cat([state.expand(2, 5, 3, 7), torch.eye(3).expand(2, 5, 3, 3)], -1)  # what the layer replaces
        by_cat = net.head(net.body(x)).squeeze(-1)
        torch.testing.assert_close(critic(state)[0], by_cat)
        grads = torch.autograd.grad(critic(state)[0].square().sum(), list(critic.parameters()))
        grads_cat = torch.autograd.grad(by_cat.square().sum(), list(critic.parameters()))
        for a, b in zip(grads, grads_cat):
            torch.testing.assert_close(a, b)


def test_masked_categorical_never_samples_masked_actions():
    torch.manual_seed(0)
    logits = torch.randn(500, 3, 5) * 3
    mask = torch.rand(500, 3, 5) < 0.5
    mask[..., 2] = True  # at least one valid action everywhere
    dist = MaskedCategorical(logits, mask)
    for _ in range(5):
        assert mask.gather(-1, dist.sample().unsqueeze(-1)).all()
    assert mask.gather(-1, dist.mode().unsqueeze(-1)).all()
    ent = dist.entropy()
    assert ent.shape == (500, 3) and torch.isfinite(ent).all() and (ent >= -1e-6).all()
    # entropy equals that of a Categorical over the valid actions only
    row_logits, row_mask = logits[0, 0], mask[0, 0]
    ref = torch.distributions.Categorical(logits=row_logits[row_mask]).entropy()
    torch.testing.assert_close(ent[0, 0], ref)


def test_masked_categorical_single_valid_action():
    mask = torch.tensor([[False, False, True, False]])
    dist = MaskedCategorical(torch.randn(1, 4), mask)
    assert dist.entropy().item() == pytest.approx(0.0, abs=1e-6)
    assert dist.log_prob(torch.tensor([2])).item() == pytest.approx(0.0, abs=1e-6)
    assert dist.sample().item() == 2


def test_masked_categorical_gradient_is_finite():
    logits = torch.randn(4, 5, requires_grad=True)
    mask = torch.tensor([[True, True, True, False, False]]).expand(4, 5)
    dist = MaskedCategorical(logits, mask)
    (dist.entropy().sum() + dist.log_prob(torch.zeros(4, dtype=torch.long)).sum()).backward()
    assert torch.isfinite(logits.grad).all()


def test_masked_gaussian_ignores_padded_dims():
    torch.manual_seed(0)
    dim_mask = torch.tensor([[True, True, True], [True, False, False]])  # agent 1 has one real dimension
    mean = torch.randn(4, 2, 3)
    log_std = torch.randn(2, 3) * 0.3
    dist = MaskedGaussian(mean, log_std, dim_mask)
    action = torch.randn(4, 2, 3)
    lp = dist.log_prob(action)
    assert lp.shape == (4, 2)
    std = log_std.exp()
    torch.testing.assert_close(lp[:, 0], Normal(mean[:, 0], std[0]).log_prob(action[:, 0]).sum(-1))
    torch.testing.assert_close(lp[:, 1], Normal(mean[:, 1, 0], std[1, 0]).log_prob(action[:, 1, 0]))
    moved = action.clone()
    moved[:, 1, 1:] += 100.0  # only padded dimensions change
    torch.testing.assert_close(dist.log_prob(moved), lp)
    ent = dist.entropy()
    expected_ent1 = 0.5 * math.log(2 * math.pi * math.e) + log_std[1, 0]
    torch.testing.assert_close(ent[:, 1], expected_ent1.expand(4))


# ----------------------------------------------------------------------------- recurrent cores
@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("n_agents", [None, 3], ids=["shared", "separate"])
def test_recurrent_start_resets_state(kind, n_agents):
    torch.manual_seed(0)
    core = RecurrentCore(4, 8, kind, n_agents)
    B, N = 2, 3
    x = torch.randn(1, B, N, 4)
    junk = tuple(torch.randn(B, N, 8) for _ in range(core.n_states))
    zero = core.initial_state(B, N)
    out_reset, state_reset = core(x, junk, torch.ones(1, B, N))
    out_zero, state_zero = core(x, zero, torch.zeros(1, B, N))
    torch.testing.assert_close(out_reset, out_zero)
    for a, b in zip(state_reset, state_zero):
        torch.testing.assert_close(a, b)
    out_kept, _ = core(x, junk, torch.zeros(1, B, N))
    assert not torch.allclose(out_kept, out_zero)  # without a start the old state matters


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("n_agents", [None, 3], ids=["shared", "separate"])
def test_recurrent_sequence_equals_stepping(kind, n_agents):
    torch.manual_seed(1)
    core = RecurrentCore(4, 8, kind, n_agents)
    L, B, N = 6, 2, 3
    x = torch.randn(L, B, N, 4)
    starts = torch.zeros(L, B, N)
    starts[0] = 1.0
    starts[3, 1] = 1.0  # env copy 1 starts a new episode mid-sequence
    init = tuple(torch.randn(B, N, 8) for _ in range(core.n_states))
    out_seq, final_seq = core(x, init, starts)
    assert out_seq.shape == (L, B, N, 8)
    state, outs = init, []
    for t in range(L):
        out, state = core(x[t:t + 1], state, starts[t:t + 1])
        outs.append(out[0])
    torch.testing.assert_close(out_seq, torch.stack(outs))
    for a, b in zip(final_seq, state):
        torch.testing.assert_close(a, b)
    # after the mid-sequence start, copy 1 behaves as if its episode began there
    fresh, _ = core(x[3:, 1:2], core.initial_state(1, N), torch.zeros(L - 3, 1, N))
    torch.testing.assert_close(out_seq[3:, 1:2], fresh)


def test_masked_categorical_samples_follow_the_probabilities():
    """The Gumbel-max sampler draws from the same distribution as the probabilities say."""
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 0.5]])
    mask = torch.tensor([[True, True, True, True, False]])
    dist = MaskedCategorical(logits.expand(200_000, 5), mask.expand(200_000, 5))
    counts = torch.bincount(dist.sample(), minlength=5).float() / 200_000
    assert counts[4] == 0.0
    assert torch.allclose(counts, dist.probs[0], atol=0.005)


# ----------------------------------------------------------------------------- one agent of a stacked actor
@pytest.mark.parametrize("discrete,recurrent,obs_shape", [(True, "none", (7,)), (True, "gru", (7,)),
                                                         (False, "none", (7,)), (True, "none", (5, 5, 3)),
                                                         (False, "gru", (5, 5, 3))])
def test_forward_agent_equals_its_slot_of_the_full_call_and_trains_only_its_rows(discrete, recurrent, obs_shape):
    """nets.forward_agent runs agent n of a separate-parameter actor alone: the same distribution as
    slot n of the full call (masks, recurrent state, padded action dimensions and the true-size
    frames of the weights cut with it), and a
    loss on it moves only agent n's parameters. Image observations (a CNN with grouped convolutions
    in front) take the full call and cut its distribution: the same numbers."""
    from nets import Actor, forward_agent

    torch.manual_seed(0)
    N, A, L, B = 3, 4, 5, 6
    dim_mask = torch.ones(N, A, dtype=torch.bool)
    dim_mask[2, 3] = False  # agent 2 has one dimension fewer
    actor = Actor(obs_shape if len(obs_shape) == 3 else obs_shape[0], N, discrete, A, dim_mask, False, (16, 16),
                  recurrent, obs_sizes=[7, 5, 6])  # true sizes: flat inputs cut to them, images read whole
    obs, starts = torch.rand(L, B, N, *obs_shape), (torch.rand(L, B, N) < 0.2).float()
    mask = torch.rand(L, B, N, A) < 0.7
    mask[..., 0] = True
    state = actor.initial_state(B)
    state = None if state is None else tuple(torch.randn_like(s) for s in state)
    full, full_state = actor(obs, state, starts, mask if discrete else None)
    actions = full.sample()
    for n in range(N):
        mine, my_state = forward_agent(actor, n, obs, state, starts, mask if discrete else None)
        one = slice(n, n + 1)
        torch.testing.assert_close(mine.log_prob(actions[:, :, one]), full.log_prob(actions)[:, :, one])
        torch.testing.assert_close(mine.entropy(), full.entropy()[:, :, one])
        if recurrent != "none":
            torch.testing.assert_close(my_state[0], full_state[0][:, one])
    actor.zero_grad()
    dist, _ = forward_agent(actor, 1, obs, state, starts, mask if discrete else None)
    dist.log_prob(actions[:, :, 1:2]).sum().backward()
    for name, p in actor.named_parameters():
        rows = p.grad.reshape(N, -1)  # the agent axis first (a grouped conv's N * channels too)
        assert rows[1].abs().sum() > 0, name
        assert rows[0].abs().sum() == 0 and rows[2].abs().sum() == 0, name
    shared = Actor(7, N, True, A, torch.ones(N, A, dtype=torch.bool), True, (16,))
    with pytest.raises(ValueError, match="one parameter set per agent"):
        forward_agent(shared, 0, torch.randn(L, B, N, 7))


def test_q_network_per_group_is_sized_to_its_true_observations_and_actions():
    """QPolicy with a set per group over agents of different sizes (2 agents with 3 inputs and 2
    actions, 1 with 6 and 4): the one-hot of the previous action, the observation and the Q head of
    the small group are cut to its sizes, so padded inputs change nothing and its padded actions'
    Q-values are exactly 0 (never chosen: their action mask is False)."""
    from nets import QPolicy

    torch.manual_seed(0)
    q = QPolicy(6, 4, 3, [0, 0, 1], 16, "gru", last_action_input=True, obs_sizes=[3, 3, 6], action_sizes=[2, 2, 4])
    obs, starts = torch.zeros(2, 5, 3, 6), torch.zeros(2, 5, 3)
    obs[..., :2, :3] = torch.randn(2, 5, 2, 3)
    obs[..., 2, :] = torch.randn(2, 5, 6)
    last = torch.zeros(2, 5, 3, 4)
    last[..., :2, :2] = torch.nn.functional.one_hot(torch.randint(0, 2, (2, 5, 2)), 2).float()
    state = q.net.initial_state(5)
    values, _ = q.q_values(obs, last, state, starts)
    assert not values[..., :2, 2:].any() and values[..., 2, :].abs().sum() > 0
    noisy, noisy_last = obs.clone(), last.clone()
    noisy[..., :2, 3:] = 50.0
    noisy_last[..., :2, 2:] = 1.0
    torch.testing.assert_close(q.q_values(noisy, noisy_last, state, starts)[0], values)
    first = q.net.body.net[0]  # rows: 6 obs | 4 last action | 3 one-hot
    assert not first.weight[0, [3, 4, 5, 8, 9, 12]].any() and first.weight[1, [0, 5, 9, 12]].abs().sum(-1).all()
