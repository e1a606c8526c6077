"""The batched torch MPE reproduces mpe2 step for step, and behaves as an adapter must."""
import numpy as np
import pytest
import torch

from envs import TORCH_SCENARIOS, env_maker, known_envs, make_env
from envs.torch_mpe import make_torch_mpe

def mpe2_world(env):
    """Positions and velocities (M, 2) of every entity of one mpe2 env, in world.entities order."""
    world = env.unwrapped.world
    return (np.stack([e.state.p_pos for e in world.entities]), np.stack([e.state.p_vel for e in world.entities]))


def run_side_by_side(name, n_episodes, continuous, seed=0, **kwargs):
    """Start the torch port from mpe2's initial states, feed both the same random actions for
    one episode, and return the largest disagreement in obs / reward plus the collision count."""
    maker = env_maker(name)
    pz = [maker(continuous_actions=continuous, **kwargs) for _ in range(n_episodes)]
    first = [env.reset(seed=seed + i)[0] for i, env in enumerate(pz)]
    agents = pz[0].possible_agents
    worlds = [mpe2_world(env) for env in pz]
    tenv = make_torch_mpe(name, n_episodes, dtype=torch.float64, continuous_actions=continuous, **kwargs)
    tenv.set_world(np.stack([w[0] for w in worlds]), np.stack([w[1] for w in worlds]))
    ref0 = np.stack([[o[a] for a in agents] for o in first])
    worst = {"obs": float(np.abs(tenv.observation().numpy() - ref0).max()), "reward": 0.0}
    rng = np.random.default_rng(seed)
    collisions = 0
    for t in range(tenv.max_cycles):
        if continuous:
            actions = rng.uniform(-1, 1, (n_episodes, len(agents), 5))
            pz_actions = ((np.clip(actions, -1, 1) + 1) / 2).astype(np.float32)  # the adapter's mapping
        else:
            actions = pz_actions = rng.integers(0, 5, (n_episodes, len(agents)))
        out = [env.step({a: pz_actions[i, n] for n, a in enumerate(agents)}) for i, env in enumerate(pz)]
        step = tenv.step(torch.as_tensor(actions))
        obs = np.stack([[o[0][a] for a in agents] for o in out])
        rew = np.stack([[o[1][a] for a in agents] for o in out])
        term = np.stack([[o[2][a] for a in agents] for o in out])
        trunc = np.stack([[o[3][a] for a in agents] for o in out])
        worst["obs"] = max(worst["obs"], float(np.abs(step.final_obs.numpy() - obs).max()))
        worst["reward"] = max(worst["reward"], float(np.abs(step.reward.numpy() - rew).max()))
        assert (step.terminated.numpy() == term).all() and (step.truncated.numpy() == trunc).all(), t
        pos = np.stack([mpe2_world(env)[0][: len(agents)] for env in pz])  # (E, N, 2) agents after the step
        dist = np.linalg.norm(pos[:, :, None] - pos[:, None], axis=-1)
        collisions += int(((dist < 0.3) & ~np.eye(len(agents), dtype=bool)).sum()) // 2  # agent size 0.15
    return worst, collisions


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_simple_spread_matches_mpe2_step_for_step(continuous):
    worst, _ = run_side_by_side("simple_spread", 100, continuous)
    assert worst["obs"] < 1e-5 and worst["reward"] < 1e-5, worst


def test_simple_spread_collisions_match_mpe2():
    """Crowd 6 agents so that the contact forces and collision penalties are exercised."""
    worst, collisions = run_side_by_side("simple_spread", 30, False, N=6, local_ratio=0.9)
    assert collisions > 0
    assert worst["obs"] < 1e-5 and worst["reward"] < 1e-5, worst


def test_adapter_shapes_and_time_limit():
    env = make_env("torch:simple_spread", 4, seed=0, env_kwargs={"max_cycles": 3})
    obs, state, mask = env.reset()
    assert obs.shape == (4, 3, 18) and state.shape == (4, 54) and mask is None
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


def test_registry_names_and_errors():
    assert "torch:simple_spread" in known_envs()
    assert make_env("torch:simple_spread_v3", 1).n_agents == 3
    with pytest.raises(ValueError, match="no torch port|has no torch port"):
        make_env("torch:simple_world_comm", 1)
    with pytest.raises(ValueError, match="accepted"):
        make_env("torch:simple_spread", 1, env_kwargs={"num_agent_neighbors": 2})
    assert set(TORCH_SCENARIOS) <= {n.split(":", 1)[1] for n in known_envs() if n.startswith("torch:")}


def test_render_falls_back_to_the_pettingzoo_twin():
    env = make_env("torch:simple_spread", 1, render_mode="rgb_array")
    env.reset()
    assert env.render().ndim == 3


def test_same_seed_same_worlds():
    a, b = make_env("torch:simple_spread", 8, seed=5), make_env("torch:simple_spread", 8, seed=5)
    assert torch.equal(a.reset()[0], b.reset()[0])
    assert not torch.equal(a.reset()[0], make_env("torch:simple_spread", 8, seed=6).reset()[0])


@pytest.mark.parametrize("algo", ["mappo", "ippo"])
def test_algorithms_train_on_the_torch_port(algo, tmp_path):
    import importlib

    from common.cli import make_args

    module = importlib.import_module(f"algos.{algo}")
    args = make_args(module.Args, env="torch:simple_spread", num_envs=8, total_timesteps=400, eval_every=200,
                     eval_episodes=4, eval_num_envs=4, checkpoint_every=0, run_dir=str(tmp_path))
    summary = module.main(args)
    assert summary["global_step"] == 400 and np.isfinite(summary["eval_return_mean"])
