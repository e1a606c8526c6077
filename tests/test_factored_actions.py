"""--factored-actions: nets.Actor's factored head (one categorical per part of a joint action, logits
summed) against the product of its factors' categoricals, its index order against the env's decoding
of simple_reference's (move, word) action, and the flag through the command line."""
import os
import subprocess
import sys

import pytest
import torch
from torch.distributions import Categorical

import envs
from nets import Actor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def factored_actor(factors, n_agents=2, obs_dim=6):
    size = int(torch.tensor(factors).prod())
    return Actor(obs_dim, n_agents, True, size, torch.ones(n_agents, size, dtype=torch.bool), True, (8,),
                 action_factors=factors)


@pytest.mark.parametrize("factors", [(5, 10), (2, 3, 4)])
def test_the_joint_policy_is_the_product_of_the_factors(factors):
    torch.manual_seed(0)
    actor = factored_actor(factors)
    assert actor.net.head.out_features == sum(factors)  # one logit per choice of each factor
    obs = torch.randn(1, 7, 2, 6)
    dist, _ = actor(obs)
    out, _ = actor.net(obs)
    parts = [Categorical(logits=p) for p in out.split(factors, -1)]
    joint = torch.arange(int(torch.tensor(factors).prod()))
    choices, rest = [], joint
    for size in factors:  # a = f0 + s0 * (f1 + s1 * f2): the first factor varies fastest
        choices.append(rest % size)
        rest = rest // size
    expected = sum(p.log_prob(c[:, None, None, None]) for p, c in zip(parts, choices))  # (A, 1, 7, 2)
    torch.testing.assert_close(dist.log_prob(joint[:, None, None, None]), expected)
    torch.testing.assert_close(dist.entropy(), sum(p.entropy() for p in parts))


def test_a_mask_still_applies_to_the_joint_actions():
    actor = factored_actor((5, 10), n_agents=1)
    mask = torch.zeros(1, 1, 1, 50, dtype=torch.bool)
    mask[..., 38] = True
    dist, _ = actor(torch.randn(1, 1, 1, 6), action_mask=mask)
    assert dist.sample().item() == 38 and dist.mode().item() == 38


def test_the_order_is_the_envs_move_and_word():
    """A head that prefers move 3 and word 7 picks joint action 7 * 5 + 3, which the port plays as move 3
    (the agent's velocity points that way) and word 7 (its utterance)."""
    env = envs.make_env("torch:simple_reference", 1, 0)
    assert env.action_factors == (5, 10) and env.n_actions == 50
    actor = factored_actor(env.action_factors, obs_dim=env.obs_dim)
    with torch.no_grad():
        actor.net.head.weight.zero_()
        bias = torch.zeros(15)
        bias[3], bias[5 + 7] = 5.0, 5.0
        actor.net.head.bias.copy_(bias)
    obs, _, _ = env.reset()
    action = actor(torch.as_tensor(obs)[None])[0].mode()[0]
    assert action.tolist() == [[38, 38]]
    env.step(action)
    assert env.comm[0].argmax(-1).tolist() == [7, 7]  # both said word 7
    assert (env.vel[0, :2, 1] < 0).all() and (env.vel[0, :2, 0] == 0).all()  # move 3: down (-y), mpe2's table


def test_envs_without_pairs_have_no_factors():
    assert envs.make_env("torch:simple_spread", 1, 0).action_factors is None  # silent movers
    assert envs.make_env("torch:simple_speaker_listener", 1, 0).action_factors is None  # one speaks, one moves
    cont = envs.make_env("torch:simple_reference", 1, 0, {"continuous_actions": True})
    assert cont.action_factors is None


@pytest.mark.parametrize("flags,message", [
    (["--env", "torch:simple_spread"], "no joint discrete actions to factor"),
    (["--env", "torch:simple_reference", "--actor-model", "gnn"], "MLP actor's head"),
])
def test_the_flag_fails_clearly_where_it_cannot_work(flags, message, tmp_path):
    run_dir = tmp_path / "runs"
    out = subprocess.run([sys.executable, "algos/mappo.py", *flags, "--factored-actions", "--run-dir", str(run_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout and message in out.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("algo", ["ippo", "mappo", "happo", "hatrpo", "haa2c", "ia2c", "maa2c", "ipg", "itrpo",
                                  "matrpo", "vda2c", "vdppo", "coma"])
def test_a_run_with_factored_actions_trains_and_plays_back(algo, tmp_path):
    import importlib
    from common.cli import make_args, saved_args
    from common.run_utils import load_checkpoint
    module = importlib.import_module(f"algos.{algo}")
    args = make_args(module.Args, env="torch:simple_reference", num_envs=4, num_steps=25, total_timesteps=400,
                     eval_every=0, eval_episodes=2, eval_num_envs=2, hidden_sizes=(16,), factored_actions=True,
                     cuda=False, run_dir=str(tmp_path))
    module.main(args)
    (run,) = [p.parent for p in tmp_path.glob("*/checkpoint.pt")]
    ckpt = load_checkpoint(str(run))
    saved = module.Args(**saved_args(module.Args, ckpt["args"]))
    assert saved.factored_actions
    env = envs.make_env("torch:simple_reference", 2, 0)
    actor = module.acting_policy(saved, env, ckpt, torch.device("cpu"))
    dist, _ = actor(torch.as_tensor(env.reset()[0])[None], actor.initial_state(2), torch.ones(1, 2, 2))
    assert dist.logits.shape == (1, 2, 2, 50)
