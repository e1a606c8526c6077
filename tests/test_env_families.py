"""The LBF, RWARE, MaMuJoCo and VMAS families behind the batched adapter: shapes, seeding, auto-reset
with the true final observation, padding with true sizes, the errors for spaces and names the adapters
cannot take, and smoke runs of IPPO, MAPPO (every family) and QMIX (the discrete ones). A family's
tests skip, saying which package is missing, only where that package is not installed."""
import importlib.util
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from algos import ippo, mappo, qmix
from common.cli import make_args
from envs import FAMILIES, known_envs, make_env
from envs.gym_multiagent import TupleGymParallelEnv, _split_rware


def need(package: str):
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"{package} is not installed (pip install -e '.[all]' installs it)")


need_lbf, need_rware, need_vmas = need("lbforaging"), need("rware"), need("vmas")
need_mamujoco = pytest.mark.skipif(importlib.util.find_spec("gymnasium_robotics") is None
                                   or importlib.util.find_spec("mujoco") is None,
                                   reason="gymnasium-robotics / mujoco are not installed "
                                          "(pip install -e '.[all]' installs them)")

LBF = "lbf:Foraging-8x8-2p-3f-v3"
LBF_SMALL = "lbf:Foraging-5x5-2p-1f-v3"  # random play finds its one food often: ends of both kinds
RWARE = "rware:rware-tiny-2ag-v2"
HOPPER = "mamujoco:Hopper-3x1"  # three agents of one joint each, observation sizes 8, 9, 8


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # VMAS steps many tiny tensors: threads only add overhead
    yield
    torch.set_num_threads(threads)


def np_(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def check_shapes(env, E: int, steps: int = 3):
    """Reset and a few random steps have the batched layout of every family."""
    N, D = env.n_agents, env.obs_dim
    obs, state, mask = env.reset()
    assert tuple(obs.shape) == (E, N, D) and tuple(state.shape) == (E, env.state_dim)
    assert len(env.obs_dims) == N and max(env.obs_dims) == D
    assert (mask is None) == (not env.discrete)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        actions = env.sample_actions(rng)
        assert tuple(actions.shape) == ((E, N) if env.discrete else (E, N, env.action_dim))
        step = env.step(actions)
        for name in ("reward", "terminated", "truncated", "alive", "episode_return"):
            assert tuple(getattr(step, name).shape) == (E, N), name
        assert tuple(step.obs.shape) == tuple(step.final_obs.shape) == (E, N, D)
        assert tuple(step.state.shape) == tuple(step.final_state.shape) == (E, env.state_dim)
        assert tuple(step.done.shape) == tuple(step.episode_length.shape) == (E,)
        if env.discrete:
            assert tuple(step.action_mask.shape) == (E, N, env.n_actions)
        assert np.isfinite(np_(step.obs)).all() and np.isfinite(np_(step.reward)).all()
    return step


def run_until_done(env, rng, max_steps: int):
    env.reset()
    for t in range(max_steps):
        step = env.step(env.sample_actions(rng))
        if np_(step.done).any():
            return t + 1, step
    raise AssertionError(f"no episode ended within {max_steps} steps")


def rollout_obs(env, seed_actions: int, steps: int) -> np.ndarray:
    obs = [np_(env.reset()[0])]
    rng = np.random.default_rng(seed_actions)
    for _ in range(steps):
        obs.append(np_(env.step(env.sample_actions(rng)).obs))
    return np.stack(obs)


# ============================================================================ registry
def test_every_family_has_a_prefix_and_an_example():
    assert set(FAMILIES) == {"lbf", "rware", "vmas", "mamujoco", "jaxmarl"}
    for prefix, (_, _, example) in FAMILIES.items():
        assert example.startswith(prefix + ":")


def test_unknown_env_names_the_family_prefixes():
    with pytest.raises(ValueError) as err:
        make_env("nosuch", 1)
    assert all(f"{p}:" in str(err.value) for p in FAMILIES) and "simple_spread" in str(err.value)
    assert not any(name.split(":")[0] in FAMILIES for name in known_envs())  # families are not enumerated


# ============================================================================ LBF
@need_lbf
def test_lbf_shapes_masks_and_state():
    env = make_env(LBF, 3, seed=0)
    assert (env.n_agents, env.obs_dim, env.n_actions, env.discrete) == (2, 15, 6, True)
    assert env.state_dim == 30 and env.has_action_mask
    step = check_shapes(env, 3)
    np.testing.assert_array_equal(step.state, step.obs.reshape(3, -1))  # no env state: the observations
    # the mask is LBF's own list of valid actions, and NONE (0) is always valid
    for i in range(3):
        unwrapped = env.envs[i].unwrapped
        for n, player in enumerate(unwrapped.players):
            valid = sorted(a.value for a in unwrapped._valid_actions[player])
            assert np.flatnonzero(step.action_mask[i, n]).tolist() == valid
    assert step.action_mask[..., 0].all()


@need_lbf
def test_lbf_seeding():
    a, b, c = (make_env(LBF, 3, seed=s) for s in (3, 3, 2))
    oa, ob, oc = (rollout_obs(e, 0, 20) for e in (a, b, c))
    np.testing.assert_array_equal(oa, ob)
    assert not np.array_equal(oa[0], oc[0])
    assert_copy_i_seeded_seed_plus_i(oa, oc)


def assert_copy_i_seeded_seed_plus_i(obs_seed_s, obs_seed_s_minus_1):
    """Copy 1 of seed s and copy 2 of seed s - 1 both start from seed s + 1. (Copy 0 is left out:
    the adapter's construction probes it with a reset, and these envs' resets depend on the
    previous episode's layout, not on the seed alone.)"""
    np.testing.assert_array_equal(obs_seed_s[0, 1], obs_seed_s_minus_1[0, 2])


@need_lbf
def test_lbf_truncation_at_the_time_limit_keeps_the_final_obs():
    env = make_env(LBF, 2, seed=1, env_kwargs={"max_episode_steps": 4, "max_num_food": 1})
    env.reset()
    actions = np.zeros((2, 2), np.int64)  # NONE: nobody collects anything
    for t in range(4):
        step = env.step(actions)
        assert step.done.all() == (t == 3)
    assert step.truncated.all() and not step.terminated.any()
    assert step.episode_length.tolist() == [4, 4]
    for i in range(2):  # the final obs is where the agents stood, the new obs a fresh episode
        assert env.envs[i].unwrapped.current_step == 0
        assert not np.array_equal(step.final_obs[i], step.obs[i])
    np.testing.assert_array_equal(step.episode_normalised_return, [0.0, 0.0])


@need_lbf
def test_lbf_collecting_all_food_terminates_with_normalised_return_one():
    env = make_env(LBF_SMALL, 8, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    returns, terminated, truncated = np.zeros((8, 2)), [], []
    for _ in range(300):
        step = env.step(env.sample_actions(rng))
        returns += step.reward
        for i in np.flatnonzero(step.done):
            # LBF's rewards are normalised: the team's return is the fraction of food collected
            assert math.isclose(step.episode_return[i].sum(), step.episode_normalised_return[i], abs_tol=1e-5)
            np.testing.assert_allclose(step.episode_return[i], returns[i], atol=1e-5)
            (terminated if step.terminated[i].all() else truncated).append(step.episode_normalised_return[i])
            assert step.terminated[i].all() != step.truncated[i].all()
            assert step.terminated[i].all() or step.episode_length[i] == 50
            returns[i] = 0.0
    assert terminated and truncated, "random play should both finish the food and run out of time"
    np.testing.assert_allclose(terminated, 1.0)  # all food collected
    assert all(r < 1.0 for r in truncated)


@need_lbf
def test_lbf_normalised_return_stays_normalised_with_a_penalty():
    env = make_env(LBF_SMALL, 8, seed=0, env_kwargs={"penalty": 0.1, "normalize_reward": False})
    env.reset()
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(200):
        step = env.step(env.sample_actions(rng))
        seen += [(step.episode_return[i].sum(), step.episode_normalised_return[i], step.terminated[i].all())
                 for i in np.flatnonzero(step.done)]
    assert seen
    for _, score, terminated in seen:
        assert 0.0 <= score <= 1.0 and (score == 1.0) == terminated
    assert any(raw != score for raw, score, _ in seen)  # raw food levels and penalties differ from it


@need_lbf
def test_lbf_unknown_id_and_argument():
    with pytest.raises(ValueError, match="Foraging-8x8-2p-3f-v3"):
        make_env("lbf:Foraging-8x8-2p-3f-v9", 1)
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env(LBF, 1, env_kwargs={"time_limit": 10})
    with pytest.raises(ValueError, match="not a lbforaging env"):
        make_env("lbf:CartPole-v1", 1)


# ============================================================================ RWARE
@need_rware
def test_rware_shapes_seeding_and_truncation():
    env = make_env(RWARE, 2, seed=0, env_kwargs={"max_steps": 5})
    assert (env.n_agents, env.obs_dim, env.n_actions) == (2, 71, 5)
    assert not env.has_action_mask and env.action_mask().all()
    check_shapes(env, 2, steps=2)
    t, step = run_until_done(env, np.random.default_rng(0), 10)
    assert t == 5 and step.done.all()
    assert step.truncated.all() and not step.terminated.any()  # the warehouse never finishes: a clock
    assert not np.array_equal(step.final_obs, step.obs)
    a, b, c = (make_env(RWARE, 3, seed=s) for s in (7, 7, 6))
    oa, ob, oc = (rollout_obs(e, 1, 10) for e in (a, b, c))
    np.testing.assert_array_equal(oa, ob)
    assert not np.array_equal(oa[0], oc[0])
    assert_copy_i_seeded_seed_plus_i(oa, oc)


@need_rware
def test_rware_message_bits_are_refused_naming_the_space():
    with pytest.raises(TypeError, match=r"MultiDiscrete.*msg_bits"):
        make_env(RWARE, 1, env_kwargs={"msg_bits": 1})


class _DictObsEnv:
    """A stand-in Gymnasium env whose per-agent observations are Dicts."""
    observation_space = spaces.Tuple([spaces.Dict({"pos": spaces.Box(0, 1, (2,))})] * 2)
    action_space = spaces.Tuple([spaces.Discrete(3)] * 2)
    unwrapped = None


def test_tuple_adapter_refuses_non_box_observations_naming_the_space():
    with pytest.raises(TypeError) as err:
        TupleGymParallelEnv(_DictObsEnv(), _split_rware)
    assert "Dict" in str(err.value) and "Tuple of Box" in str(err.value)


# ============================================================================ MaMuJoCo
@need_mamujoco
def test_mamujoco_padding_state_and_continuous_actions():
    env = make_env(HOPPER, 2, seed=0)
    assert env.obs_dims == [8, 9, 8] and env.obs_dim == 9 and not env.discrete
    assert env.action_dims == [1, 1, 1] and np.all(env.action_low == -1) and np.all(env.action_high == 1)
    step = check_shapes(env, 2)
    assert np.all(step.obs[:, [0, 2], 8] == 0.0)  # the shorter observations are zero-padded
    assert env.state_dim == 11  # the env's own state: Hopper's single-agent observation


@need_mamujoco
def test_mamujoco_seeding_auto_reset_and_final_obs():
    a, b, c = (make_env(HOPPER, 3, seed=s) for s in (2, 2, 1))
    oa, ob, oc = (rollout_obs(e, 0, 5) for e in (a, b, c))
    np.testing.assert_array_equal(oa, ob)
    assert not np.array_equal(oa[0], oc[0])
    assert_copy_i_seeded_seed_plus_i(oa, oc)
    env = make_env(HOPPER, 2, seed=0, env_kwargs={"max_episode_steps": 6})
    env.reset()
    zero = np.zeros((2, 3, 1), np.float32)  # mid-range torques: Hopper stands long enough to be truncated
    for t in range(6):
        step = env.step(zero)
        assert step.done.all() == (t == 5)
    assert step.truncated.all() and not step.terminated.any()
    assert not np.allclose(step.final_obs, step.obs) and not np.allclose(step.final_state, step.state)


@need_mamujoco
def test_mamujoco_bad_names():
    with pytest.raises(ValueError, match="accepted: 3x1"):
        make_env("mamujoco:Hopper-2x3", 1)
    with pytest.raises(ValueError, match="HalfCheetah-2x3"):
        make_env("mamujoco:Cheetah-2x3", 1)
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env(HOPPER, 1, env_kwargs={"no_such_arg": 1})


# ============================================================================ VMAS
@need_vmas
@pytest.mark.parametrize("continuous", [True, False])
def test_vmas_shapes_and_tensors(continuous):
    env = make_env("vmas:balance", 3, seed=0, env_kwargs={"continuous_actions": continuous, "max_steps": 4})
    assert env.discrete != continuous and env.n_agents == 3
    step = check_shapes(env, 3)
    assert isinstance(step.obs, torch.Tensor) and step.obs.device.type == "cpu"
    torch.testing.assert_close(step.state, step.obs.reshape(3, -1))


ADAPTER_ATTRIBUTES = ("num_envs", "n_agents", "agents", "obs_dim", "obs_dims", "obs_shape", "state_dim", "state_shape",
                      "discrete", "n_actions",
                      "action_dim", "action_dims", "action_dim_mask", "has_action_mask", "reset", "step",
                      "action_mask", "sample_actions", "render", "close")


@need_vmas
@pytest.mark.parametrize("continuous", [True, False])
def test_vmas_adapter_has_what_the_pettingzoo_adapter_has(continuous):
    """The algorithms read these from PettingZooVecEnv; VMAS's own adapter must give the same."""
    kwargs = {"continuous_actions": continuous}
    vmas_env = make_env("vmas:simple_spread", 2, env_kwargs=kwargs)
    pz_env = make_env("simple_spread", 2, env_kwargs=kwargs)
    extra = ("action_low", "action_high", "to_env_units") if continuous else ()
    for name in ADAPTER_ATTRIBUTES + extra:
        assert hasattr(pz_env, name) and hasattr(vmas_env, name), name
    for name in ("n_agents", "discrete"):
        assert getattr(vmas_env, name) == getattr(pz_env, name), name
    for name in ("obs_dims", "action_dims"):
        assert type(getattr(vmas_env, name)) is type(getattr(pz_env, name)) is list, name
    assert vmas_env.action_dim_mask.shape == (3, vmas_env.n_actions if not continuous else vmas_env.action_dim)
    if continuous:  # VMAS forces are in [-u_range, u_range]: the normalised box maps onto them
        np.testing.assert_array_equal(vmas_env.action_low, -vmas_env.action_high)
        torch.testing.assert_close(vmas_env.to_env_units(torch.ones(2, 3, 2)), torch.as_tensor(vmas_env.action_high)
                                   .expand(2, 3, 2))


@need_vmas
def test_vmas_padding_heterogeneous_agents():
    env = make_env("vmas:simple_speaker_listener", 2, seed=0, env_kwargs={"continuous_actions": False})
    assert env.obs_dims == [3, 11] and env.action_dims == [27, 9] and env.n_actions == 27
    step = check_shapes(env, 2)
    assert (step.obs[:, 0, 3:] == 0).all() and not step.action_mask[:, 1, 9:].any()
    assert env.state_dim == 14
    torch.testing.assert_close(step.state[:, :3], step.obs[:, 0, :3])
    torch.testing.assert_close(step.state[:, 3:], step.obs[:, 1])
    assert (env.sample_actions()[:, 1] < 9).all()


@need_vmas
def test_vmas_seeding():
    a, b, c = (make_env("vmas:balance", 2, seed=s) for s in (5, 5, 6))
    oa = rollout_obs(a, 0, 3)
    ob = rollout_obs(b, 0, 3)
    oc = rollout_obs(c, 0, 3)
    np.testing.assert_array_equal(oa, ob)
    assert not np.allclose(oa[0], oc[0])


@need_vmas
def test_vmas_time_limit_resets_every_copy_with_the_final_obs():
    env = make_env("vmas:balance", 3, seed=0, env_kwargs={"max_steps": 3})
    env.env.scenario.done = lambda: torch.zeros(3, dtype=torch.bool)  # no early end: the clock alone
    env.reset()
    actions = torch.zeros(3, 3, 2)
    for t in range(3):
        step = env.step(actions)
        assert bool(step.done.all()) == (t == 2)
    assert step.truncated.all() and not step.terminated.any() and step.episode_length.tolist() == [3] * 3
    assert not torch.allclose(step.final_obs, step.obs)
    assert (env.env.steps == 0).all()


@need_vmas
def test_vmas_copy_that_terminates_early_resets_alone():
    env = make_env("vmas:balance", 3, seed=0, env_kwargs={"max_steps": 50})
    env.reset()
    actions = torch.zeros(3, 3, 2)
    env.step(actions)
    env.env.scenario.done = lambda: torch.tensor([False, True, False])  # copy 1's task ends now
    step = env.step(actions)
    assert step.done.tolist() == [False, True, False]
    assert step.terminated[1].all() and not step.terminated[[0, 2]].any() and not step.truncated.any()
    assert env.env.steps.tolist() == [2, 0, 2]
    torch.testing.assert_close(step.obs[[0, 2]], step.final_obs[[0, 2]])  # the others go on
    assert not torch.allclose(step.obs[1], step.final_obs[1])
    assert step.episode_length.tolist() == [0, 2, 0]


@need_vmas
def test_vmas_bad_space_unknown_scenario_and_argument():
    with pytest.raises(TypeError, match=r"observation space Dict"):
        make_env("vmas:football", 1, env_kwargs={"dict_obs": True, "n_blue_agents": 2, "n_red_agents": 2})
    with pytest.raises(ValueError, match="balance"):
        make_env("vmas:nosuch", 1)
    with pytest.raises(ValueError, match="bogus"):
        make_env("vmas:balance", 1, env_kwargs={"bogus": 1})


# ============================================================================ smoke runs
SMOKE = [
    pytest.param("lbf", LBF, (), marks=need_lbf),
    pytest.param("rware", RWARE, ("max_steps=4",), marks=need_rware),
    pytest.param("mamujoco", HOPPER, ("max_episode_steps=4",), marks=need_mamujoco),
    pytest.param("vmas", "vmas:balance", ("max_steps=4",), marks=need_vmas),
    pytest.param("vmas-discrete", "vmas:simple_spread", ("max_steps=4", "continuous_actions=false"), marks=need_vmas),
]


@pytest.mark.parametrize("family,env,env_kwargs", SMOKE)
@pytest.mark.parametrize("algo", [mappo, ippo], ids=["mappo", "ippo"])
def test_policy_gradient_smoke(tiny, algo, family, env, env_kwargs):
    args = tiny(algo, env=env, env_kwargs=env_kwargs, torch_threads=1)
    summary = algo.main(args)
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert math.isfinite(summary["eval_return_mean"])
    assert all(math.isfinite(v) for v in summary["final_losses"].values())


@pytest.mark.parametrize("env,env_kwargs", [pytest.param(LBF, ("max_episode_steps=10",), marks=need_lbf),
                                            pytest.param(RWARE, ("max_steps=4",), marks=need_rware)])
def test_qmix_smoke(tmp_path, env, env_kwargs):
    args = make_args(qmix.Args, env=env, env_kwargs=env_kwargs, torch_threads=1, num_envs=2, batch_size=2,
                     updates_per_iteration=1, hidden_dim=16, eval_every=0, eval_episodes=2, eval_num_envs=1,
                     checkpoint_every=0, run_dir=str(tmp_path), total_timesteps=40, cuda=False)
    summary = qmix.main(args)
    assert summary["global_step"] == 40 and math.isfinite(summary["eval_return_mean"])
    assert math.isfinite(summary["final_losses"]["td_loss"])
