"""ITRPO, MATRPO, HATRPO, HAPPO and HAA2C: conjugate gradient on a small SPD system, the
Fisher-vector product against the explicit Hessian of the KL on a tiny network, the TRPO step
(KL within the limit, surrogate not decreased, rejection leaves the actor alone), the
heterogeneous-agent weighting factor against the product of the earlier agents' ratios in the
drawn order, per-agent optimisers that leave the other agents' weights alone, the copied pure
functions against one reference on worked inputs (their text: tests/test_copies.py), smoke runs on two envs (and the heterogeneous speaker-listener),
determinism, checkpoints and the command line. Learning checks live in benchmarks/."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from algos import haa2c, happo, hatrpo, ippo, itrpo, mappo, matrpo, vdppo
from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, make_args
from nets import Actor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = {"itrpo": itrpo, "matrpo": matrpo, "hatrpo": hatrpo, "happo": happo, "haa2c": haa2c}
TRPO = [itrpo, matrpo, hatrpo]
HA = {"hatrpo": hatrpo, "happo": happo, "haa2c": haa2c}
LOSS_KEYS = {
    "itrpo": {"policy_loss", "value_loss", "entropy", "kl", "step_fraction", "grad_norm", "explained_variance"},
    "happo": {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "explained_variance"},
    "haa2c": {"policy_loss", "value_loss", "entropy", "grad_norm", "explained_variance"},
}
LOSS_KEYS["matrpo"] = LOSS_KEYS["hatrpo"] = LOSS_KEYS["itrpo"]
# 2 iterations of 2 envs x 5 steps on 5-step episodes; HAA2C has no --num-minibatches, the others two epochs
SMALL = dict(env="torch:simple_spread", env_kwargs=("max_cycles=5",), num_envs=2, num_steps=5, total_timesteps=20,
             eval_episodes=2, eval_num_envs=1, hidden_sizes=(16,), cuda=False)
CONTINUOUS = dict(env="simple_spread", env_kwargs=("max_cycles=5", "continuous_actions=true"))  # PettingZoo mpe2
LISTENER = dict(env="simple_speaker_listener", env_kwargs=("max_cycles=5",))  # obs 3 and 11, actions 3 and 5


@pytest.fixture
def small(tmp_path):
    """small(module, **overrides) -> module.Args with tiny CPU settings and a run_dir under tmp_path."""

    def build(module, **overrides):
        return make_args(module.Args, **{**SMALL, "run_dir": str(tmp_path / "runs"), **overrides})

    return build


# ----------------------------------------------------------------------------- tiny problems
def tiny_actor(discrete=True, share_params=False, seed=0):
    """2 agents, obs 3, 4 actions (agent 1 has only 3: the adapter's padding mask), one hidden layer of 4."""
    torch.manual_seed(seed)
    dim_mask = torch.tensor([[True] * 4, [True, True, True, False]])
    return Actor(3, 2, discrete, 4, dim_mask, share_params, hidden_sizes=(4,)).double()


def tiny_rollout(actor, team=False, seed=0, B=6):
    """A rollout of B steps of the tiny actor, laid out as the update sees it: (L=1, B, N, ...)."""
    g = torch.Generator().manual_seed(seed)
    d = {"obs": torch.randn(1, B, 2, 3, generator=g, dtype=torch.float64),
         "episode_starts": torch.zeros(1, B, 2, dtype=torch.float64),
         "alive": torch.ones(1, B, 2, dtype=torch.float64)}
    d["alive"][0, 0, 1] = 0.0  # one dead agent step: it must not count
    with torch.no_grad():
        dist, _ = actor(d["obs"], None, d["episode_starts"])
        d["actions"] = dist.sample()
        d["log_probs"] = dist.log_prob(d["actions"])
    shape = (1, B) if team else (1, B, 2)
    d["advantages"] = torch.randn(*shape, generator=g, dtype=torch.float64)
    return d, dist


# ----------------------------------------------------------------------------- conjugate gradient
@pytest.mark.parametrize("algo", TRPO, ids=lambda m: m.__name__)
def test_conjugate_gradient_solves_small_spd_systems(algo):
    """Three independent 5x5 symmetric positive-definite systems, solved together: in exact
    arithmetic CG finishes in 5 iterations; each row must match torch.linalg.solve."""
    g = torch.Generator().manual_seed(0)
    M = torch.randn(3, 5, 5, generator=g, dtype=torch.float64)
    A = M @ M.transpose(1, 2) + 0.5 * torch.eye(5, dtype=torch.float64)  # (G, P, P)
    b = torch.randn(3, 5, generator=g, dtype=torch.float64)
    x = algo.conjugate_gradient(lambda v: torch.einsum("gij,gj->gi", A, v), b, iters=10)
    torch.testing.assert_close(x, torch.linalg.solve(A, b))
    # a row that is already solved (b = 0) stays at 0 while the others move
    b[1] = 0.0
    x = algo.conjugate_gradient(lambda v: torch.einsum("gij,gj->gi", A, v), b, iters=10)
    assert torch.equal(x[1], torch.zeros(5, dtype=torch.float64))
    torch.testing.assert_close(x[0], torch.linalg.solve(A[0], b[0]))


# ----------------------------------------------------------------------------- Fisher-vector product
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("share_params", [False, True], ids=["separate", "shared"])
def test_fisher_vector_product_is_the_hessian_of_the_kl(discrete, share_params):
    """On a tiny network, F v from the double-backward trick equals H v with H the explicit
    Hessian of the mean KL(pi_old || pi_theta) at theta_old; with separate parameters H is block
    diagonal: one agent's parameters do not move another agent's KL."""
    actor = tiny_actor(discrete, share_params)
    d, old_dist = tiny_rollout(actor)
    theta_old = itrpo.flat_params(actor)  # (G, P), G = 1 if share_params else 2

    def kl(theta):
        return itrpo.surrogate_and_kl(actor, theta, d, None, old_dist)[1].sum()

    H = torch.autograd.functional.hessian(kl, theta_old)  # (G, P, G, P)
    v = torch.randn(theta_old.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    theta = theta_old.clone().requires_grad_(True)
    kl_grad = torch.autograd.grad(kl(theta), theta, create_graph=True)[0]
    torch.testing.assert_close(kl_grad, torch.zeros_like(kl_grad), atol=1e-12, rtol=0)  # a minimum at theta_old
    for algo in TRPO:
        fv = algo.fisher_vector_product(kl_grad, theta, v, damping=0.0)
        torch.testing.assert_close(fv, torch.einsum("gpkq,kq->gp", H, v))
        torch.testing.assert_close(algo.fisher_vector_product(kl_grad, theta, v, damping=0.1), fv + 0.1 * v)
    if not share_params:
        assert H[0, :, 1].abs().max() == 0 and H[1, :, 0].abs().max() == 0
    assert (torch.einsum("gp,gpkq,kq->", v, H, v)) > 0  # the Fisher matrix is positive (semi-)definite


# ----------------------------------------------------------------------------- the TRPO step
@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("share_params", [False, True], ids=["separate", "shared"])
@pytest.mark.parametrize("algo", [itrpo, matrpo], ids=lambda m: m.__name__)
def test_trpo_step_keeps_the_kl_within_the_limit_and_improves_the_surrogate(algo, discrete, share_params):
    actor = tiny_actor(discrete, share_params)
    d, old_dist = tiny_rollout(actor)
    theta_old = algo.flat_params(actor)  # (G, P), G = 1 if share_params else 2
    surrogate_old, _ = algo.surrogate_and_kl(actor, theta_old, d, None, old_dist)
    for max_kl in (0.01, 0.5):  # the second limit is loose enough that the line search has work to do
        for p, value in zip(actor.parameters(), algo.as_param_dict(actor, theta_old).values()):
            p.data.copy_(value)
        stats = algo.trpo_step(actor, d, None, max_kl, damping=0.01, cg_iters=10, backtrack_coef=0.5,
                               backtrack_iters=10)
        with torch.no_grad():
            surrogate, kl = algo.surrogate_and_kl(actor, algo.flat_params(actor), d, None, old_dist)
        assert stats["step_fraction"] > 0
        assert (kl <= max_kl).all(), (kl, max_kl)  # every agent's own trust region, or the shared one
        assert (surrogate > surrogate_old).all()
        assert stats["kl"] == pytest.approx(algo.masked_mean(algo.policy_kl(old_dist, actor(
            d["obs"], None, d["episode_starts"])[0]), d["alive"]).item())


@pytest.mark.parametrize("algo", [itrpo, matrpo], ids=lambda m: m.__name__)
def test_trpo_step_without_an_acceptable_step_leaves_the_actor_alone(algo):
    """With zero advantages no step improves the surrogate: every trial is rejected."""
    actor = tiny_actor()
    d, _ = tiny_rollout(actor)
    before = [p.detach().clone() for p in actor.parameters()]
    d["advantages"] = torch.zeros_like(d["advantages"])
    stats = algo.trpo_step(actor, d, None, 0.01, damping=0.1, cg_iters=10, backtrack_coef=0.5, backtrack_iters=5)
    assert stats["step_fraction"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, actor.parameters()))


@pytest.mark.parametrize("discrete", [True, False], ids=["discrete", "continuous"])
@pytest.mark.parametrize("algo", [itrpo, matrpo], ids=lambda m: m.__name__)
def test_trpo_step_gives_each_group_its_trust_region_and_leaves_a_fixed_group_alone(algo, discrete):
    """--share-params group: agents 0 and 1 share set 0, agent 2 has set 1 (and its own log-std row, padded in
    the flat layout). Each set improves within its own KL limit; a set whose agents do not learn (no live step
    under the mask: a group left out of --train-groups) takes no step, without a NaN, and stays bit-identical."""
    torch.manual_seed(0)
    actor = Actor(3, 3, discrete, 4, torch.ones(3, 4, dtype=torch.bool), [0, 0, 1], hidden_sizes=(4,)).double()
    g = torch.Generator().manual_seed(0)
    d = {"obs": torch.randn(1, 8, 3, 3, generator=g, dtype=torch.float64),
         "episode_starts": torch.zeros(1, 8, 3, dtype=torch.float64), "alive": torch.ones(1, 8, 3, dtype=torch.float64)}
    with torch.no_grad():
        old_dist, _ = actor(d["obs"], None, d["episode_starts"])
    d["actions"] = old_dist.sample()
    d["log_probs"], d["advantages"] = old_dist.log_prob(d["actions"]), torch.randn(1, 8, 3, generator=g).double()
    theta_old = algo.flat_params(actor)  # (2, P)
    assert all(torch.equal(a, b) for a, b in zip(algo.as_param_dict(actor, theta_old).values(), actor.parameters()))
    surrogate_old, _ = algo.surrogate_and_kl(actor, theta_old, d, None, old_dist)
    algo.trpo_step(actor, d, None, 0.5, damping=0.01, cg_iters=10, backtrack_coef=0.5, backtrack_iters=10)
    surrogate, kl = algo.surrogate_and_kl(actor, algo.flat_params(actor), d, None, old_dist)
    assert theta_old.shape[0] == 2 and (kl <= 0.5).all() and (surrogate > surrogate_old).all()
    for p, value in zip(actor.parameters(), algo.as_param_dict(actor, theta_old).values()):
        p.data.copy_(value)
    d["alive"][..., 2] = 0.0  # agent 2's group is fixed
    stats = algo.trpo_step(actor, d, None, 0.5, damping=0.01, cg_iters=10, backtrack_coef=0.5, backtrack_iters=10)
    theta = algo.flat_params(actor)
    assert torch.equal(theta[1], theta_old[1]) and not torch.equal(theta[0], theta_old[0])
    assert all(math.isfinite(v) for v in stats.values())


def test_hatrpo_agent_step_moves_only_its_agent_within_its_trust_region():
    actor = tiny_actor(discrete=False)
    d, old_dist = tiny_rollout(actor, team=True)
    factor = torch.rand(1, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5  # (L, S)
    theta_all = hatrpo.flat_agent_params(actor, 2)
    surrogate_old, _ = hatrpo.agent_surrogate_and_kl(actor, theta_all[1:], theta_all, 1, d, None, old_dist, factor)
    fraction, surrogate = hatrpo.agent_trpo_step(actor, d, None, old_dist, 1, factor, 0.01, 0.01, 10, 0.5, 10)
    theta_new = hatrpo.flat_agent_params(actor, 2)
    assert fraction > 0 and surrogate > surrogate_old.item()
    assert torch.equal(theta_new[0], theta_all[0]) and not torch.equal(theta_new[1], theta_all[1])
    _, kl = hatrpo.agent_surrogate_and_kl(actor, theta_new[1:], theta_new, 1, d, None, old_dist, factor)
    assert kl.item() <= 0.01


# ----------------------------------------------------------------------------- per-agent optimisers
def test_one_adam_per_agent_leaves_the_other_agents_weights_bit_identical():
    """HAPPO and HAA2C give each agent an Adam over the whole stacked actor; a loss on one agent's
    slice has zero gradient elsewhere, so Adam's moments and steps there stay exactly zero."""
    actor = tiny_actor(discrete=False).float()
    optimizers = [torch.optim.Adam(actor.parameters(), lr=0.1) for _ in range(2)]
    x, target = torch.randn(1, 8, 2, 3), torch.randn(1, 8, 2, 4)
    for step in range(3):
        for agent in (1, 0, 1):
            before = [p.detach().clone() for p in actor.parameters()]
            dist, _ = actor(x)
            loss = -dist.log_prob(target)[..., agent].mean() * (step + 1)
            optimizers[agent].zero_grad()
            loss.backward()
            optimizers[agent].step()
            for p, b in zip(actor.parameters(), before):
                assert torch.equal(p[1 - agent], b[1 - agent])
                assert not torch.equal(p[agent], b[agent])


# ----------------------------------------------------------------------------- the heterogeneous-agent factor
def check_factors(calls, actor, n_agents):
    """calls: [(agent, factor, d)] of one update, in the order the agents updated. The actor's
    parameters after the update are each agent's parameters after its own turn, so the factor
    of the agent in position k must be the product over positions j < k of pi_new / pi_old."""
    order = [agent for agent, _, _ in calls]
    assert sorted(order) == list(range(n_agents))
    for k, (agent, factor, d) in enumerate(calls):
        with torch.no_grad():
            dist, _ = actor(d["obs"], None, d["episode_starts"], d.get("action_masks"))
        expected = torch.ones_like(factor)
        for earlier in order[:k]:
            ratio = (dist.log_prob(d["actions"])[..., earlier] - d["log_probs"][..., earlier]).exp()
            expected = expected * torch.where(d["alive"][..., earlier].bool(), ratio, torch.ones_like(ratio))
        torch.testing.assert_close(factor, expected, rtol=1e-5, atol=1e-6)
    return order


@pytest.mark.parametrize("name", HA)
def test_factor_is_the_product_of_the_earlier_agents_ratios_in_the_drawn_order(small, monkeypatch, name):
    """Five iterations on the torch simple_spread; each update's agent order and the factor each
    agent weighed its advantage with are recorded, and the factors are recomputed from the final
    actor. The orders must be permutations that change between updates."""
    module = HA[name]
    calls, built = [], {}
    build = module.build_networks
    monkeypatch.setattr(module, "build_networks", lambda *a: built.setdefault("nets", build(*a)))
    if module is hatrpo:
        step = hatrpo.agent_trpo_step

        def record(actor, d, a_state, old_dist, agent, factor, *rest):
            calls.append((agent, factor.clone(), d))
            return step(actor, d, a_state, old_dist, agent, factor, *rest)

        monkeypatch.setattr(hatrpo, "agent_trpo_step", record)
        overrides = dict(max_kl=0.05)
    else:
        loss_name = "agent_clipped_loss" if module is happo else "agent_policy_loss"
        loss = getattr(module, loss_name)

        def record(dist, d, agent, factor, *rest):
            calls.append((agent, factor.detach().clone(), d))
            return loss(dist, d, agent, factor, *rest)

        monkeypatch.setattr(module, loss_name, record)
        overrides = dict(learning_rate=0.05, anneal_lr=False)
        if module is happo:
            overrides.update(update_epochs=1, num_minibatches=1)
    module.main(small(module, total_timesteps=50, **overrides))
    steps = len(calls) // (5 * 3)  # calls per agent turn: HAA2C's default 5 steps, else 1
    assert len(calls) == 5 * 3 * steps
    for i in range(0, len(calls), steps):  # within one turn the agent and its factor stay the same
        assert all(a == calls[i][0] and torch.equal(f, calls[i][1]) for a, f, _ in calls[i:i + steps])
    calls = calls[::steps]
    orders = [tuple(a for a, _, _ in calls[i:i + 3]) for i in range(0, 15, 3)]
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len(set(orders)) > 1
    check_factors(calls[-3:], built["nets"][0], 3)
    last_factor = calls[-1][1]
    assert (last_factor - 1).abs().max() > 1e-3  # the earlier agents did move: the check is not trivial
    assert torch.equal(calls[-3][1], torch.ones_like(calls[-3][1]))  # the first agent's factor is 1


# ----------------------------------------------------------------------------- copies agree
@pytest.mark.parametrize("seed", [0, 1])
def test_copies_agree_with_the_references_numerically(seed):
    g = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(7, 3, 2, generator=g) for _ in range(3)]
    flags = [(torch.rand(7, 3, 2, generator=g) < 0.25).float() for _ in range(2)]
    for module in ALGOS.values():
        a, b = module.compute_gae(*tensors, *flags, 0.95, 0.9), mappo.compute_gae(*tensors, *flags, 0.95, 0.9)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert torch.equal(module.masked_mean(tensors[0], flags[0]), mappo.masked_mean(tensors[0], flags[0]))
    for module in (itrpo, matrpo, hatrpo, happo):
        x = torch.randn(10, 3, 2, 4, generator=g)
        assert torch.equal(module.to_chunks(x, 5), mappo.to_chunks(x, 5))
    ends = torch.zeros(7, 3, 2)
    ends[2] = 1.0
    for module in HA.values():
        for a, b in zip(module.team_flags(flags[1], ends), vdppo.team_flags(flags[1], ends)):
            assert torch.equal(a, b)
    obs, state = torch.randn(4, 3, 5, generator=g), torch.randn(4, 15, generator=g)
    assert torch.equal(itrpo.local_critic_inputs(obs, state), ippo.local_critic_inputs(obs, state))
    for kind in ("state", "concat_obs"):
        # mappo's (E, 1, D) is one input for every agent (stored once per env copy; nets.Critic broadcasts it)
        once = mappo.critic_inputs(obs, state, kind).expand(4, 3, -1)
        assert torch.equal(matrpo.critic_inputs(obs, state, kind), once)


# ----------------------------------------------------------------------------- smoke runs
def check_summary(summary, algo, args):
    assert summary["algo"] == algo and summary["env"] == args.env and summary["seed"] == args.seed
    assert summary["global_step"] == args.num_iterations * args.num_steps * args.num_envs
    assert summary["eval_episodes"] == args.eval_episodes and math.isfinite(summary["eval_return_mean"])
    assert set(summary["final_losses"]) == LOSS_KEYS[algo]
    for key, value in summary["final_losses"].items():
        assert math.isfinite(value), (key, value)
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    for name in ("checkpoint.pt", "args.json"):
        assert os.path.isfile(os.path.join(summary["run_dir"], name))


def recurrent_settings(algo, recurrent):
    if recurrent == "none" or algo == "haa2c":  # HAA2C replays each copy's whole rollout
        return dict(recurrent=recurrent)
    return dict(recurrent=recurrent, num_steps=6, chunk_len=3, total_timesteps=24, num_minibatches=2)


# (algo, env settings, extra settings): both envs, both action kinds, every core, per algorithm
SMOKE = [(name, env, extra) for name, runs in {
    "itrpo": [({}, dict(recurrent="none")), (CONTINUOUS, dict(recurrent="gru", share_params="none")),
              (LISTENER, dict(recurrent="lstm", share_params="none"))],
    "matrpo": [({}, dict(recurrent="lstm", share_params="none")), (CONTINUOUS, dict(recurrent="none")),
               (LISTENER, dict(recurrent="gru", critic_input="concat_obs"))],
    "hatrpo": [({}, dict(recurrent="gru")), (CONTINUOUS, dict(recurrent="lstm")), (LISTENER, dict(recurrent="none"))],
    "happo": [({}, dict(recurrent="lstm")), (CONTINUOUS, dict(recurrent="none")), (LISTENER, dict(recurrent="gru"))],
    "haa2c": [({}, dict(recurrent="none")), (CONTINUOUS, dict(recurrent="gru")), (LISTENER, dict(recurrent="lstm"))],
}.items() for env, extra in runs]


@pytest.mark.parametrize("algo,env,extra", SMOKE, ids=[
    f"{a}-{e.get('env', 'torch')}-{'cont' if e is CONTINUOUS else 'disc'}-{x['recurrent']}" for a, e, x in SMOKE])
def test_smoke(small, algo, env, extra):
    module = ALGOS[algo]
    args = small(module, **{**env, **extra, **recurrent_settings(algo, extra["recurrent"])})
    check_summary(module.main(args), algo, args)


@pytest.mark.parametrize("name", HA)
def test_heterogeneous_agents_keep_their_true_action_sizes(small, monkeypatch, name):
    """Speaker (3 actions, obs 3) and listener (5 actions, obs 11) on separate stacked weights: the
    speaker never picks a padded action, and no loss sees a NaN from the masked logits."""
    batches, batch = [], MultiAgentRolloutBuffer.batch

    def batch_and_keep(self, device=None, keys=None):
        batches.append(batch(self, device, keys))
        return batches[-1]

    monkeypatch.setattr(MultiAgentRolloutBuffer, "batch", batch_and_keep)
    module = HA[name]
    args = small(module, **LISTENER, total_timesteps=40)
    check_summary(module.main(args), name, args)
    actions = torch.cat([b["actions"] for b in batches])  # (T, E, N)
    assert actions[..., 0].max() < 3 and actions[..., 1].max() >= 3
    assert (torch.cat([b["obs"] for b in batches])[..., 0, 3:] == 0).all()  # speaker's obs: 3, padded to 11


# ----------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_losses(small, tmp_path, algo):
    module = ALGOS[algo]
    runs = [module.main(small(module, seed=seed, run_dir=str(tmp_path / f"run{i}")))
            for i, seed in enumerate((3, 3, 4))]
    assert runs[0]["final_losses"] == runs[1]["final_losses"]
    assert runs[0]["eval_return_mean"] == runs[1]["eval_return_mean"]
    assert runs[0]["final_losses"] != runs[2]["final_losses"]


# ----------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("algo", ALGOS)
def test_checkpoint_resume_and_evaluate(small, algo):
    module, per_iteration = ALGOS[algo], 2 * 5
    first = module.main(small(module, total_timesteps=2 * per_iteration, checkpoint_every=per_iteration))
    run_path = first["run_dir"]
    resumed = module.main(small(module, total_timesteps=4 * per_iteration, resume=run_path))
    assert resumed["global_step"] == 4 * per_iteration and resumed["run_dir"] == run_path
    ckpt = torch.load(os.path.join(run_path, "checkpoint.pt"), weights_only=True)
    assert ckpt["algo"] == algo and ckpt["global_step"] == 4 * per_iteration and ckpt["iteration"] == 4
    epochs = module.Args().update_epochs
    critic = ckpt["critic_optimizer"] if "critic_optimizer" in ckpt else ckpt["optimizer"]
    assert critic["state"][0]["step"].item() == 4 * epochs  # the critic's Adam went on from the saved one
    if "actor_optimizers" in ckpt:  # one Adam per agent, each stepped in its own turns only
        assert [o["state"][0]["step"].item() for o in ckpt["actor_optimizers"]] == [4 * epochs] * 3
    result = module.main(small(module, evaluate_checkpoint=run_path, eval_episodes=3))
    assert result["eval_episodes"] == 3 and math.isfinite(result["eval_return_mean"])
    other = happo if module is not happo else hatrpo
    with pytest.raises(ConfigError, match=f"algos/{algo}.py"):
        other.main(small(other, evaluate_checkpoint=run_path))


# ----------------------------------------------------------------------------- refused options
def test_unsupported_options_fail_with_a_clear_config_error(small):
    for module in TRPO:
        with pytest.raises(ConfigError, match="--max-kl"):
            module.main(small(module, max_kl=0.0))
        with pytest.raises(ConfigError, match="--backtrack-coef"):
            module.main(small(module, backtrack_coef=1.0))
        with pytest.raises(ConfigError, match="--cg-iters"):
            module.main(small(module, cg_iters=0))
        with pytest.raises(ConfigError, match="unknown argument"):
            small(module, ent_coef=0.01)  # no entropy bonus in TRPO
    for module in HA.values():
        with pytest.raises(ConfigError, match="--share-params must be all, group or none"):
            module.main(small(module, share_params=True))  # the old boolean, which HA files never had
    with pytest.raises(ConfigError, match="--update-epochs"):
        haa2c.main(small(haa2c, update_epochs=0))


# ----------------------------------------------------------------------------- the command line
def test_command_line(tmp_path):
    """One real CLI call per algorithm, run side by side."""
    procs = {name: subprocess.Popen(
        [sys.executable, f"algos/{name}.py", "--env", "torch:simple_spread", "--env-kwargs", "max_cycles=5",
         "--num-envs", "2", "--num-steps", "5", "--total-timesteps", "10", "--eval-episodes", "1",
         "--eval-num-envs", "1", "--hidden-sizes", "16", "--no-cuda", "--run-dir", str(tmp_path / name)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in ALGOS}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        (run,) = os.listdir(tmp_path / name)
        with open(tmp_path / name / run / "summary.json") as f:
            assert json.load(f)["algo"] == name
