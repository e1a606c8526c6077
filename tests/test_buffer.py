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
            obs=code(t, (OBS,)) + offset, actions=code(t), rewards=code(t) + offset, next_obs=code(t + 1, (OBS,)),
            terminated=code(t) * 0, log_probs=code(t) - 0.25, values=code(t) + 0.75, truncated=code(t) * 0,
            team=dict(global_states=code(t, (OBS,))[:, 0] + 0.25), final_values=code(t + 1) + 0.75, **extras)


def test_batch_round_trip_keeps_t_e_n_aligned():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    assert len(buffer) == T
    b = buffer.batch()
    assert set(CORE_KEYS) | {"prev_hidden_states", "final_values", "global_states"} == set(b)
    assert b["obs"].shape == (T, E, N, OBS)
    assert b["prev_hidden_states"].shape == (T, E, N, H)
    assert b["global_states"].shape == (T, E, OBS)  # a team entry: stored once, no agent axis
    for key in ("actions", "rewards", "log_probs", "values", "terminated", "truncated", "final_values"):
        assert b[key].shape == (T, E, N), key
    for t in range(T):
        for e in range(E):
            for n in range(N):
                c = 100 * t + 10 * e + n
                assert torch.all(b["obs"][t, e, n] == c)
                assert torch.all(b["next_obs"][t, e, n] == c + 100)
                assert torch.all(b["global_states"][t, e] == 100 * t + 10 * e + 0.25)
                assert torch.all(b["prev_hidden_states"][t, e, n] == c + 0.5)
                assert b["actions"][t, e, n] == c
                assert b["rewards"][t, e, n] == c
                assert b["log_probs"][t, e, n] == c - 0.25
                assert b["values"][t, e, n] == c + 0.75
                assert b["final_values"][t, e, n] == c + 100.75


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
        buffer.add_transition(obs=code(t, (OBS,)), actions=code(t), rewards=code(t),
                              next_obs=code(t + 1, (OBS,)), terminated=code(t) * 0)
    b = buffer.batch()
    assert "log_probs" not in b and "values" not in b
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
            assert ep["obs"][n][t].shape == (E, OBS)
            assert ep["extras"]["prev_hidden_states"][n][t].shape == (E, H)
            assert torch.equal(ep["rewards"][n][t], 100 * t + 10 * torch.arange(E).float() + n)
    assert len(ep["team"]["global_states"]) == T and ep["team"]["global_states"][1].shape == (E, OBS)


def test_end_episode_hands_over_an_episode_later_writes_cannot_change():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer)
    ep = buffer.end_episode()
    assert buffer.episodes[-1] is ep and len(buffer) == 0  # a new, empty current episode
    fill(buffer, steps=2, offset=5000.0)  # written before anyone resets the current episode
    assert len(ep["rewards"][0]) == T and ep["rewards"].stack().amax() < 5000
    assert len(buffer) == 2


def test_episode_keys_of_one_name_are_refused():
    buffer = MultiAgentRolloutBuffer(N)
    x = torch.zeros(E, N)
    buffer.add_transition(obs=x, actions=x, rewards=x, next_obs=x, terminated=x, alive=x, team=dict(alive=x[:, 0]))
    with pytest.raises(ValueError, match="alive"):
        buffer.batch()


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
    buffer.add_transition(obs=torch.zeros(E, 3, OBS), actions=x, rewards=x + 1, next_obs=torch.zeros(E, 3, OBS),
                          terminated=x)
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
    assert batch["obs"].shape == (32, T_max, N, OBS)
    assert batch["global_states"].shape == (32, T_max, OBS)
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
        buffer.add_transition(obs=torch.zeros(E, N, OBS), actions=bad, rewards=bad,
                              next_obs=torch.zeros(E, N, OBS), terminated=bad)


def test_extra_appearing_mid_episode_raises():
    buffer = MultiAgentRolloutBuffer(N)
    fill(buffer, steps=1)
    x = torch.zeros(E, N)
    with pytest.raises(ValueError, match="alive"):
        buffer.add_transition(obs=torch.zeros(E, N, OBS), actions=x, rewards=x, next_obs=torch.zeros(E, N, OBS),
                              terminated=x, prev_hidden_states=torch.zeros(E, N, H), alive=torch.ones(E, N))


def test_batch_rejects_a_key_missing_from_some_steps():
    buf = MultiAgentRolloutBuffer(2)
    x = torch.zeros(3, 2)
    buf.add_transition(obs=x, actions=x, rewards=x, next_obs=x, terminated=x, alive=x)
    buf.add_transition(obs=x, actions=x, rewards=x, next_obs=x, terminated=x)  # alive left out
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
    slow.load_state_dict(fast.state_dict())
    slow.store.put = lambda stacked: None  # no episode gets a slot: sample_episodes pads episode by episode
    for keys in (None, ("rewards", "obs", "global_states")):
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
    assert not buffer.store.tensors and "_slot" not in buffer.episodes[-1]


def test_stored_sequences_counts_every_env_copy_of_every_episode():
    buffer = MultiAgentRolloutBuffer(N, capacity=2)
    assert buffer.stored_sequences == 0
    for _ in range(3):
        fill(buffer, steps=2)
        buffer.end_episode()
    assert buffer.stored_sequences == 2 * E


def test_a_replay_saved_under_the_notes_names_loads_under_the_new_ones():
    """Checkpoints written before the keys were renamed (states, next_states, dones, state_values;
    per-agent statistics) resume: their episodes load under obs, next_obs, terminated, values."""
    x = torch.arange(T * E * N, dtype=torch.float32).view(T, E, N)
    old = {"n_agents": N, "capacity": 4, "episodes": [{
        "core": {"states": x[..., None].expand(T, E, N, OBS).clone(), "actions": x, "rewards": x + 1,
                 "next_states": x[..., None].expand(T, E, N, OBS) + 1, "dones": x * 0},
        "extras": {"alive": torch.ones(T, E, N)}, "episode_length": [T] * N, "episode_reward": [0.0] * N,
        "average_episode_length": float(T), "average_episode_reward": 0.0}]}
    buffer = MultiAgentRolloutBuffer(N)
    buffer.load_state_dict(old)
    batch = buffer.sample_episodes(8, torch.Generator().manual_seed(0))
    assert {"obs", "next_obs", "terminated", "rewards", "alive", "filled"} <= set(batch)
    assert batch["obs"].shape == (8, T, N, OBS) and torch.equal(batch["rewards"][..., 0] - 1, batch["obs"][..., 0, 0])
