"""GAE, rollout chunking and masked means, checked by hand and against one reference.

`compute_gae`, `to_chunks` and `masked_mean` are copied into every PPO file on purpose
(STYLE.md, "Duplication"); every copy is checked here against the same reference so that
the copies cannot drift.
"""
import pytest
import torch

from algos import ippo, mappo

ALGOS = [mappo, ippo]
GAMMA, LAM = 0.9, 0.8


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """One (env, agent) column at a time, plain python floats.

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)     (Schulman et al. 2016, eq. 16)
    A_t     = delta_t + gamma * lam * (1 - (terminated_t or truncated_t)) * A_{t+1}
    """
    T, E, N = len(rewards), len(rewards[0]), len(rewards[0][0])
    adv = [[[0.0] * N for _ in range(E)] for _ in range(T)]
    for e in range(E):
        for n in range(N):
            running = 0.0
            for t in reversed(range(T)):
                term, trunc = bool(terminated[t][e][n]), bool(truncated[t][e][n])
                bootstrap = 0.0 if term else gamma * next_values[t][e][n]
                delta = rewards[t][e][n] + bootstrap - values[t][e][n]
                running = delta + (0.0 if (term or trunc) else gamma * lam * running)
                adv[t][e][n] = running
    returns = [[[adv[t][e][n] + values[t][e][n] for n in range(N)] for e in range(E)] for t in range(T)]
    return adv, returns


def _hand_example():
    """T=3, E=2, N=2. Env 0: agent 0 terminates at t=1, agent 1 is truncated at t=1.
    Env 1: no episode ends; the rollout just stops after t=2."""
    r = [1.0, 2.0, 3.0]
    v = [0.5, 1.0, 1.5]
    nv = [1.0, 4.0, 2.0]  # nv[1] is V(final obs) of the cut episode, not V(reset obs) = v[2]
    rewards = torch.tensor([[[x, x], [x, x]] for x in r])  # (T, E, N)
    values = torch.tensor([[[x, x], [x, x]] for x in v])
    next_values = torch.tensor([[[x, x], [x, x]] for x in nv])
    terminated = torch.zeros(3, 2, 2)
    truncated = torch.zeros(3, 2, 2)
    terminated[1, 0, 0] = 1.0
    truncated[1, 0, 1] = 1.0
    # Worked by hand with gamma = 0.9, lambda = 0.8 (gamma * lambda = 0.72):
    #   t=2 (rollout end, every column): delta = 3 + 0.9 * 2.0 - 1.5 = 3.3, A = 3.3
    #   termination (env 0, agent 0):   t=1 delta = 2 + 0 - 1.0 = 1.0,       A = 1.0 (A_2 cut off)
    #                                   t=0 delta = 1 + 0.9 * 1.0 - 0.5 = 1.4, A = 1.4 + 0.72 * 1.0 = 2.12
    #   truncation (env 0, agent 1):    t=1 delta = 2 + 0.9 * 4.0 - 1.0 = 4.6, A = 4.6 (A_2 cut off)
    #                                   t=0 A = 1.4 + 0.72 * 4.6 = 4.712
    #   no boundary (env 1):            t=1 A = 4.6 + 0.72 * 3.3 = 6.976
    #                                   t=0 A = 1.4 + 0.72 * 6.976 = 6.42272
    expected = torch.tensor([
        [[2.12, 4.712], [6.42272, 6.42272]],
        [[1.0, 4.6], [6.976, 6.976]],
        [[3.3, 3.3], [3.3, 3.3]],
    ])
    return rewards, values, next_values, terminated, truncated, expected


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_gae_worked_by_hand(algo):
    rewards, values, next_values, terminated, truncated, expected = _hand_example()
    adv, ret = algo.compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, LAM)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(ret, expected + values, rtol=0, atol=1e-5)


def test_reference_matches_hand_example():
    rewards, values, next_values, terminated, truncated, expected = _hand_example()
    adv, _ = reference_gae(rewards.tolist(), values.tolist(), next_values.tolist(), terminated.tolist(),
                           truncated.tolist(), GAMMA, LAM)
    torch.testing.assert_close(torch.tensor(adv), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_terminal_step_ignores_next_value(algo):
    """At a terminated step the next value must not matter at all; at a truncated one it must."""
    rewards, values, next_values, terminated, truncated, _ = _hand_example()
    changed = next_values.clone()
    changed[1] += 100.0
    adv_a, _ = algo.compute_gae(rewards, values, next_values, terminated, truncated, GAMMA, LAM)
    adv_b, _ = algo.compute_gae(rewards, values, changed, terminated, truncated, GAMMA, LAM)
    assert torch.equal(adv_a[:, 0, 0], adv_b[:, 0, 0])  # terminated column: unchanged
    assert not torch.allclose(adv_a[:2, 0, 1], adv_b[:2, 0, 1])  # truncated column bootstraps
    # ...but nothing after the boundary leaks into the steps before it
    assert torch.equal(adv_a[2], adv_b[2])


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_terminated_and_truncated_together_is_termination(algo):
    r, v, nv = torch.ones(1, 1, 1), torch.zeros(1, 1, 1), torch.full((1, 1, 1), 50.0)
    both = torch.ones(1, 1, 1)
    adv, _ = algo.compute_gae(r, v, nv, both, both, GAMMA, LAM)
    assert adv.item() == pytest.approx(1.0)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_reference_on_random_inputs(algo, seed):
    g = torch.Generator().manual_seed(seed)
    T, E, N = 7, 3, 2
    rewards = torch.randn(T, E, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, E, N, generator=g, dtype=torch.float64)
    next_values = torch.randn(T, E, N, generator=g, dtype=torch.float64)
    terminated = (torch.rand(T, E, N, generator=g) < 0.2).double()
    truncated = (torch.rand(T, E, N, generator=g) < 0.2).double()
    gamma, lam = 0.97, 0.9
    adv, ret = algo.compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards.tolist(), values.tolist(), next_values.tolist(), terminated.tolist(),
                                     truncated.tolist(), gamma, lam)
    assert adv.shape == ret.shape == (T, E, N)
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor(ref_ret, dtype=torch.float64))


def test_gae_copies_agree():
    g = torch.Generator().manual_seed(5)
    tensors = [torch.randn(6, 2, 3, generator=g) for _ in range(3)]
    flags = [(torch.rand(6, 2, 3, generator=g) < 0.3).float() for _ in range(2)]
    a = mappo.compute_gae(*tensors, *flags, 0.99, 0.95)
    b = ippo.compute_gae(*tensors, *flags, 0.99, 0.95)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ----------------------------------------------------------------------------- to_chunks
@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_to_chunks_layout(algo):
    T, E, N, D, L = 6, 2, 3, 4, 3
    t = torch.arange(T)[:, None, None, None]
    e = torch.arange(E)[None, :, None, None]
    n = torch.arange(N)[None, None, :, None]
    d = torch.arange(D)[None, None, None, :]
    x = (1000 * t + 100 * e + 10 * n + d).float()  # (T, E, N, D), every element tells where it came from
    chunks = algo.to_chunks(x, L)
    S = (T // L) * E
    assert chunks.shape == (L, S, N, D)
    for s in range(S):
        for step in range(L):
            assert torch.equal(chunks[step, s], x[(s // E) * L + step, s % E]), (s, step)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_to_chunks_length_one_keeps_every_step(algo):
    x = torch.randn(5, 2, 3)
    chunks = algo.to_chunks(x, 1)
    assert chunks.shape == (1, 10, 3)
    assert torch.equal(chunks[0], x.reshape(10, 3))


@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_to_chunks_matches_episode_start_indexing(algo):
    """The recurrent update takes initial states as prev_states[::L] flattened; chunk s must
    start at exactly that step, or every sequence starts from the wrong hidden state."""
    T, E, N, H, L = 6, 2, 3, 4, 2
    prev = torch.randn(T, E, N, H)
    init = prev[::L].reshape(-1, N, H)  # (S, N, H), as in main()
    chunks = algo.to_chunks(prev, L)  # (L, S, N, H)
    assert torch.equal(chunks[0], init)


# ----------------------------------------------------------------------------- masked_mean
@pytest.mark.parametrize("algo", ALGOS, ids=lambda m: m.__name__)
def test_masked_mean(algo):
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert algo.masked_mean(x, mask).item() == pytest.approx(2.0)
    assert algo.masked_mean(x, torch.ones_like(x)).item() == pytest.approx(x.mean().item())
    # Nothing alive: zero, not NaN.
    assert algo.masked_mean(x, torch.zeros_like(x)).item() == 0.0
