"""The env registry and the batched PettingZoo adapter: shapes, names, padding, auto-reset
with the true final observation, seeding, and the global state."""
import numpy as np
import pytest
from mpe2 import simple_speaker_listener_v4, simple_spread_v3

from envs import known_envs, make_env, parse_env_kwargs


def raw_obs(obs_dict, agents):
    return np.stack([np.asarray(obs_dict[a], np.float32) for a in agents])


# ----------------------------------------------------------------------------- shapes and names
def test_simple_spread_shapes():
    env = make_env("simple_spread", 2, seed=0)
    obs, state, mask = env.reset()
    assert (env.n_agents, env.obs_dim, env.state_dim, env.n_actions) == (3, 18, 54, 5)
    assert obs.shape == (2, 3, 18) and obs.dtype == np.float32
    assert state.shape == (2, 54) and state.dtype == np.float32
    assert mask.shape == (2, 3, 5) and mask.dtype == bool and mask.all()
    step = env.step(env.sample_actions(np.random.default_rng(0)))
    assert step.obs.shape == step.final_obs.shape == (2, 3, 18)
    assert step.state.shape == step.final_state.shape == (2, 54)
    for name in ("reward", "terminated", "truncated", "alive", "episode_return"):
        assert getattr(step, name).shape == (2, 3), name
    assert step.done.shape == step.episode_length.shape == (2,)
    assert step.action_mask.shape == (2, 3, 5)
    assert step.alive.all()  # nobody leaves an MPE episode early
    env.close()


@pytest.mark.parametrize("name", ["simple_spread", "simple_spread_v3", "mpe2:simple_spread", "mpe2:simple_spread_v3"])
def test_registry_spellings(name):
    env = make_env(name, 1, seed=0)
    assert env.n_agents == 3 and env.obs_dim == 18


def test_every_registered_scenario_resolves():
    from envs import NATIVE_ENVS, env_maker
    from envs.errors import EnvPackageMissing
    missing = []
    for name in set(known_envs()) - set(NATIVE_ENVS):
        if name.startswith("torch:smax_"):  # torch-native, no PettingZoo constructor: it builds itself
            assert make_env(name, 1).n_agents >= 1, name
            continue
        try:
            assert callable(env_maker(name)), name
        except EnvPackageMissing as err:  # an optional family not installed here (core install)
            missing.append(str(err))
    assert len(missing) < len(set(known_envs()) - set(NATIVE_ENVS)), "no scenario resolved"


def test_unknown_env_lists_known_names():
    with pytest.raises(ValueError) as err:
        make_env("nosuch", 1)
    msg = str(err.value)
    assert "known envs" in msg and "simple_spread" in msg and "simple_speaker_listener" in msg


def test_unknown_env_argument_lists_accepted_ones():
    with pytest.raises(ValueError) as err:
        make_env("simple_spread", 1, env_kwargs={"n_agents": 4})
    msg = str(err.value)
    assert "n_agents" in msg and "accepted" in msg
    for accepted in ("N", "max_cycles", "continuous_actions", "local_ratio"):
        assert accepted in msg


def test_env_kwargs_change_the_scenario():
    env = make_env("simple_spread", 2, seed=0, env_kwargs={"N": 4})
    obs, state, mask = env.reset()
    assert env.n_agents == 4 and obs.shape[:2] == (2, 4) and mask.shape == (2, 4, 5)
    assert state.shape == (2, 4 * env.obs_dim)


def test_parse_env_kwargs_types():
    parsed = parse_env_kwargs(["N=5", "local_ratio=0.5", "continuous_actions=true", "flag=False", "x=none",
                               "y=null", "name=abc", "tiny=1e-3"])
    assert parsed == {"N": 5, "local_ratio": 0.5, "continuous_actions": True, "flag": False, "x": None, "y": None,
                      "name": "abc", "tiny": 1e-3}
    assert type(parsed["N"]) is int and type(parsed["local_ratio"]) is float
    assert parse_env_kwargs([]) == {}


def test_parse_env_kwargs_bad_pair():
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_env_kwargs(["N5"])


# ----------------------------------------------------------------------------- heterogeneous agents
def test_speaker_listener_padding():
    env = make_env("simple_speaker_listener", 2, seed=3)
    assert env.obs_dims == [3, 11] and env.action_dims == [3, 5]
    assert env.obs_dim == 11 and env.n_actions == 5
    obs, state, mask = env.reset()
    assert obs.shape == (2, 2, 11)
    assert np.all(obs[:, 0, 3:] == 0.0)  # the speaker's padded slots
    assert np.any(obs[:, 0, :3] != 0.0)
    assert mask[:, 0].tolist() == [[True, True, True, False, False]] * 2
    assert mask[:, 1].all()
    # the unpadded parts are exactly what the raw env gives
    raw = simple_speaker_listener_v4.parallel_env()
    raw_o, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs[0, 0, :3], raw_o["speaker_0"])
    np.testing.assert_array_equal(obs[0, 1], raw_o["listener_0"])
    np.testing.assert_array_equal(state[0], raw.state())
    assert state.shape == (2, 14)
    rng = np.random.default_rng(0)
    for _ in range(5):
        actions = env.sample_actions(rng)
        assert np.all(actions[:, 0] < 3)  # padded actions are never sampled
        step = env.step(actions)
        assert np.all(step.obs[:, 0, 3:] == 0.0) and np.all(step.final_obs[:, 0, 3:] == 0.0)
        assert step.action_mask[:, 0, 3:].sum() == 0


# ----------------------------------------------------------------------------- auto-reset and final obs
def test_auto_reset_returns_true_final_obs():
    E, seed, cycles = 2, 11, 3
    env = make_env("simple_spread", E, seed=seed, env_kwargs={"max_cycles": cycles})
    env.reset()
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 5, size=(E, 3)) for _ in range(cycles)]
    rewards = np.zeros((E, 3))
    for t in range(cycles):
        step = env.step(actions[t])
        rewards += step.reward
        if t < cycles - 1:
            assert not step.done.any() and not step.truncated.any()
            np.testing.assert_array_equal(step.final_obs, step.obs)
    assert step.done.all()
    assert step.truncated.all() and not step.terminated.any()
    assert step.episode_length.tolist() == [cycles] * E
    np.testing.assert_allclose(step.episode_return, rewards, rtol=1e-6)
    assert not np.allclose(step.final_obs, step.obs)  # obs is already the next episode's first obs
    for i in range(E):
        raw = simple_spread_v3.parallel_env(max_cycles=cycles)
        raw.reset(seed=seed + i)
        for t in range(cycles):
            raw_o, *_ = raw.step({a: int(actions[t][i, n]) for n, a in enumerate(raw.possible_agents)})
        np.testing.assert_array_equal(step.final_obs[i], raw_obs(raw_o, raw.possible_agents))
        np.testing.assert_array_equal(step.final_state[i], raw_obs(raw_o, raw.possible_agents).reshape(-1))
        reset_o, _ = raw.reset()  # the adapter's auto-reset continues the copy's own generator
        np.testing.assert_array_equal(step.obs[i], raw_obs(reset_o, raw.possible_agents))
    # the statistics of the finished episode are not carried into the next one
    nxt = env.step(actions[0])
    assert not nxt.done.any() and nxt.episode_length.tolist() == [0] * E
    assert np.all(nxt.episode_return == 0.0)


# ----------------------------------------------------------------------------- seeding and state
def test_same_seed_same_obs_different_seed_different_obs():
    a, b, c = (make_env("simple_spread", 2, seed=s) for s in (5, 5, 6))
    oa, ob, oc = a.reset()[0], b.reset()[0], c.reset()[0]
    np.testing.assert_array_equal(oa, ob)
    assert not np.allclose(oa, oc)
    assert not np.allclose(oa[0], oa[1])  # copies differ from each other too
    acts = a.sample_actions(np.random.default_rng(1))
    np.testing.assert_array_equal(a.step(acts).obs, b.step(acts).obs)


def test_copy_i_is_seeded_with_seed_plus_i():
    seed, E = 20, 3
    obs, state, _ = make_env("simple_spread", E, seed=seed).reset()
    for i in range(E):
        raw = simple_spread_v3.parallel_env()
        raw_o, _ = raw.reset(seed=seed + i)
        np.testing.assert_array_equal(obs[i], raw_obs(raw_o, raw.possible_agents))
        np.testing.assert_array_equal(state[i], raw.state())


def test_state_is_concatenated_obs_and_raw_state():
    """The adapter builds mpe2's state from the observations (a shortcut); it must equal
    both the concatenation and what raw env.state() returns, after reset and after steps."""
    env = make_env("simple_spread", 2, seed=9)
    obs, state, _ = env.reset()
    np.testing.assert_array_equal(state, obs.reshape(2, -1))
    raw = simple_spread_v3.parallel_env()
    raw.reset(seed=9)
    rng = np.random.default_rng(2)
    for _ in range(4):
        acts = env.sample_actions(rng)
        step = env.step(acts)
        raw.step({a: int(acts[0, n]) for n, a in enumerate(raw.possible_agents)})
        np.testing.assert_array_equal(step.state, step.obs.reshape(2, -1))
        np.testing.assert_array_equal(step.state[0], raw.state())


# ----------------------------------------------------------------------------- continuous actions
def test_continuous_actions():
    env = make_env("simple_spread", 2, seed=0, env_kwargs=parse_env_kwargs(["continuous_actions=true"]))
    assert env.discrete is False and env.n_actions == 0 and env.action_dim == 5
    assert env.action_low.shape == env.action_high.shape == (3, 5)
    assert np.all(env.action_low == 0.0) and np.all(env.action_high == 1.0)
    obs, state, mask = env.reset()
    assert mask is None and obs.shape == (2, 3, 18)
    rng = np.random.default_rng(0)
    actions = env.sample_actions(rng)
    assert actions.shape == (2, 3, 5)
    assert np.all(actions >= -1.0) and np.all(actions <= 1.0)  # the normalised box
    # -1 -> low, 0 -> middle, +1 -> high, beyond the box -> clipped to the bounds
    normalised = np.array([-1.0, 0.0, 1.0, 3.0, -3.0], np.float32)
    assert np.allclose(env.to_env_units(normalised), [0.0, 0.5, 1.0, 1.0, 0.0])
    step = env.step(actions)
    assert step.action_mask is None and step.obs.shape == (2, 3, 18) and step.alive.all()
    step = env.step(actions * 10 - 5)  # out of bounds: clipped, not an error
    assert np.isfinite(step.obs).all() and np.isfinite(step.reward).all()


def test_continuous_actions_reach_the_env_in_its_own_units():
    """A normalised action a has the effect the raw env gives to low + (a + 1) / 2 * (high - low)."""
    from mpe2 import simple_spread_v3

    env = make_env("simple_spread", 1, seed=3, env_kwargs={"continuous_actions": True})
    env.reset()
    raw = simple_spread_v3.parallel_env(continuous_actions=True)
    raw.reset(seed=3)
    normalised = np.random.default_rng(0).uniform(-1, 1, (1, 3, 5)).astype(np.float32)
    in_units = env.to_env_units(normalised)
    step = env.step(normalised)
    raw_obs, *_ = raw.step({a: in_units[0, n] for n, a in enumerate(raw.agents)})
    assert np.allclose(step.obs[0], np.stack([raw_obs[a] for a in raw.possible_agents]), atol=1e-6)
