"""HATD3 and HADDPG (algos/hatd3.py, algos/haddpg.py): the sequential actor update worked by hand (agent i_m's
loss is conditioned on the already-updated agents' NEW actions, the others start from their current policies,
only its own parameters move), team flags, the team critic's heads, delayed actor steps and random orders; the
copied short functions against their references on worked inputs (their text: tests/test_copies.py); smoke runs (cooperative, heterogeneous sizes, two learning
teams), fixed groups, resume, evaluation, determinism and one real command line each."""
import copy
import glob
import importlib
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from common.cli import ConfigError, make_args
from nets import DeterministicActor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ["hatd3", "haddpg"]
MODULES = {name: importlib.import_module(f"algos.{name}") for name in ALGOS}
MADDPG, MATD3 = importlib.import_module("algos.maddpg"), importlib.import_module("algos.matd3")
LOSS_KEYS = {"td_loss", "policy_loss", "q_taken_mean", "target_mean", "grad_norm", "actor_grad_norm"}


def tiny(algo, tmp_path, **overrides):
    """4 iterations of 2 env copies x 5 steps, random actions in the first, 2 updates after each, 16-unit networks."""
    base = dict(num_envs=2, num_steps=5, total_timesteps=40, learning_starts=10, buffer_size=100, batch_size=2,
                updates_per_iteration=2, hidden_sizes=(16,), eval_every=0, eval_episodes=2, eval_num_envs=1,
                checkpoint_every=0, cuda=False, torch_threads=1, run_dir=str(tmp_path / "runs"),
                env="torch:simple_spread")
    base.update(overrides)
    return make_args(MODULES[algo].Args, **base)


# ---------------------------------------------------------------------------- the sequential update by hand
class ProductCritic(torch.nn.Module):
    """A stand-in team critic on two agents with one action dimension each: Q(s, a) = a_0 * a_1 (one team).
    It records the joint action of every call, so a test can see what each agent was conditioned on."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        _, joint = x  # info (B, K, D), joint (B, K, N * A)
        self.seen.append(joint.detach().clone())
        return joint[..., 0] * joint[..., 1], None  # (B, K)


def two_agents(seed=0):
    torch.manual_seed(seed)
    actor = DeterministicActor(3, 2, False, 1, torch.ones(2, 1, dtype=torch.bool), share_params=False,
                               hidden_sizes=(8,))
    return actor, torch.randn(16, 2, 3), torch.randn(16, 4)  # actor, obs (B, N, 3), info (B, D)


def by_hand(actor, obs, order, replay, lr, new_actions_for_later=True):
    """The expected sequential step, written out: each agent in `order` takes one SGD step on
    -mean(a_0 a_1) with its own action differentiable and the other's fixed at the current joint value,
    which holds every agent's CURRENT action and, for agents already updated, their NEW one."""
    actor = copy.deepcopy(actor)
    with torch.no_grad():
        joint = actor.output(obs).clone()  # current policies, not `replay`
    del replay
    for agent in order:
        own = actor.output(obs)[:, agent, 0]
        other = joint[:, 1 - agent, 0]
        loss = -(own * other).mean()
        actor.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in actor.parameters():
                p -= lr * p.grad
            if new_actions_for_later:
                joint[:, agent] = actor.output(obs)[:, agent]
    return actor


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("order", [[0, 1], [1, 0]])
def test_sequential_update_conditions_each_agent_on_the_updated_agents_new_actions(algo, order):
    m = MODULES[algo]
    actor, obs, info = two_agents()
    start = copy.deepcopy(actor)
    replay = torch.rand(16, 2, 1) * 2 - 1  # what the agents played: the update must not use it for learners
    critic = ProductCritic()
    optimizers = [torch.optim.SGD(actor.parameters(), lr=0.5) for _ in range(2)]  # one per agent, as in main
    loss, _ = m.sequential_actor_update(actor, critic, optimizers, [0, 1], order, [0, 0], obs, info, replay,
                                        torch.ones(2, 1, dtype=torch.bool), torch.ones(16, 2), max_grad_norm=1e9)
    with torch.no_grad():
        before, after = start.output(obs), actor.output(obs)  # (B, 2, 1)
    first, second = order
    # the first agent saw every agent's current action (not the replay's); the second saw the first's NEW action
    assert torch.equal(critic.seen[0][:, 0], before.reshape(16, 2))
    assert torch.equal(critic.seen[1][:, 0, first], after[:, first, 0])
    assert not torch.allclose(after[:, first], before[:, first])  # (the first agent did move)
    assert torch.equal(critic.seen[1][:, 0, second], before[:, second, 0])  # its own slot, before its step
    # the parameters equal the update written out by hand, and differ from the simultaneous version
    expected = by_hand(start, obs, order, replay, lr=0.5)
    simultaneous = by_hand(start, obs, order, replay, lr=0.5, new_actions_for_later=False)
    for p, q, r in zip(actor.parameters(), expected.parameters(), simultaneous.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    second_rows = [(p[second], r[second]) for p, r in zip(actor.parameters(), simultaneous.parameters())]
    assert any(not torch.allclose(p, r) for p, r in second_rows)
    assert math.isfinite(loss.item())


@pytest.mark.parametrize("algo", ALGOS)
def test_an_agent_moves_only_its_own_parameters_and_fixed_agents_keep_their_played_action(algo):
    """Agent 1 is fixed (learning False): it is not in the order, the joint action holds its replay action,
    its rows of the stacked weights stay bit for bit (Adam: zero gradients there, zero moments, zero steps)."""
    m = MODULES[algo]
    actor, obs, info = two_agents(1)
    start = copy.deepcopy(actor)
    replay = torch.rand(16, 2, 1) * 2 - 1
    critic = ProductCritic()
    optimizers = [torch.optim.Adam(actor.parameters(), lr=0.01) for _ in range(2)]
    learning = torch.tensor([[True], [False]])
    m.sequential_actor_update(actor, critic, optimizers, [0, 1], [0], [0, 0], obs, info, replay, learning,
                              torch.ones(16, 2), max_grad_norm=1e9)
    assert torch.equal(critic.seen[0][:, 0, 1], replay[:, 1, 0])
    for p, q in zip(actor.parameters(), start.parameters(), strict=True):
        assert torch.equal(p[1], q[1]) and not torch.equal(p[0], q[0])


@pytest.mark.parametrize("algo", ALGOS)
def test_dead_steps_take_no_part_in_the_actor_loss(algo):
    m = MODULES[algo]
    actor, obs, info = two_agents(2)
    alive = torch.ones(16, 2)
    alive[8:, 0] = 0.0
    results = []
    for scale in (1.0, 1e3):  # whatever the critic says at agent 0's dead steps changes nothing
        a, critic = copy.deepcopy(actor), ProductCritic()
        info_b = info.clone()
        weight = torch.ones(16, 1)
        weight[8:] = scale

        def scaled(x, critic=critic, weight=weight):
            q, _ = critic(x)
            return q * weight, None

        m.sequential_actor_update(a, scaled, [torch.optim.SGD(a.parameters(), lr=0.1)] * 2, [0, 1], [0], [0, 0],
                                  obs, info_b, torch.zeros(16, 2, 1), torch.ones(2, 1, dtype=torch.bool), alive, 1e9)
        results.append([p.detach().clone() for p in a.parameters()])
    for p, q in zip(*results, strict=True):
        assert torch.equal(p, q)


# ---------------------------------------------------------------------------- small pieces
def test_team_flags_by_hand():
    m = MODULES["hatd3"]
    # one team of agents 0, 1; rows: both truncated by the clock / agent 0 terminated, agent 1 goes on /
    # agent 0 already gone, agent 1 terminates / agent 0 gone, agent 1 truncated / both gone
    dones = torch.tensor([[0.0, 0], [1, 0], [0, 1], [0, 0], [0, 0]])
    truncated = torch.tensor([[1.0, 1], [0, 0], [0, 0], [0, 1], [0, 0]])
    alive = torch.tensor([[1.0, 1], [1, 1], [0, 1], [0, 1], [0, 0]])
    terminated, ended, team_alive = m.learning_team_flags(dones, truncated, alive, [[0, 1]])
    assert terminated[:, 0].tolist() == [0, 0, 1, 0, 1]
    assert ended[:, 0].tolist() == [1, 0, 1, 1, 1]
    assert team_alive[:, 0].tolist() == [1, 1, 1, 1, 0]
    # two teams stay apart
    terminated, ended, _ = m.learning_team_flags(dones, truncated, alive, [[0], [1]])
    assert terminated.shape == (5, 2) and terminated[:, 0].tolist() == [0, 1, 1, 1, 1]


def test_every_team_critic_head_sees_the_same_state_and_joint_action():
    info, joint = torch.randn(4, 5), torch.randn(4, 3, 2)
    x_info, x_joint = MODULES["hatd3"].team_critic_inputs(info, joint, 2)
    assert x_info.shape == (4, 2, 5) and x_joint.shape == (4, 2, 6)
    assert torch.equal(x_joint[:, 1], joint.reshape(4, 6)) and torch.equal(x_info[:, 0], info)


@pytest.mark.parametrize("algo", ALGOS)
def test_copied_functions_agree_with_their_references(algo):
    """STYLE.md allows short copies across files, checked against one reference: MADDPG's TD(lambda) targets
    and masked mean compute the same numbers (tests/test_copies.py checks that every copy is the reference's text)."""
    m = MODULES[algo]
    g = torch.Generator().manual_seed(0)
    r, q = torch.randn(6, 4, 2, generator=g), torch.randn(6, 4, 2, generator=g)
    term = (torch.rand(6, 4, 2, generator=g) < 0.2).float()
    ended = torch.maximum(term, (torch.rand(6, 4, 2, generator=g) < 0.2).float())
    ended[-1] = 1.0
    for lam in (0.0, 0.8):
        assert torch.equal(m.td_lambda_targets(r, q, term, ended, 0.95, lam),
                           MADDPG.td_lambda_targets(r, q, term, ended, 0.95, lam))
    x, mask = torch.randn(6, 3, generator=g), (torch.rand(6, 3, generator=g) < 0.5).float()
    assert torch.equal(m.masked_mean(x, mask), MADDPG.masked_mean(x, mask))


# ---------------------------------------------------------------------------- in the loop
def record_actor_steps(monkeypatch, m):
    calls = []
    real = m.sequential_actor_update

    def spy(actor, critic, optimizers, set_of, order, team_of, obs, info, replay_actions, learning, alive, clip):
        calls.append(dict(order=list(order), current=actor.output(obs).detach(), replay=replay_actions.clone(),
                          learning=learning.clone(), team_of=list(team_of)))
        return real(actor, critic, optimizers, set_of, order, team_of, obs, info, replay_actions, learning, alive,
                    clip)

    monkeypatch.setattr(m, "sequential_actor_update", spy)
    return calls


@pytest.mark.parametrize("algo,every", [("hatd3", 2), ("haddpg", 1)])
def test_actor_steps_are_delayed_and_each_draws_a_random_order(algo, every, monkeypatch, tmp_path):
    m = MODULES[algo]
    calls = record_actor_steps(monkeypatch, m)
    summary = m.main(tiny(algo, tmp_path, total_timesteps=100, updates_per_iteration=4))
    updates = 10 * 4  # learning starts after the first iteration's 10 (random) env steps
    assert len(calls) == updates // every and LOSS_KEYS <= set(summary["final_losses"])
    orders = [tuple(c["order"]) for c in calls]
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len(set(orders)) > 1  # permutations, not one order
    assert all(c["team_of"] == [0, 0, 0] for c in calls)


def test_two_learning_teams_get_two_critic_heads_and_fixed_agents_are_left_out(monkeypatch, tmp_path):
    """torch:simple_tag: predators (adversary) and prey (agent) are two teams, each with its own critic head;
    with --train-groups adversary the prey's agent is in no order and is held at its replay action."""
    m = MODULES["hatd3"]
    kwargs = ("max_cycles=4", "continuous_actions=true")
    both = m.main(tiny("hatd3", tmp_path / "both", env="torch:simple_tag", env_kwargs=kwargs, num_steps=4,
                       learning_starts=0, total_timesteps=16))
    ckpt = torch.load(os.path.join(both["run_dir"], "checkpoint.pt"), weights_only=True)
    head = next(v for k, v in ckpt["critics"].items() if k.endswith("head.weight"))
    assert head.shape[0] == 2  # (K teams, in, out): a head per learning team
    assert all(math.isfinite(v) for v in both["final_losses"].values())
    calls = record_actor_steps(monkeypatch, m)
    m.main(tiny("hatd3", tmp_path / "fixed", env="torch:simple_tag", env_kwargs=kwargs, num_steps=4,
                learning_starts=0, total_timesteps=16, share_params="group", train_groups=("adversary",)))
    assert calls and all(sorted(c["order"]) == [0, 1, 2] for c in calls)
    assert calls[0]["learning"][:, 0].tolist() == [True, True, True, False]


# ---------------------------------------------------------------------------- runs
SMOKE = [(a, e) for a in ALGOS for e in ("torch:simple_spread", "simple_speaker_listener")]


@pytest.mark.parametrize("algo,env", SMOKE, ids=[f"{a}-{e}" for a, e in SMOKE])
def test_smoke(algo, env, tmp_path):
    summary = MODULES[algo].main(tiny(algo, tmp_path, env=env, eval_every=20))
    assert summary["algo"] == algo and summary["global_step"] == 40
    assert len(summary["eval_history"]) == 2 and math.isfinite(summary["eval_return_mean"])
    losses = summary["final_losses"]
    assert LOSS_KEYS <= set(losses) and all(math.isfinite(v) for v in losses.values()), losses
    ckpt = torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)
    n_agents = 2 if "speaker" in env else 3
    assert ckpt["args"]["share_params"] == "none" and len(ckpt["actor_optimizers"]) == n_agents  # an Adam per agent


@pytest.mark.parametrize("algo", ALGOS)
def test_discrete_actions_are_refused_naming_maddpg(algo, tmp_path):
    with pytest.raises(ConfigError, match="algos/maddpg.py"):
        MODULES[algo].main(tiny(algo, tmp_path, env_kwargs=("continuous_actions=false",)))


@pytest.mark.parametrize("algo", ALGOS)
def test_resume_goes_on_exactly_and_evaluation_loads_the_actor(algo, tmp_path):
    """A run stopped at 40 env steps and resumed to 80 ends with the losses of one run of 80 steps: replay,
    optimisers (one per agent), counters and the generator of replay draws and agent orders come back."""
    m = MODULES[algo]
    whole = m.main(tiny(algo, tmp_path / "whole", total_timesteps=80))
    first = m.main(tiny(algo, tmp_path / "parts", total_timesteps=40))
    resumed = m.main(make_args(m.Args, resume=first["run_dir"], total_timesteps=80))
    assert resumed["global_step"] == 80 and resumed["final_losses"] == whole["final_losses"]
    result = m.main(tiny(algo, tmp_path, evaluate_checkpoint=first["run_dir"]))
    assert result["eval_episodes"] == 2 and math.isfinite(result["eval_return_mean"])


@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_losses(algo, tmp_path):
    m = MODULES[algo]
    a, b = m.main(tiny(algo, tmp_path / "a")), m.main(tiny(algo, tmp_path / "b"))
    c = m.main(tiny(algo, tmp_path / "c", seed=2))
    assert a["final_losses"] == b["final_losses"] and a["eval_return_mean"] == b["eval_return_mean"]
    assert a["final_losses"] != c["final_losses"]


@pytest.mark.parametrize("algo", ALGOS)
def test_real_command_line_run(algo, tmp_path):
    flags = ["--env", "torch:simple_spread", "--total-timesteps", "40", "--num-envs", "2", "--num-steps", "5",
             "--learning-starts", "10", "--buffer-size", "100", "--batch-size", "2", "--hidden-sizes", "16",
             "--eval-episodes", "1", "--eval-num-envs", "1", "--run-dir", str(tmp_path), "--no-cuda",
             "--torch-threads", "1"]
    proc = subprocess.run([sys.executable, os.path.join("algos", f"{algo}.py"), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (path,) = glob.glob(str(tmp_path / "*" / "summary.json"))
    with open(path) as f:
        summary = json.load(f)
    assert summary["algo"] == algo and summary["global_step"] == 40


@pytest.mark.parametrize("algo", ALGOS)
def test_preset_keys_are_fields_and_say_what_was_measured(algo):
    path = os.path.join(REPO, "configs", algo, "simple_spread.yaml")
    args = make_args(MODULES[algo].Args, config=path)
    assert args.env == "simple_spread" and args.env_kwargs == ("continuous_actions=true",)
    assert args.share_params == "none" and args.total_timesteps == 2_000_000
