"""A refactor of shared code must not change what a run computes.

Fixed-seed tiny runs (seed 3, torch:simple_spread with 4-step episodes, so that episodes end inside
the run and the replays fill; ppo_iql on torch:simple_tag) of files from every family, against the
numbers they gave before the buffer's interface changed (issue 26: team entries stored once, the
keys renamed, on-policy files no longer closing their rollout as an episode). All 28 files gave the
same numbers bit for bit on the machine that recorded them; the tolerance here only absorbs
another CPU's rounding (a wrong key, axis or order changes these numbers by far more).
When a change is meant to change the numbers, record the new ones in RECORDED with the reason.
"""
import dataclasses
import importlib

import pytest

from common.cli import make_args

TINY = dict(num_envs=2, num_steps=8, total_timesteps=64, eval_every=0, eval_episodes=2, eval_num_envs=1,
            checkpoint_every=0, cuda=False, torch_threads=1, hidden_sizes=(16,), hidden_dim=16,
            critic_hidden_sizes=(16,), mixer_embed_dim=8, hypernet_hidden=16, mixer_hidden=16, update_epochs=1,
            num_minibatches=1, critic_minibatches=1, chunk_len=4, batch_size=2, buffer_size=64, learning_starts=0,
            updates_per_iteration=2, policy_delay=1)
CONTINUOUS = {"masac", "hasac"}
RECORDED = {  # final losses and the greedy evaluation return, recorded before the buffer's refactor
    "mappo": {"eval": -6.77432, "policy_loss": 0.0, "value_loss": 0.998849, "entropy": 1.60939, "approx_kl": 0.0, "clipfrac": 0.0, "grad_norm": 2.898806, "explained_variance": 0.101744},
    "happo": {"eval": -7.239179, "policy_loss": -0.001488, "value_loss": 1.101242, "entropy": 1.609389, "approx_kl": 0.0, "clipfrac": 0.0, "grad_norm": 0.561195, "explained_variance": -0.221643},
    "coma": {"eval": -7.058268, "policy_loss": -0.001188, "td_loss": 1.351958, "entropy": 1.609406, "q_taken_mean": -10.328336, "grad_norm": 0.225815, "explained_variance": -0.011012},
    "qmix": {"eval": -6.245744, "td_loss": 8.141431, "q_taken_mean": 0.160763, "target_mean": -1.107359, "grad_norm": 31.402678},
    "masac": {"eval": -6.320406, "td_loss": 3.170463, "policy_loss": 0.241071, "q_taken_mean": -0.692002, "target_mean": -1.62242, "grad_norm": 7.642569, "actor_grad_norm": 0.252214, "entropy": 3.429967, "alpha": 0.198605, "alpha_loss": -13.626498},
    "hasac": {"eval": -6.322071, "td_loss": 25.989338, "policy_loss": -0.582637, "q_taken_mean": 0.049076, "target_mean": -2.878175, "grad_norm": 20.129557, "actor_grad_norm": 0.50988, "entropy": 3.243971, "alpha": 0.198605, "alpha_loss": -13.325871},
    "ppo_iql": {"eval": 20.0, "policy_loss": 0.0, "value_loss": 0.022302, "entropy": 1.609398, "approx_kl": 0.0, "clipfrac": 0.0, "ppo_grad_norm": 0.597025, "explained_variance": 0.776852, "td_loss": 0.998133, "q_taken_mean": 0.178906, "target_mean": 0.034665, "iql_grad_norm": 1.330835},
    "iql": {"eval": -6.245744, "td_loss": 12.17751, "q_taken_mean": 0.034117, "target_mean": -3.048237, "grad_norm": 7.399404},
}


@pytest.mark.parametrize("algo", sorted(RECORDED))
def test_a_fixed_seed_gives_the_recorded_numbers(algo, tmp_path):
    module = importlib.import_module(f"algos.{algo}")
    fields = {f.name for f in dataclasses.fields(module.Args)}
    env_kwargs = ("max_cycles=4",) + (("continuous_actions=true",) if algo in CONTINUOUS else ())
    args = make_args(module.Args, env="torch:simple_tag" if algo == "ppo_iql" else "torch:simple_spread",
                     env_kwargs=env_kwargs, run_dir=str(tmp_path), seed=3,
                     **{k: v for k, v in TINY.items() if k in fields})
    summary = module.main(args)
    got = {"eval": summary["eval_return_mean"], **summary["final_losses"]}
    assert got.keys() == RECORDED[algo].keys()
    for key, want in RECORDED[algo].items():
        assert got[key] == pytest.approx(want, rel=1e-3, abs=1e-5), (algo, key, got[key], want)
