"""MultiAgentRolloutBuffer keeps every (t, e, n) element where it belongs.

Every stored value encodes its own coordinates (100 * t + 10 * e + n), so a transposed or
shifted axis shows up as a wrong number, not just a wrong shape.
"""
import pytest
import torch

from buffers import CORE_KEYS, MultiAgentRolloutBuffer

T, E, N, OBS, H = 4, 3, 2, 5, 6


def code(t, trailing=()):
    """(E, N, *trailing) tensor whose element [e, n, ...] is 100 * t + 10 * e + n."""
    e = torch.arange(E).view(E, 1, *([1] * len(trailing)))
    n = torch.arange(N).view(1, N, *([1] * len(trailing)))
    return (100 * t + 10 * e + n).float().expand(E, N, *trailing).clone()


def fill(buffer, steps=T, alive=None, offset=0.0):
    for t in range(steps):
        extras = dict(prev_hidden_states=code(t, (H,)) + 0.5)
        if alive is not None:
            extras["alive"] = alive[t]
        buffer.add_transition(
            states=code(t, (OBS,)) + offset, actions=code(t), rewards=code(t) + offset, next_states=code(t + 1, (OBS,)),
            dones=code(t) * 0, log_probs=code(t) - 0.25, state_values=code(t) + 0.75,
            next_state_values=code(t + 1) + 0.75, truncated=code(t) * 0, **extras)


def test_batch_round_trip_keeps_t_e_n_aligned():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    assert len(buffer) == T
    b = buffer.batch()
    assert set(CORE_KEYS) | {"prev_hidden_states"} == set(b)
    assert b["states"].shape == (T, E, N, OBS)
    assert b["prev_hidden_states"].shape == (T, E, N, H)
    for key in ("actions", "rewards", "log_probs", "state_values", "dones", "truncated", "next_state_values"):
        assert b[key].shape == (T, E, N), key
    for t in range(T):
        for e in range(E):
            for n in range(N):
                c = 100 * t + 10 * e + n
                assert torch.all(b["states"][t, e, n] == c)
                assert torch.all(b["next_states"][t, e, n] == c + 100)
                assert torch.all(b["prev_hidden_states"][t, e, n] == c + 0.5)
                assert b["actions"][t, e, n] == c
                assert b["rewards"][t, e, n] == c
                assert b["log_probs"][t, e, n] == c - 0.25
                assert b["state_values"][t, e, n] == c + 0.75
                assert b["next_state_values"][t, e, n] == c + 100.75


def test_batch_selected_keys_and_device():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    b = buffer.batch(torch.device("cpu"), keys=("rewards", "prev_hidden_states"))
    assert set(b) == {"rewards", "prev_hidden_states"}
    assert b["rewards"].device.type == "cpu"
    assert b["prev_hidden_states"][2, 1, 1, 0] == 100 * 2 + 10 * 1 + 1 + 0.5


def test_optional_fields_left_out_are_absent_from_batch():
    buffer = MultiAgentRolloutBuffer(N)
    for t in range(2):
        buffer.add_transition(states=code(t, (OBS,)), actions=code(t), rewards=code(t),
                              next_states=code(t + 1, (OBS,)), dones=code(t) * 0)
    b = buffer.batch()
    assert "log_probs" not in b and "state_values" not in b
    assert b["rewards"].shape == (2, E, N)


def test_per_agent_nested_lists():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    ep = buffer.current_episode
    assert len(ep["rewards"]) == N
    for n in range(N):
        assert len(ep["rewards"][n]) == T
        for t in range(T):
            assert ep["rewards"][n][t].shape == (E,)
            assert ep["states"][n][t].shape == (E, OBS)
            assert ep["extras"]["prev_hidden_states"][n][t].shape == (E, H)
            assert torch.equal(ep["rewards"][n][t], 100 * t + 10 * torch.arange(E).float() + n)


def test_end_episode_statistics_without_alive():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    ep = buffer.end_episode()
    # agent n: sum_t mean_e (100 t + 10 e + n) = 100 * (0+1+2+3) + 10 * mean(0,1,2) * T + n * T
    expected = [100 * sum(range(T)) + 10 * (E - 1) / 2 * T + n * T for n in range(N)]
    assert ep["episode_reward"] == pytest.approx(expected)
    assert ep["average_episode_reward"] == pytest.approx(sum(expected) / N)
    assert ep["episode_length"] == [T] * N
    assert ep["average_episode_length"] == T
    assert buffer.episodes[-1] is ep


def test_end_episode_length_counts_alive_steps():
    alive = torch.ones(T, E, N)
    alive[2:, 0, 1] = 0.0  # agent 1 dies after 2 steps in env 0
    alive[3:, 2, 1] = 0.0  # and after 3 steps in env 2
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer, alive=alive)
    ep = buffer.end_episode()
    assert ep["episode_length"] == pytest.approx([T, (2 + T + 3) / E])
    assert ep["average_episode_length"] == pytest.approx((T + (2 + T + 3) / E) / 2)


def test_reset_changes_agent_count_and_forgets():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    buffer.end_episode()
    buffer.reset(3)
    assert buffer.n_agents == 3 and len(buffer.episodes) == 0 and len(buffer) == 0
    assert len(buffer.current_episode["rewards"]) == 3
    with pytest.raises(ValueError, match="N=3"):
        fill(buffer)  # (E, 2, ...) data no longer fits
    x = torch.zeros(E, 3)
    buffer.add_transition(states=torch.zeros(E, 3, OBS), actions=x, rewards=x + 1, next_states=torch.zeros(E, 3, OBS),
                          dones=x)
    assert buffer.batch()["rewards"].shape == (1, E, 3)


def test_capacity_keeps_newest_episodes():
    buffer = MultiAgentRolloutBuffer(N, capacity=2)
    for i in range(3):
        buffer.reset_current_episode()
        fill(buffer, steps=1, offset=1000.0 * i)
        buffer.end_episode()
    assert len(buffer.episodes) == 2
    assert [float(ep["rewards"][0][0][0]) for ep in buffer.episodes] == [1000.0, 2000.0]


def test_sample_episodes_pads_and_marks_filled():
    buffer = MultiAgentRolloutBuffer(N)
    lengths = {0: 2, 1: 4}
    for i, steps in lengths.items():
        buffer.reset_current_episode()
        # rewards 1 + 1000 * episode + 100 t + 10 e + n: never 0 at a real step
        fill(buffer, steps=steps, offset=1000.0 * i + 1)
        buffer.end_episode()
    g = torch.Generator().manual_seed(0)
    batch = buffer.sample_episodes(32, generator=g)
    T_max = max(lengths.values())
    assert batch["rewards"].shape == (32, T_max, N)
    assert batch["states"].shape == (32, T_max, N, OBS)
    assert batch["prev_hidden_states"].shape == (32, T_max, N, H)
    assert batch["filled"].shape == (32, T_max)
    seen = set()
    for b in range(32):
        first = batch["rewards"][b, 0, 0].item()  # 1 + 1000 i + 10 e
        i, e = int(first // 1000), int((first - 1) % 1000 // 10)
        seen.add((i, e))
        steps = lengths[i]
        assert batch["filled"][b].tolist() == [1.0] * steps + [0.0] * (T_max - steps)
        for t in range(T_max):
            for n in range(N):
                want = 1 + 1000 * i + 100 * t + 10 * e + n if t < steps else 0.0
                assert batch["rewards"][b, t, n].item() == want
    assert {i for i, _ in seen} == {0, 1}  # both episode lengths drawn
    assert len(seen) > E  # several env copies drawn


def test_sample_episodes_needs_a_finished_episode():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    with pytest.raises(ValueError, match="end_episode"):
        buffer.sample_episodes(4)


def test_wrong_agent_axis_raises():
    buffer = MultiAgentRolloutBuffer(N)
    bad = torch.zeros(N, E)  # agents first: the wrong layout
    with pytest.raises(ValueError, match="expected"):
        buffer.add_transition(states=torch.zeros(E, N, OBS), actions=bad, rewards=bad,
                              next_states=torch.zeros(E, N, OBS), dones=bad)


def test_extra_appearing_mid_episode_raises():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer, steps=1)
    x = torch.zeros(E, N)
    with pytest.raises(ValueError, match="alive"):
        buffer.add_transition(states=torch.zeros(E, N, OBS), actions=x, rewards=x, next_states=torch.zeros(E, N, OBS),
                              dones=x, prev_hidden_states=torch.zeros(E, N, H), alive=torch.ones(E, N))


def test_batch_rejects_a_key_missing_from_some_steps():
    buf = MultiAgentRolloutBuffer(2)
    x = torch.zeros(3, 2)
    buf.add_transition(states=x, actions=x, rewards=x, next_states=x, dones=x, alive=x)
    buf.add_transition(states=x, actions=x, rewards=x, next_states=x, dones=x)  # alive left out
    with pytest.raises(ValueError, match="alive"):
        buf.batch()


@pytest.mark.parametrize("capacity", [3, None])
def test_sample_episodes_padded_store_matches_per_episode_padding(capacity):
    """The padded store (one index_select per key) returns exactly what slicing and padding each
    drawn episode returns, through evictions, slot reuse, longer episodes and a checkpoint."""
    torch.manual_seed(0)
    fast = MultiAgentRolloutBuffer(N, capacity=capacity)
    for i, steps in enumerate([4, 2, 6, 3, 5, 1, 6]):
        fast.reset_current_episode()
        fill(fast, steps=steps, offset=1000.0 * i + 1)
        fast.end_episode()
        if i == 2:
            fast.sample_episodes(4)  # builds the store from the first three; later ones join at the next draw
    assert len(fast.episodes) == (capacity or 7)
    slow = MultiAgentRolloutBuffer(N, capacity=capacity)
    slow._store_episode = lambda ep: None  # no episode gets a slot: sample_episodes pads episode by episode
    slow.load_state_dict(fast.state_dict())
    for keys in (None, ("rewards", "states")):
        a = fast.sample_episodes(64, torch.Generator().manual_seed(3), keys=keys)
        b = slow.sample_episodes(64, torch.Generator().manual_seed(3), keys=keys)
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    assert all("_slot" in ep for ep in fast.episodes) and not any("_slot" in ep for ep in slow.episodes)
    # the per-agent lists still read the stored values (views of the store)
    last = fast.episodes[-1]
    assert last["rewards"][1][0][2].item() == 1000.0 * 6 + 1 + 10 * 2 + 1


def test_on_policy_use_never_builds_the_replay_store():
    buffer = MultiAgentRolloutBuffer(N, capacity=1)
    for _ in range(3):
        buffer.reset_current_episode()
        fill(buffer)
        buffer.end_episode()
    assert not buffer._store and "_slot" not in buffer.episodes[-1]
