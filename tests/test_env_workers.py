"""--env-workers (envs/workers.py): a Python-stepped env's copies stepped in worker processes give the
same trajectories as in one process, for the same seeds; a training run gives the same losses; envs
that are batched tensors already, and more workers than copies, are refused with a clear message."""
import dataclasses
import importlib.util
import json
import os

import numpy as np
import pytest

from algos import mappo
from common.cli import ConfigError, make_args
from envs import EnvError, make_env
from envs.workers import split

ENVS = [("simple_spread", {"max_cycles": 6}, None),  # continuous rows come from the same code: one discrete env
        ("simple_spread", {"max_cycles": 6, "continuous_actions": True}, None),
        ("classic:tictactoe", {}, None),  # turn-based: `acting` crosses the process boundary too
        ("lbf:Foraging-8x8-2p-3f-v3", {"max_episode_steps": 5}, "lbforaging")]  # env action masks, normalised return


def play(env, steps: int) -> list:
    """The reset and `steps` steps of random actions (rng seeded 0): every array the env returned."""
    rng = np.random.default_rng(0)
    out = [*env.reset(), np.copy(getattr(env, "acting", None))]  # the in-process adapter's acting is updated in place
    for _ in range(steps):
        step = env.step(env.sample_actions(rng))
        out += [getattr(step, f.name) for f in dataclasses.fields(step)] + [np.copy(getattr(env, "acting", None))]
    env.close()
    return out


@pytest.mark.parametrize("name,kwargs,package", ENVS, ids=[f"{n}-{len(k)}" for n, k, _ in ENVS])
def test_workers_give_the_same_trajectories_as_one_process(name, kwargs, package):
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"{name} needs {package}")
    # 5 copies in 2 workers (3 + 2), through several auto-resets
    alone, split_up = play(make_env(name, 5, 7, kwargs), 14), play(make_env(name, 5, 7, kwargs, workers=2), 14)
    assert len(alone) == len(split_up)
    for a, b in zip(alone, split_up):
        assert (a is None) == (b is None) and (a is None or a.shape == b.shape)
        if a is not None and a.shape:
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_split_gives_every_copy_to_one_worker():
    assert split(5, 2) == [(0, 3), (3, 2)]
    assert split(4, 4) == [(0, 1), (1, 1), (2, 1), (3, 1)]


def test_a_run_with_workers_has_the_same_losses(tmp_path):
    settings = dict(env="simple_spread", env_kwargs=("max_cycles=5",), num_envs=4, num_steps=5, total_timesteps=40,
                    eval_episodes=1, eval_num_envs=1, hidden_sizes=(16,), cuda=False, checkpoint_every=0)
    one = mappo.main(make_args(mappo.Args, run_dir=str(tmp_path / "one"), **settings))
    two = mappo.main(make_args(mappo.Args, run_dir=str(tmp_path / "two"), env_workers=2, **settings))
    assert one["final_losses"] == two["final_losses"] and one["eval_return_mean"] == two["eval_return_mean"]
    with open(os.path.join(two["run_dir"], "args.json")) as f:
        assert json.load(f)["env_workers"] == 2


def test_workers_are_refused_where_they_cannot_apply(tmp_path):
    with pytest.raises(EnvError, match="batched tensors"):
        make_env("torch:simple_spread", 4, 0, workers=2)
    with pytest.raises(EnvError, match="2 to 3 workers"):
        make_env("simple_spread", 3, 0, workers=4)
    with pytest.raises(ConfigError, match="--env-workers 5 is more than --num-envs 4"):
        make_args(mappo.Args, num_envs=4, env_workers=5, run_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="--env-workers must be at least 1"):
        make_args(mappo.Args, env_workers=0, run_dir=str(tmp_path))
    assert not os.listdir(tmp_path)
