"""Several policies in one run: PPO and IQL groups in algos/ppo_iql.py, modules shared between
policies (nets/shared.py), a centralised critic shared by two actors, and the output check.

- shared_between: both policies hold the same parameter objects under their own names;
  gradients of both losses reach a trained shared module, none reach a frozen one;
- a policy whose output does not fit a loss fails at construction, naming the output expected;
- each group is updated by its own algorithm only; --train-groups keeps a group fixed;
- the weight push (--push-every) into the copy that acts;
- smoke runs on torch:simple_tag and simple_tag, a resume, evaluation against a random side;
- the short copies (GAE, epsilon-greedy, soft update) agree with the files they come from.
"""
import copy
import os

import pytest
import torch
from torch import nn

from algos import ippo, iql, ppo_iql
from common.cli import ConfigError, make_args
from common.groups import agent_names, make_teams
from common.run_utils import evaluate
from envs import make_env
from nets import (MLP, Actor, Critic, DeterministicActor, EncodedPolicy, QPolicy, check_policy_output,
                  gradients_reach, same_parameters, shared_between, trainable_parameters)

TINY = dict(env="torch:simple_tag", env_kwargs=("max_cycles=5",), num_envs=2, num_steps=5, total_timesteps=20,
            eval_episodes=2, eval_num_envs=1, hidden_dim=16, encoder_dim=8, batch_size=2, updates_per_iteration=2,
            update_epochs=2, num_minibatches=2, cuda=False)  # 2 iterations of 2 copies x 5 steps


@pytest.fixture
def tiny(tmp_path):
    """tiny(**overrides) -> ppo_iql.Args with tiny settings and a run_dir under tmp_path."""
    return lambda **overrides: make_args(ppo_iql.Args, **{**TINY, "run_dir": str(tmp_path / "runs"), **overrides})


@pytest.fixture
def run(tiny):
    """run(**overrides) -> (summary, checkpoint) of a tiny ppo_iql run."""

    def go(**overrides):
        summary = ppo_iql.main(tiny(**overrides))
        return summary, torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)

    return go


def same_state(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def tag_networks(shared_encoder="trained"):
    env = make_env("torch:simple_tag", 2, 0, {})
    args = ppo_iql.Args(shared_encoder=shared_encoder, hidden_dim=16, encoder_dim=8)
    mask = torch.as_tensor(env.action_dim_mask)
    actor, critic, q_net = ppo_iql.build_networks(args, env, 3, 1, mask[:3], mask[3:], torch.device("cpu"))
    obs, state, _ = env.reset()
    return actor, critic, q_net, obs, state


def ppo_loss(actor, obs):
    dist, _ = actor(obs[None, :, :3])
    return -(dist.log_prob(dist.sample()) + dist.entropy()).mean()


def q_loss(q_net, obs):
    q, _ = q_net.q_values(obs[None, :, 3:], None, None, None)
    return (q ** 2).mean()


# ----------------------------------------------------------------------------- shared modules
def test_shared_module_is_the_same_object_under_both_names():
    actor, _, q_net, _, _ = tag_networks("trained")
    assert actor.encoder is q_net.embedder and not hasattr(actor, "embedder") and not hasattr(q_net, "encoder")
    assert same_parameters(actor.encoder, q_net.embedder)
    assert all(p is r for p, r in zip(actor.encoder.parameters(), q_net.embedder.parameters()))
    # saved with each policy under its own name; loading either restores the one module
    assert any(k.startswith("encoder.") for k in actor.state_dict())
    assert any(k.startswith("embedder.") for k in q_net.state_dict())
    with pytest.raises(ValueError, match="already has an attribute"):
        shared_between(nn.Linear(2, 2), [(actor, "policy")])


def test_gradients_from_both_losses_reach_a_trained_shared_module():
    actor, _, q_net, obs, _ = tag_networks("trained")
    ppo_loss(actor, obs).backward()
    assert gradients_reach(actor.encoder)
    from_ppo = [p.grad.clone() for p in actor.encoder.parameters()]
    assert all(p.grad is None for p in q_net.policy.parameters())  # PPO's loss never reaches IQL's own layers
    actor.zero_grad(set_to_none=True)
    q_loss(q_net, obs).backward()
    assert gradients_reach(q_net.embedder)
    assert all(p.grad is None for p in actor.policy.parameters())  # nor IQL's loss PPO's
    assert not all(torch.equal(a, p.grad) for a, p in zip(from_ppo, q_net.embedder.parameters()))
    # each learner's optimiser holds the shared module (once)
    enc = set(map(id, actor.encoder.parameters()))
    for params in (trainable_parameters(actor), trainable_parameters(q_net)):
        assert enc <= set(map(id, params)) and len(params) == len(set(map(id, params)))


def test_no_gradient_reaches_a_frozen_shared_module():
    actor, _, q_net, obs, _ = tag_networks("frozen")
    before = copy.deepcopy(actor.encoder.state_dict())
    (ppo_loss(actor, obs) + q_loss(q_net, obs)).backward()
    assert all(p.grad is None and not p.requires_grad for p in actor.encoder.parameters())
    assert gradients_reach(actor.policy) and gradients_reach(q_net.policy)  # the rest still learns
    enc = set(map(id, actor.encoder.parameters()))
    assert not enc & set(map(id, trainable_parameters(actor, q_net)))  # in no optimiser
    opt = torch.optim.Adam(trainable_parameters(actor, q_net), lr=0.1)
    opt.step()
    assert same_state(before, actor.encoder.state_dict())


def test_a_centralised_critic_shared_by_two_actors_is_trained_once_by_one_algorithm():
    """MAPPO-style: one critic on the state serves two groups' actors (their policies hold it as
    `vf`); one optimiser over both policies lists it once, and one loss trains it with both
    groups' value errors."""
    torch.manual_seed(0)
    N1, N2, obs_dim, state_dim, A = 2, 1, 6, 10, 4
    policy_a, policy_b = nn.Module(), nn.Module()
    policy_a.pi = Actor(obs_dim, N1, True, A, torch.ones(N1, A, dtype=torch.bool), True, (16,))
    policy_b.pi = Actor(obs_dim, N2, True, A, torch.ones(N2, A, dtype=torch.bool), True, (16,))
    critic = shared_between(Critic(state_dim, 1, True, (16,)), [(policy_a, "vf"), (policy_b, "vf")])
    assert policy_a.vf is policy_b.vf is critic
    params = trainable_parameters(policy_a, policy_b)
    assert len(params) == len(set(map(id, params))) == (
        len(list(policy_a.parameters())) + len(list(policy_b.pi.parameters())))
    state, target_a, target_b = torch.randn(1, 8, 1, state_dim), torch.randn(1, 8, 1), torch.randn(1, 8, 1)
    loss_a = ((policy_a.vf(state)[0] - target_a) ** 2).mean()
    loss_b = ((policy_b.vf(state)[0] - target_b) ** 2).mean()
    grads = [torch.autograd.grad(loss, list(critic.parameters()), retain_graph=True) for loss in (loss_a, loss_b)]
    (loss_a + loss_b).backward()
    for p, ga, gb in zip(critic.parameters(), *grads):  # both groups' errors reach it, summed
        assert torch.allclose(p.grad, ga + gb)
    before = copy.deepcopy(critic.state_dict())
    torch.optim.SGD(params, lr=0.1).step()  # stepped once: the move is lr * (ga + gb), not twice that
    for (k, old), ga, gb in zip(before.items(), *grads):
        assert torch.allclose(critic.state_dict()[k], old - 0.1 * (ga + gb))


def test_a_head_that_does_not_fit_the_loss_fails_naming_the_output_expected(monkeypatch):
    mask = torch.ones(3, 5, dtype=torch.bool)
    deterministic = DeterministicActor(16, 3, False, 2, torch.ones(3, 2, dtype=torch.bool), True, (16,))
    with pytest.raises(ValueError, match="PPO's loss expects distribution.*log_prob.*DeterministicAction"):
        check_policy_output(deterministic, (16,), 3, "distribution", "PPO")
    with pytest.raises(ValueError, match="PPO's loss expects distribution.*GreedyQ"):
        check_policy_output(QPolicy(16, 5, 3, recurrent="none"), (16,), 3, "distribution", "PPO")
    with pytest.raises(ValueError, match="IQL's loss expects q_values"):
        check_policy_output(Actor(16, 3, True, 5, mask, True, (16,)), (16,), 3, "q_values", "IQL")
    check_policy_output(Actor(16, 3, True, 5, mask, True, (16,)), (16,), 3, "distribution", "PPO")  # fits
    # inside the algorithm: a deterministic head built for the PPO group stops the run at construction
    monkeypatch.setattr(ppo_iql, "Actor", lambda in_shape, n, discrete, A, *rest: DeterministicActor(
        in_shape, n, False, A, torch.ones(n, A, dtype=torch.bool), True, (16,)))
    with pytest.raises(ConfigError, match="expects distribution"):
        tag_networks("none")


# ----------------------------------------------------------------------------- one algorithm per group
def test_each_group_is_updated_by_its_own_algorithm_only(run):
    _, ppo_only = run(train_groups=("adversary",))
    assert ppo_only["ppo_optimizer"]["state"] and not ppo_only["iql_optimizer"]["state"]
    assert same_state(ppo_only["q_net"], ppo_only["target_q"])  # the Q-network never moved
    _, iql_only = run(train_groups=("agent",))
    assert iql_only["iql_optimizer"]["state"] and not iql_only["ppo_optimizer"]["state"]
    assert not same_state(iql_only["q_net"], iql_only["target_q"])
    # same seed, same initial weights: the fixed side ends where it started, whatever the run's length
    _, shorter = run(train_groups=("agent",), total_timesteps=10)
    assert same_state(iql_only["actor"], shorter["actor"]) and same_state(iql_only["critic"], shorter["critic"])
    _, both = run()
    assert not same_state(both["actor"], iql_only["actor"]) and not same_state(both["q_net"], ppo_only["q_net"])


def test_train_groups_and_group_names_are_checked(tiny):
    with pytest.raises(ConfigError, match="adversary_0"):
        ppo_iql.main(tiny(**{"train_groups": ("predator",)}))
    with pytest.raises(ConfigError, match="--ppo-group 'predator'.*adversary: adversary_0"):
        ppo_iql.main(tiny(**{"ppo_group": "predator"}))
    with pytest.raises(ConfigError, match=r"\['agent'\] are learned by neither"):
        ppo_iql.main(tiny(**{"agent_groups": ("adversary_2=lone",)}))
    with pytest.raises(ConfigError, match="one group of agents.*--agent-groups"):
        ppo_iql.main(tiny(**{"env": "torch:simple_spread"}))
    with pytest.raises(ConfigError, match="frozen"):
        ppo_iql.validate(tiny(**{"shared_encoder": "trained", "train_groups": ("agent",)}))
    with pytest.raises(ConfigError, match="must differ"):
        ppo_iql.validate(tiny(**{"ppo_group": "agent", "iql_group": "agent"}))


def test_the_learner_pushes_its_weights_into_the_acting_copy(run):
    _, pushed = run(push_every=1)
    assert same_state(pushed["acting_q"], pushed["q_net"])  # the seed's update_weight, every iteration
    _, never = run(push_every=0)
    assert not same_state(never["acting_q"], never["q_net"])
    _, fixed = run(train_groups=("adversary",), push_every=0)
    assert same_state(never["acting_q"], fixed["q_net"])  # the copy still holds the initial weights


# ----------------------------------------------------------------------------- runs
@pytest.mark.parametrize("env,encoder", [("torch:simple_tag", "trained"), ("simple_tag", "frozen")])
def test_smoke(run, env, encoder):
    summary, ckpt = run(env=env, env_kwargs=("max_cycles=25",), num_steps=25, num_envs=4, total_timesteps=300,
                        shared_encoder=encoder, ppo_group="adversary", iql_group="agent")
    assert summary["global_step"] == 300 and set(summary["eval_group_returns"]) == {"adversary", "agent"}
    losses = summary["final_losses"]
    assert {"policy_loss", "value_loss", "td_loss", "q_taken_mean", "ppo_grad_norm", "iql_grad_norm"} <= set(losses)
    assert all(torch.isfinite(torch.tensor(v)) for k, v in losses.items() if k != "explained_variance")
    assert ckpt["algo"] == "ppo_iql" and ckpt["agent_groups"] == ["adversary"] * 3 + ["agent"]


def test_resume_continues_the_run(run, tiny):
    first, ckpt = run(total_timesteps=20)
    args = tiny(**{"total_timesteps": 40, "resume": first["run_dir"]})
    resumed = ppo_iql.main(args)
    assert resumed["global_step"] == 40 and resumed["run_dir"] == first["run_dir"]
    after = torch.load(os.path.join(first["run_dir"], "checkpoint.pt"), weights_only=True)
    assert after["iteration"] == 4 and len(after["replay"]["episodes"]) == 4


def test_evaluation_against_a_random_side():
    env = make_env("torch:simple_tag", 4, 0, {"max_cycles": 5})
    teams = make_teams(agent_names(env), "group")
    args = ppo_iql.Args(hidden_dim=16)
    ppo_idx, iql_idx = ppo_iql.group_indices(args, teams)
    mask = torch.as_tensor(env.action_dim_mask)
    actor, _, q_net = ppo_iql.build_networks(args, env, 3, 1, mask[:3], mask[3:], torch.device("cpu"))
    greedy = ppo_iql.JointPolicy(actor, q_net, ppo_idx, iql_idx, env.n_actions)
    random_prey = ppo_iql.JointPolicy(actor, q_net, ppo_idx, iql_idx, env.n_actions, ("iql",))
    obs, _, m = env.reset()
    torch.manual_seed(0)
    a, _ = greedy(obs[None], None, None, m[None])
    b, _ = random_prey(obs[None], None, None, m[None])
    assert torch.equal(a.mode()[..., :3], b.mode()[..., :3])  # the predators act as before
    prey = torch.stack([random_prey(obs[None], None, None, m[None])[0].mode()[..., 3] for _ in range(20)])
    assert len(prey.unique()) > 1  # the prey's actions are drawn at random
    returns = evaluate(env, random_prey, 4, torch.device("cpu"), per_agent=True)
    assert returns.shape == (4, 4)


def test_evaluation_records_no_gradients():
    """evaluate runs under torch.no_grad: envs that hand actions to numpy or JAX need tensors
    without a graph, and nothing is learned from evaluation."""
    env = make_env("torch:simple_tag", 2, 0, {"max_cycles": 5})
    actor = Actor(env.obs_dim, env.n_agents, True, env.n_actions, torch.as_tensor(env.action_dim_mask),
                  hidden_sizes=(16,))
    grad_modes = []

    class Recording:
        def initial_state(self, *a):
            return actor.initial_state(*a)

        def __call__(self, *a):
            grad_modes.append(torch.is_grad_enabled())
            return actor(*a)

    assert torch.is_grad_enabled()
    evaluate(env, Recording(), 2, torch.device("cpu"))
    assert grad_modes and not any(grad_modes)


# ----------------------------------------------------------------------------- the short copies
def test_copied_functions_agree_with_their_sources():
    g = torch.Generator().manual_seed(0)
    r, v, nv = (torch.randn(6, 3, 2, generator=g) for _ in range(3))
    term = (torch.rand(6, 3, 2, generator=g) < 0.2).float()
    trunc = (torch.rand(6, 3, 2, generator=g) < 0.2).float()
    for x, y in zip(ppo_iql.compute_gae(r, v, nv, term, trunc, 0.9, 0.8), ippo.compute_gae(r, v, nv, term, trunc, 0.9, 0.8)):
        assert torch.equal(x, y)
    q, mask = torch.randn(5, 3, 4, generator=g), torch.rand(5, 3, 4, generator=g) < 0.7
    mask[..., 0] = True
    torch.manual_seed(1)
    ours = ppo_iql.epsilon_greedy(q, mask, 0.5)
    torch.manual_seed(1)
    assert torch.equal(ours, iql.epsilon_greedy(q, mask, 0.5))
    a, b = MLP(3, (4,), 2), MLP(3, (4,), 2)
    a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
    ppo_iql.soft_update(a, b, 0.3)
    iql.soft_update(a2, b2, 0.3)
    assert same_state(a.state_dict(), a2.state_dict())
    assert torch.equal(ppo_iql.masked_mean(r, term), iql.masked_mean(r, term))


def test_encoded_policy_keeps_the_interfaces_it_wraps():
    enc = MLP(16, (8,), activation="relu")
    q = EncodedPolicy(QPolicy(8, 5, 2, recurrent="none"), "embedder", enc)
    greedy, state = q(torch.zeros(1, 3, 2, 16))
    assert greedy.q.shape == (1, 3, 2, 5) and q.remember(state, torch.zeros(3, 2)) is None
    assert q.q_values(torch.zeros(1, 3, 2, 16), None, None, None)[0].shape == (1, 3, 2, 5)
    critic = Critic(16, 2, True, (8,))
    assert critic(torch.zeros(1, 3, 2, 16))[0].shape == (1, 3, 2)
