"""Mixers: VDN is the sum, QMIX is monotone in every agent's Q, QPLEX keeps the individually
greedy joint action optimal for Q_tot (IGM); shapes with leading axes are kept."""
import itertools

import pytest
import torch

from nets.mixers import NonMonotonicMixer, QMixer, QPLEXMixer, VDNMixer

N, S, A = 3, 7, 4


def test_vdn_is_the_sum():
    qs = torch.randn(5, 2, N)
    assert torch.allclose(VDNMixer()(qs, torch.randn(5, 2, S)), qs.sum(-1))


@pytest.mark.parametrize("seed", range(3))
def test_qmix_is_non_decreasing_in_every_agent_q(seed):
    torch.manual_seed(seed)
    mixer = QMixer(N, S)
    qs = torch.randn(64, N, requires_grad=True)
    state = torch.randn(64, S)
    mixer(qs, state).sum().backward()
    assert (qs.grad >= 0).all()
    # and directly: raising one agent's Q never lowers Q_tot
    with torch.no_grad():
        base = mixer(qs, state)
        for i in range(N):
            bumped = qs.clone()
            bumped[:, i] += torch.rand(64) * 3
            assert (mixer(bumped, state) >= base - 1e-6).all()


def test_qmix_depends_on_the_state_and_keeps_leading_axes():
    mixer = QMixer(N, S)
    qs = torch.randn(6, 4, N)
    out = mixer(qs, torch.randn(6, 4, S))
    assert out.shape == (6, 4)
    assert not torch.allclose(mixer(qs, torch.randn(6, 4, S)), out)


@pytest.mark.parametrize("mixer_class", [QMixer, NonMonotonicMixer])
def test_qmix_mixing_equals_the_batched_matrix_products(mixer_class):
    """The mixers multiply and sum row by row (cheaper than torch.bmm on the CPU): the same numbers as
    Q_tot = elu(Q W1 + b1) W2 + b2 written with bmm, and the same gradients, to float rounding."""
    torch.manual_seed(0)
    mixer = mixer_class(N, S, embed_dim=8, hypernet_hidden=16)
    qs, state = torch.randn(5, 4, N, requires_grad=True), torch.randn(5, 4, S)
    sign = torch.abs if mixer_class is QMixer else (lambda w: w)
    flat_q, flat_s = qs.reshape(-1, N), state.reshape(-1, S)
    w1 = sign(mixer.hyper_w1(flat_s)).view(-1, N, 8)
    hidden = torch.nn.functional.elu(torch.bmm(flat_q.unsqueeze(1), w1) + mixer.hyper_b1(flat_s).unsqueeze(1))
    expected = (torch.bmm(hidden, sign(mixer.hyper_w2(flat_s)).unsqueeze(-1)).view(-1)
                + mixer.hyper_b2(flat_s).view(-1)).view(5, 4)
    got = mixer(qs, state)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    (grad_got,) = torch.autograd.grad(got.sum(), qs)
    (grad_expected,) = torch.autograd.grad(expected.sum(), qs)
    torch.testing.assert_close(grad_got, grad_expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_qplex_individually_greedy_joint_action_maximises_q_tot(seed):
    """IGM: for random utility tables, Q_tot at the joint action of individual argmaxes is at
    least Q_tot at every other joint action, and equals sum_i V_i there."""
    torch.manual_seed(seed)
    mixer = QPLEXMixer(N, S, A)
    table = torch.randn(N, A)  # Q_i(a_i)
    state = torch.randn(1, S)
    greedy = table.argmax(-1)
    values = []
    for joint in itertools.product(range(A), repeat=N):
        joint = torch.tensor(joint)
        qs = table[torch.arange(N), joint][None]  # (1, N)
        onehot = torch.nn.functional.one_hot(joint, A).float()[None]  # (1, N, A)
        values.append((mixer(qs, state, onehot, table.max(-1).values[None]).item(), tuple(joint.tolist())))
    best_value, best_joint = max(values)
    assert best_joint == tuple(greedy.tolist())
    assert all(v <= best_value + 1e-5 for v, _ in values)


def test_qplex_shapes_and_gradients():
    mixer = QPLEXMixer(N, S, A)
    qs = torch.randn(5, 2, N, requires_grad=True)
    out = mixer(qs, torch.randn(5, 2, S), torch.nn.functional.one_hot(torch.randint(A, (5, 2, N)), A).float(),
                qs.detach() + 1.0)
    assert out.shape == (5, 2)
    out.sum().backward()
    assert torch.isfinite(qs.grad).all() and qs.grad.abs().sum() > 0


def test_qplex_utilities_learn_through_the_weighted_sum_not_through_lambda():
    """The advantage enters Q_tot behind a stopped gradient (the QPLEX code's `is_minus_one` form):
    dQ_tot/dQ_i is the positive transformation weight w_i(s), whatever lambda_i is, while the value is
    still sum_i V_i + sum_i lambda_i A_i."""
    torch.manual_seed(0)
    mixer = QPLEXMixer(N, S, A)
    state = torch.randn(7, S)
    qs = torch.randn(7, N, requires_grad=True)
    max_qs = qs.detach() + torch.rand(7, N)  # V_i >= Q_i
    onehot = torch.nn.functional.one_hot(torch.randint(A, (7, N)), A).float()
    out = mixer(qs, state, onehot, max_qs)
    out.sum().backward()
    w = mixer.weight(state).abs() + 1e-10
    assert torch.allclose(qs.grad, w, atol=1e-6)
    with torch.no_grad():  # the value: sum_i V_i + sum_i lambda_i A_i
        b = mixer.bias(state)
        joint = torch.cat([state, onehot.reshape(7, -1)], -1)
        key = mixer.key(state).abs().view(7, mixer.n_heads, 1)
        lam = (key * torch.sigmoid(mixer.agents(state).view(7, mixer.n_heads, N)
                                   + mixer.action(joint).view(7, mixer.n_heads, N))).sum(1) + 1e-10
        v = w * max_qs + b
        expected = v.sum(-1) + (lam * (w * qs + b - v)).sum(-1)
    assert torch.allclose(out.detach(), expected, atol=1e-5)
