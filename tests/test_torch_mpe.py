"""The batched torch MPE reproduces mpe2 step for step, and behaves as an adapter must."""
import functools
import importlib

import numpy as np
import pytest
import torch

from envs import MPE2_SCENARIOS, TORCH_SCENARIOS, env_arguments, known_envs, make_env
from envs.torch_mpe import make_torch_mpe

PORTED = ["simple", "simple_spread", "simple_reference", "simple_speaker_listener", "simple_adversary",
          "simple_tag", "simple_push"]

# Per-episode draws of each mpe2 scenario that the physics state does not hold, read off its world
# in the port's terms (TorchMPE.set_scenario_state); the colours in the observations follow from them.
MPE2_SCENARIO_STATE = {
    "simple_reference": lambda w: {"goal": [w.landmarks.index(a.goal_b) for a in w.agents]},
    "simple_speaker_listener": lambda w: {"goal": w.landmarks.index(w.agents[0].goal_b)},
    "simple_adversary": lambda w: {"goal": w.landmarks.index(w.agents[0].goal_a)},
    "simple_push": lambda w: {"goal": w.landmarks.index(w.agents[0].goal_a)},
}


def mpe2_world(world):
    """Positions and velocities (M, 2) of every entity of one mpe2 world, in world.entities order."""
    return (np.stack([e.state.p_pos for e in world.entities]), np.stack([e.state.p_vel for e in world.entities]))


def mpe2_events(world, counts):
    """Add this step's contacts (mpe2 is_collision: distance below the size sum, both colliding)
    and good agents outside [-0.9, 0.9]^2 (simple_tag's boundary penalty) to counts."""
    ents, n_agents = world.entities, len(world.agents)
    pos = np.stack([e.state.p_pos for e in ents])
    size = np.array([e.size for e in ents])
    touch = np.linalg.norm(pos[:, None] - pos[None], axis=-1) < size[:, None] + size[None]
    collide = np.array([e.collide for e in ents])
    touch &= collide[:, None] & collide[None] & ~np.eye(len(ents), dtype=bool)
    adversary = np.array([getattr(a, "adversary", False) for a in world.agents])
    counts["agent_agent"] += int(np.triu(touch[:n_agents, :n_agents]).sum())
    counts["agent_landmark"] += int(touch[:n_agents, n_agents:].sum())
    counts["adversary_good"] += int(touch[:n_agents, :n_agents][adversary][:, ~adversary].sum())
    counts["good_out_of_bounds"] += int((np.abs(pos[:n_agents][~adversary]) > 0.9).any(-1).sum())


def run_side_by_side(name, n_episodes, continuous, seed=0, **kwargs):
    """Start the torch port (E = n_episodes copies, float64) from mpe2's initial states, feed both
    the same random actions, and compare everything each step returns until each episode ends.

    mpe2 plays the episodes one after another in one raw env (reset with seed + i), driven
    through its own AEC step as the parallel wrapper does. Discrete actions are drawn below each
    agent's action_dims; continuous ones fill the padded width (the port must ignore the
    padding) and reach mpe2 through the adapter's mapping [-1, 1] -> [0, 1]. Returns the worst
    disagreement per quantity and event counts from mpe2's side."""
    raw = importlib.import_module(f"mpe2.{MPE2_SCENARIOS[name]}").raw_env(continuous_actions=continuous, **kwargs)
    agents = raw.possible_agents
    tenv = make_torch_mpe(name, n_episodes, dtype=torch.float64, continuous_actions=continuous, **kwargs)
    assert tenv.agents == agents
    E, N, T, W = n_episodes, len(agents), tenv.max_cycles, tenv.obs_dim
    dims, obs_dims = np.array(tenv.action_dims), tenv.obs_dims
    rng = np.random.default_rng(seed)
    if continuous:
        pz_actions = ((rng.uniform(-1, 1, (T, E, N, tenv.action_dim)) + 1) / 2).astype(np.float32)
        actions = pz_actions.astype(np.float64) * 2 - 1  # the adapter maps these exactly onto pz_actions
    else:
        actions = pz_actions = (rng.random((T, E, N)) * dims).astype(np.int64)

    def padded(obs_by_agent):
        out = np.zeros((N, W))
        for n, a in enumerate(agents):
            out[n, : obs_dims[n]] = obs_by_agent(a)
        return out

    pos0, vel0, state0 = np.zeros((E, tenv.n_entities, 2)), np.zeros((E, tenv.n_entities, 2)), []
    obs = np.zeros((T + 1, E, N, W))
    rew, term, trunc = np.zeros((T, E, N)), np.zeros((T, E, N), bool), np.zeros((T, E, N), bool)
    last = np.full(E, T - 1)  # each episode's last step
    final_state = np.zeros((E, tenv.state_dim))
    events = dict(agent_agent=0, agent_landmark=0, adversary_good=0, good_out_of_bounds=0, terminated=0)
    for i in range(E):
        raw.reset(seed=seed + i)
        pos0[i], vel0[i] = mpe2_world(raw.world)
        state0.append(MPE2_SCENARIO_STATE.get(name, lambda w: {})(raw.world))
        obs[0, i] = padded(raw.observe)
        for t in range(T):
            for n in range(N):  # mpe2's AEC order: agent 0 first; the world steps after the last
                raw.step(pz_actions[t, i, n, : dims[n]] if continuous else pz_actions[t, i, n])
            obs[t + 1, i] = padded(raw.observe)
            rew[t, i] = [raw.rewards[a] for a in agents]
            term[t, i] = [raw.terminations[a] for a in agents]
            trunc[t, i] = [raw.truncations[a] for a in agents]
            mpe2_events(raw.world, events)
            if term[t, i].any() or trunc[t, i].any():
                last[i] = t
                final_state[i] = raw.state()
                events["terminated"] += int(term[t, i].all())
                break

    tenv.set_world(pos0, vel0)
    if state0[0]:
        tenv.set_scenario_state(**{k: np.stack([np.asarray(s[k]) for s in state0]) for k in state0[0]})
    worst = {"obs": float(np.abs(tenv.observation().numpy() - obs[0]).max()), "reward": 0.0, "state": 0.0}
    for t in range(T):
        step = tenv.step(torch.as_tensor(actions[t]))
        live = last >= t  # mpe2 stepped this episode at t (later, the port has reset the copy)
        worst["obs"] = max(worst["obs"], float(np.abs(step.final_obs.numpy() - obs[t + 1])[live].max()))
        worst["reward"] = max(worst["reward"], float(np.abs(step.reward.numpy() - rew[t])[live].max()))
        assert (step.terminated.numpy() == term[t])[live].all(), (name, t)
        assert (step.truncated.numpy() == trunc[t])[live].all(), (name, t)
        assert (step.done.numpy()[live] == (last == t)[live]).all(), (name, t)
        ends = last == t
        if ends.any():
            worst["state"] = max(worst["state"], float(np.abs(step.final_state.numpy() - final_state)[ends].max()))
    return worst, events


@functools.lru_cache(maxsize=None)
def compared(name, continuous):
    """100 episodes of a scenario at its default arguments (shared by the tests below)."""
    return run_side_by_side(name, 100, continuous)


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("name", PORTED)
def test_matches_mpe2_step_for_step(name, continuous):
    worst, _ = compared(name, continuous)
    assert max(worst.values()) < 1e-5, worst


def test_compared_episodes_exercise_contacts_and_penalties():
    """The episodes compared above do contain the events that the physics and rewards treat
    specially: agent contacts (simple_spread, simple_push), catches, obstacle contacts and the
    boundary penalty (simple_tag)."""
    for continuous in (False, True):
        assert compared("simple_spread", continuous)[1]["agent_agent"] > 0
        assert compared("simple_push", continuous)[1]["agent_agent"] > 0
        tag = compared("simple_tag", continuous)[1]
        assert tag["adversary_good"] > 0 and tag["agent_landmark"] > 0 and tag["good_out_of_bounds"] > 0, tag


def test_simple_spread_collisions_match_mpe2():
    """Crowd 6 agents so that the contact forces and collision penalties are exercised."""
    worst, events = run_side_by_side("simple_spread", 30, False, N=6, local_ratio=0.9)
    assert events["agent_agent"] > 0
    assert max(worst.values()) < 1e-5, worst


@pytest.mark.parametrize("name,continuous,kwargs", [
    ("simple_tag", True, dict(num_good=2, num_adversaries=2, num_obstacles=3, max_cycles=30)),
    ("simple_adversary", False, dict(N=3)),
    ("simple_reference", False, dict(local_ratio=0.2)),
], ids=["tag_2v2_3obstacles", "adversary_N3", "reference_local0.2"])
def test_other_arguments_match_mpe2(name, continuous, kwargs):
    worst, _ = run_side_by_side(name, 30, continuous, **kwargs)
    assert max(worst.values()) < 1e-5, worst


def test_simple_tag_terminate_on_success_matches_mpe2():
    """Episodes end when the prey is caught, on the same step as mpe2's (the port resets the copy)."""
    worst, events = run_side_by_side("simple_tag", 60, False, terminate_on_success=True)
    assert events["terminated"] > 0, events
    assert max(worst.values()) < 1e-5, worst


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("name", PORTED)
def test_adapter_matches_the_pettingzoo_adapter(name, continuous):
    """Same agents, padded sizes, true sizes and masks as PettingZooVecEnv over mpe2; padding is
    zero; the state is the true-size observations concatenated; random actions stay real."""
    kwargs = {"continuous_actions": continuous}
    env, twin = make_env("torch:" + name, 4, seed=1, env_kwargs=kwargs), make_env(name, 1, env_kwargs=kwargs)
    for attr in ("agents", "n_agents", "obs_dim", "obs_dims", "obs_shape", "state_dim", "state_shape", "discrete",
                 "n_actions", "action_dim", "action_dims", "has_action_mask"):
        assert getattr(env, attr) == getattr(twin, attr), attr
    assert np.array_equal(env.action_dim_mask, twin.action_dim_mask)
    if not continuous:
        assert torch.equal(env.action_mask(), torch.as_tensor(twin.action_mask()).expand(4, -1, -1))
    else:
        assert env.action_mask() is None
        assert np.array_equal(env.action_low, twin.action_low) and np.array_equal(env.action_high, twin.action_high)
    env.reset()
    for _ in range(30):
        actions = env.sample_actions()
        if continuous:
            assert actions.shape == (4, env.n_agents, env.action_dim)
            assert (actions[:, ~torch.as_tensor(env.action_dim_mask)] == 0).all() and actions.abs().max() <= 1
        else:
            assert actions.shape == (4, env.n_agents)
            assert (actions < torch.tensor(env.action_dims)).all() and (actions >= 0).all()
        step = env.step(actions)
        for o, s in ((step.obs, step.state), (step.final_obs, step.final_state)):
            assert o.shape == (4, env.n_agents, env.obs_dim) and o.dtype == torch.float32
            assert torch.equal(s, torch.cat([o[:, n, :d] for n, d in enumerate(env.obs_dims)], dim=1))
            for n, d in enumerate(env.obs_dims):
                assert (o[:, n, d:] == 0).all()
        assert step.reward.shape == (4, env.n_agents) and torch.isfinite(step.reward).all()
        assert (step.action_mask is None) == continuous


def test_heterogeneous_sizes():
    """The padding the adapter documents, for the scenarios whose agents differ."""
    env = make_env("torch:simple_speaker_listener", 2)
    assert env.obs_dims == [3, 11] and env.obs_dim == 11 and env.state_dim == 14
    assert env.action_dims == [3, 5] and env.n_actions == 5
    assert env.action_dim_mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert env.action_mask().shape == (2, 2, 5) and not env.action_mask()[:, 0, 3:].any()
    env = make_env("torch:simple_speaker_listener", 2, env_kwargs={"continuous_actions": True})
    assert env.action_dims == [3, 5] and env.action_dim == 5 and env.action_dim_mask[0].tolist() == [1, 1, 1, 0, 0]
    env = make_env("torch:simple_reference", 2)
    assert env.action_dims == [50, 50] and env.obs_dims == [21, 21]
    env = make_env("torch:simple_tag", 2)
    assert env.agents == ["adversary_0", "adversary_1", "adversary_2", "agent_0"]
    assert env.obs_dims == [16, 16, 16, 14] and env.state_dim == 62
    assert env.accel.tolist() == [3.0, 3.0, 3.0, 4.0]
    assert env.max_speed[:4].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.3])
    assert torch.isinf(env.max_speed[4:]).all()  # obstacles: no limit (and they never move)
    env = make_env("torch:simple_adversary", 2, env_kwargs={"N": 3})
    assert env.obs_dims == [12, 14, 14, 14] and env.n_landmarks == 3


def test_speaker_talks_and_listener_hears():
    """Discrete words reach the listener's observation one-hot; a speaker cannot move."""
    env = make_env("torch:simple_speaker_listener", 3)
    env.reset()
    speaker_pos = env.pos[:, 0].clone()
    step = env.step(torch.tensor([[0, 2], [1, 2], [2, 2]]))
    assert torch.equal(step.obs[:, 1, 8:11], torch.eye(3))
    assert torch.equal(env.pos[:, 0], speaker_pos) and (env.vel[:, 0] == 0).all()


def test_simple_reference_splits_the_joint_action():
    """Discrete(50): action % 5 moves, action // 5 says; the other agent hears it."""
    env = make_env("torch:simple_reference", 1)
    env.reset()
    step = env.step(torch.tensor([[7 * 5 + 2, 0]]))  # agent 0: right, says word 7; agent 1: stays, says word 0
    assert env.vel[0, 0, 0] > 0 and env.vel[0, 0, 1] == 0 and (env.vel[0, 1] == 0).all()
    assert step.obs[0, 1, 11:].tolist() == [0.0] * 7 + [1.0] + [0.0] * 2
    assert step.obs[0, 0, 11:].tolist() == [1.0] + [0.0] * 9


def test_adapter_shapes_and_time_limit():
    env = make_env("torch:simple_spread", 4, seed=0, env_kwargs={"max_cycles": 3})
    obs, state, mask = env.reset()
    assert obs.shape == (4, 3, 18) and state.shape == (4, 54) and mask.shape == (4, 3, 5) and mask.all()
    assert env.obs_dims == [18] * 3 and env.state_dim == 54 and env.n_actions == 5 and env.discrete
    for t in range(3):
        step = env.step(env.sample_actions())
        assert step.reward.shape == (4, 3) and step.alive.all()
    assert step.done.all() and step.truncated.all() and not step.terminated.any()
    assert (step.episode_length == 3).all()
    assert torch.equal(step.state, step.obs.reshape(4, -1))  # mpe2's state(): the observations concatenated
    assert not torch.equal(step.obs, step.final_obs)  # reset copies start a new episode


def test_auto_reset_leaves_other_copies_alone():
    """Copy 0 ends one step earlier than the rest; resetting it must not move copies 1..3."""
    a = make_env("torch:simple_spread", 4, seed=3)
    b = make_env("torch:simple_spread", 4, seed=3)
    a.reset(), b.reset()
    a.steps[0] = a.max_cycles - 1
    actions = a.sample_actions()
    sa, sb = a.step(actions), b.step(actions)
    assert sa.done.tolist() == [True, False, False, False] and not sb.done.any()
    assert torch.equal(sa.obs[1:], sb.obs[1:]) and torch.equal(sa.final_obs, sb.final_obs)
    assert not torch.equal(sa.obs[0], sb.obs[0])
    assert sa.episode_return[1:].abs().sum() == 0 and sa.episode_length.tolist() == [1, 0, 0, 0]


def test_terminate_on_success_is_a_termination():
    env = make_env("torch:simple_spread", 2, env_kwargs={"terminate_on_success": True})
    env.reset()
    pos = env.pos.clone()
    pos[0, :3] = pos[0, 3:]  # copy 0: every agent on a landmark
    env.set_world(pos, torch.zeros_like(pos))
    step = env.step(torch.zeros(2, 3, dtype=torch.long))
    assert step.terminated[0].all() and not step.truncated[0].any() and not step.done[1]


def test_continuous_actions_use_the_normalised_box():
    env = make_env("torch:simple_spread", 2, env_kwargs={"continuous_actions": True})
    env.reset()
    assert not env.discrete and env.action_dim == 5 and env.n_actions == 0
    full_right = -torch.ones(2, 3, 5)
    full_right[..., 2] = 1.0  # mpe2 units: [0, 0, 1, 0, 0] -> u_x = +1
    env.step(full_right)
    assert torch.allclose(env.vel[:, :3, 0], torch.full((2, 3), 0.5)) or (env.vel[:, :3, 0] > 0.4).all()


def test_continuous_actions_map_onto_the_declared_bounds():
    """The [-1, 1] box goes onto each agent's declared [action_low, action_high] (mpe2's [0, 1]); padded
    dimensions (the speaker's, beyond its 3 words) get 0, whatever the actor put there."""
    env = make_env("torch:simple_speaker_listener", 2, env_kwargs={"continuous_actions": True})
    low, high = torch.as_tensor(env.action_low), torch.as_tensor(env.action_high)  # (N, width)
    assert env.action_dim_mask.tolist() == [[True, True, True, False, False], [True] * 5]
    a = torch.rand(2, 2, 5) * 2 - 1
    torch.testing.assert_close(env.to_env_units(a), low + (a + 1) / 2 * (high - low))
    assert env.to_env_units(a)[:, 0, 3:].eq(0).all() and env.to_env_units(torch.full((2, 2, 5), 5.0))[:, 1].eq(1).all()


def test_registry_names_and_errors():
    assert "torch:simple_spread" in known_envs()
    assert make_env("torch:simple_spread_v3", 1).n_agents == 3
    with pytest.raises(ValueError, match="no torch port|has no torch port"):
        make_env("torch:simple_world_comm", 1)
    with pytest.raises(ValueError, match="accepted"):
        make_env("torch:simple_spread", 1, env_kwargs={"num_agent_neighbors": 2})
    assert set(TORCH_SCENARIOS) <= {n.split(":", 1)[1] for n in known_envs() if n.startswith("torch:")}


@pytest.mark.parametrize("name", PORTED)
def test_scenario_arguments_are_mpe2s(name):
    """Every mpe2 argument is taken under its name and default, or named as not ported."""
    ours, theirs = env_arguments("torch:" + name), env_arguments(name)
    unsupported = TORCH_SCENARIOS[name].unsupported_args
    assert set(ours) | set(unsupported) == set(theirs), (set(ours) ^ set(theirs)) - set(unsupported)
    assert all(ours[k] == theirs[k] for k in ours), {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    for key, (only, _) in unsupported.items():
        assert only is ... or theirs[key] == only  # the value the port accepts is mpe2's default


def test_unported_arguments_fail_clearly():
    make_env("torch:simple_tag", 1, env_kwargs={"curriculum": False, "num_agent_neighbors": None,
                                                 "dynamic_rescaling": False, "benchmark_data": False})
    with pytest.raises(ValueError, match="curriculum=True .*not ported"):
        make_env("torch:simple_tag", 1, env_kwargs={"curriculum": True})
    with pytest.raises(ValueError, match="partial observability"):
        make_env("torch:simple_adversary", 1, env_kwargs={"num_landmark_neighbors": 1})
    with pytest.raises(ValueError, match="accepted: N, max_cycles"):
        make_env("torch:simple_adversary", 1, env_kwargs={"num_good": 2})
    with pytest.raises(ValueError, match="no scenario state"):
        make_env("torch:simple_tag", 1).set_scenario_state(goal=[0])


def test_render_falls_back_to_the_pettingzoo_twin():
    env = make_env("torch:simple_spread", 1, render_mode="rgb_array")
    env.reset()
    assert env.render().ndim == 3


def test_same_seed_same_worlds():
    a, b = make_env("torch:simple_spread", 8, seed=5), make_env("torch:simple_spread", 8, seed=5)
    assert torch.equal(a.reset()[0], b.reset()[0])
    assert not torch.equal(a.reset()[0], make_env("torch:simple_spread", 8, seed=6).reset()[0])


@pytest.mark.parametrize("algo,env", [("mappo", "torch:simple_spread"), ("ippo", "torch:simple_spread"),
                                      ("mappo", "torch:simple_speaker_listener")])
def test_algorithms_train_on_the_torch_port(algo, env, tmp_path):
    from common.cli import make_args

    module = importlib.import_module(f"algos.{algo}")
    args = make_args(module.Args, env=env, num_envs=8, total_timesteps=400, eval_every=200,
                     eval_episodes=4, eval_num_envs=4, checkpoint_every=0, run_dir=str(tmp_path))
    summary = module.main(args)
    assert summary["global_step"] == 400 and np.isfinite(summary["eval_return_mean"])
