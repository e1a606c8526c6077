"""The `jaxmarl:` family (envs/jaxmarl_vec.py): JaxMARL envs, E copies vectorised in JAX, as torch tensors.

`jaxmarl:smax_3m` is checked against JaxMARL's own `HeuristicEnemySMAX` called directly with the
keys the adapter derives from its seed: two copies, random legal actions, through several
auto-resets. Compiling costs seconds, so the tests share one env (a module fixture) and each
starts it again from its seed. They skip, with the pip line, where jaxmarl is not installed; the
missing-package error is checked everywhere.
"""
import importlib.util
import sys

import numpy as np
import pytest
import torch

from envs import EnvError, EnvPackageMissing, make_env
from envs.jaxmarl_vec import PIP_LINE

need_jaxmarl = pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None,
                                  reason=f"jaxmarl is not installed: {PIP_LINE}")
E, SEED = 4, 3


@pytest.fixture(scope="module")
def smax():
    return make_env("jaxmarl:smax_3m", num_envs=E, seed=SEED)


def restart(env, seed=SEED):
    """The env as if just built with `seed`, then reset."""
    return env.reset(seed=seed)


@need_jaxmarl
def test_shapes_and_dtypes(smax):
    obs, state, mask = restart(smax)
    assert (smax.n_agents, smax.discrete, smax.n_actions, smax.has_action_mask) == (3, True, 8, True)
    assert obs.shape == (E, 3, smax.obs_dim) == (E, 3, 75) and obs.dtype == torch.float32
    assert state.shape == (E, smax.state_dim) and state.dtype == torch.float32
    assert mask.shape == (E, 3, 8) and mask.dtype == torch.bool
    step = smax.step(smax.sample_actions(np.random.default_rng(0)))
    for field in ("reward", "terminated", "truncated", "alive"):
        assert getattr(step, field).shape == (E, 3), field
    assert step.reward.dtype == torch.float32 and step.terminated.dtype == step.alive.dtype == torch.bool
    assert step.done.shape == step.episode_won.shape == step.episode_length.shape == (E,)
    assert step.final_obs.shape == step.obs.shape and step.final_state.shape == step.state.shape


@need_jaxmarl
def test_smax_3m_is_jaxmarls_heuristic_enemy_smax_step_for_step(smax):
    """Copies 0 and 1 against JaxMARL called directly: its `step` with the same keys gives the same
    observations (after its auto-reset), world state, rewards, ends and legal actions; `alive` is
    the units' state before the step; a finished copy does not disturb the other."""
    import jax

    env = smax.env  # the same JaxMARL object the adapter vmaps
    obs, state, mask = restart(smax)
    keys = list(jax.random.split(jax.random.PRNGKey(SEED), E)[:2])
    ref = []
    for i in range(2):
        keys[i], reset_key = jax.random.split(keys[i])
        ref.append(env.reset(reset_key))
        ref_obs, ref_state = ref[i]
        np.testing.assert_array_equal(obs[i].numpy(), np.stack([ref_obs[a] for a in env.agents]))
        np.testing.assert_array_equal(state[i].numpy(), ref_obs["world_state"])
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(60):
        actions = smax.sample_actions(rng)
        step = smax.step(actions)
        for i in range(2):
            alive_before = np.asarray(ref[i][1].state.unit_alive[:3])
            keys[i], step_key = jax.random.split(keys[i])
            ref_obs, ref_state, rew, dones, _ = env.step(step_key, ref[i][1],
                                                         {a: actions[i, n].item() for n, a in enumerate(env.agents)})
            ref[i] = (ref_obs, ref_state)
            np.testing.assert_array_equal(step.obs[i].numpy(), np.stack([ref_obs[a] for a in env.agents]))
            np.testing.assert_array_equal(step.state[i].numpy(), ref_obs["world_state"])
            np.testing.assert_array_equal(step.reward[i].numpy(), np.stack([rew[a] for a in env.agents]))
            assert bool(step.done[i]) == bool(dones["__all__"])
            np.testing.assert_array_equal(step.alive[i].numpy(), alive_before)
            avail = env.get_avail_actions(ref_state)
            np.testing.assert_array_equal(step.action_mask[i].numpy(), np.stack([avail[a] for a in env.agents]) == 1)
            assert np.array_equal(smax.action_mask()[i].numpy(), step.action_mask[i].numpy())
            ends += int(step.done[i])
    assert ends >= 2  # the comparison went through auto-resets


@need_jaxmarl
def test_final_obs_is_the_last_one_where_a_copy_reset(smax):
    restart(smax)
    rng = np.random.default_rng(1)
    seen_end = False
    for t in range(80):
        step = smax.step(smax.sample_actions(rng))
        done = step.done
        same = (step.final_obs == step.obs).flatten(1).all(1)
        assert same[~done].all()  # copies that go on: final_obs is the obs
        if done.any():
            seen_end = True
            assert not same[done].any()  # reset copies: the last obs, not the new episode's first
            assert (step.episode_length[done] > 0).all() and (step.episode_length[~done] == 0).all()
            assert (step.final_state[done] != step.state[done]).any(1).all()
            # an episode ends with a side wiped out (terminated) or at the time limit (truncated)
            assert (step.terminated[done] | step.truncated[done]).all()
    assert seen_end


@need_jaxmarl
def test_same_seed_same_trajectory(smax):
    def run():
        obs, _, _ = restart(smax)
        rng, out = np.random.default_rng(2), [obs]
        for _ in range(20):
            step = smax.step(smax.sample_actions(rng))
            out += [step.obs, step.reward, step.final_obs]
        return out

    first, second = run(), run()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    obs_other_seed, _, _ = restart(smax, seed=SEED + 1)
    assert not torch.equal(obs_other_seed, first[0])
    assert not torch.equal(first[0][0], first[0][1])  # each copy its own key


@need_jaxmarl
def test_episode_won_on_a_forced_win_and_loss(smax):
    restart(smax)
    smax.take_episode_wins()  # drain what earlier tests counted
    jaxmarl_state = smax.jaxmarl_state
    units = jaxmarl_state.state
    health = units.unit_health.at[:2, 3:].set(0.0).at[2:, :3].set(0.0)  # copies 0-1: enemies dead; 2-3: allies
    smax.set_jaxmarl_state(jaxmarl_state.replace(state=units.replace(unit_health=health)))
    stop = torch.full((E, 3), 4)  # SMAX's stop action, always legal
    step = smax.step(stop)
    assert step.done.all()
    assert step.episode_won.tolist() == [True, True, False, False]
    assert step.terminated.all() and not step.truncated.any()
    assert smax.take_episode_wins() == (2, 4) and smax.take_episode_wins() == (0, 0)
    assert (step.reward[:2] >= 1.0).all() and (step.reward[2:] < 1.0).all()  # the won-battle bonus


@need_jaxmarl
def test_names_maps_and_arguments():
    from envs import env_arguments
    from envs.jaxmarl_vec import jaxmarl_names, smax_maps

    names = jaxmarl_names()
    assert "jaxmarl:smax_3m" in names and "jaxmarl:MPE_simple_spread_v3" in names
    assert {"3m", "2s3z", "3s5z", "5m_vs_6m", "smacv2_5_units"} <= set(smax_maps())
    accepted = env_arguments("jaxmarl:smax_3m")
    assert accepted["max_steps"] == 100 and accepted["continuous_actions"] is False
    assert "num_allies" not in accepted and "scenario" not in accepted  # the map sets those


@need_jaxmarl
@pytest.mark.parametrize("name, kwargs, words", [
    ("jaxmarl:smax_4m", {}, ["unknown SMAX map '4m'", "3m", "2s3z", "did you mean"]),
    ("jaxmarl:smax_3m", {"max_step": 50}, ["does not take", "did you mean 'max_steps'"]),
    ("jaxmarl:smax_3m", {"max_steps": "long"}, ["max_steps must be an integer"]),
    ("jaxmarl:smax_3m", {"max_steps": 0}, ["max_steps must be at least 1"]),
    ("jaxmarl:MPE_simple_sprad_v3", {}, ["did you mean 'jaxmarl:MPE_simple_spread_v3'"]),
    ("jaxmarl:storm", {}, ["not supported", "not one array per agent"]),
    ("jaxmarl:LearnedPolicyEnemySMAX", {}, ["trained enemy policy"]),
])
def test_bad_input_fails_before_building(name, kwargs, words):
    with pytest.raises(EnvError) as err:
        make_env(name, 2, env_kwargs=kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)


@need_jaxmarl
def test_mabrax_without_brax_names_its_install_line():
    if importlib.util.find_spec("brax") is not None:
        pytest.skip("brax is installed here")
    with pytest.raises(EnvPackageMissing, match=r"brax.*jaxmarl\[mabrax\]"):
        make_env("jaxmarl:ant_4x2", 2)


def test_missing_package_gives_the_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)  # `import jaxmarl` now raises ImportError
    monkeypatch.setitem(sys.modules, "jaxmarl.environments", None)
    with pytest.raises(EnvPackageMissing) as err:
        make_env("jaxmarl:smax_3m", 2)
    assert PIP_LINE in str(err.value)
