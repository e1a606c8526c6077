"""The policy mapping in every algorithm file (common/groups.py): --share-params all|group|none,
--agent-groups, --train-groups and --load-group mean the same everywhere. Tiny runs on a
competitive env (torch:simple_tag: three predators `adversary`, one prey `agent`) and a
cooperative one; fixed groups keep their weights bit for bit; a group loaded from another
algorithm's run acts exactly as that run's own evaluation does."""
import glob
import math
import os
import subprocess
import sys
import typing

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from algos import ippo
from common.cli import ConfigError, make_args, saved_args
from common.groups import policy_map
from envs import make_env
from tests.catalog import ALGOS, CONTINUOUS_FIRST, CONTINUOUS_ONLY, ONE_NETWORK

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = [a for a in ALGOS if a != "ppo_iql"]  # ppo_iql: its two groups are its mapping (tests/test_multi_policy.py)
# ONE_NETWORK: one network acts for every agent (MAT): no per-group sets, no fixed group beside learning ones
SHORT = ("max_cycles=4",)  # episodes end inside the tiny runs: returns get logged, replays fill
# Tiny settings, each given to the algorithms whose Args have the field.
TINY = dict(num_envs=2, num_steps=4, total_timesteps=16, eval_every=0, eval_episodes=2, eval_num_envs=1,
            checkpoint_every=0, cuda=False, torch_threads=1, hidden_sizes=(16,), hidden_dim=16,
            critic_hidden_sizes=(16,), mixer_embed_dim=8, hypernet_hidden=16, mixer_hidden=16, update_epochs=1,
            num_minibatches=1, critic_minibatches=1, chunk_len=4, batch_size=2, buffer_size=64, learning_starts=0,
            updates_per_iteration=1, policy_delay=1)
PREDATORS, PREY = [0, 1, 2], [3]


def module(algo):
    return __import__(f"algos.{algo}", fromlist=["main"])


def settings(algo, tmp_path, env="torch:simple_tag", **overrides):
    names = module(algo).Args.__dataclass_fields__
    kwargs = SHORT + (("continuous_actions=true",) if algo in CONTINUOUS_ONLY else ())
    chosen = {**TINY, "env": env, "env_kwargs": kwargs, "run_dir": str(tmp_path / "runs"), **overrides}
    return make_args(module(algo).Args, **{k: v for k, v in chosen.items() if k in names})


def run(algo, tmp_path, **overrides):
    return module(algo).main(settings(algo, tmp_path, **overrides))


def finite(losses) -> bool:
    """Every loss a number, except explained variance (undefined where a few steps' returns are all equal)."""
    return all(k == "explained_variance" or (v is not None and math.isfinite(v)) for k, v in losses.items())


def load(summary):
    return torch.load(os.path.join(summary["run_dir"], "checkpoint.pt"), weights_only=True)


def rows_of(ckpt, agents):
    """{(network, parameter): the rows `agents` act with} for every per-agent parameter saved."""
    out = {}
    for net, rows in ckpt["agent_rows"].items():
        for name, r in rows.items():
            if r is not None:
                out[net, name] = ckpt[net][name][r[agents]]
    return out


# ----------------------------------------------------------------------------- every file, the same flags
@pytest.mark.parametrize("algo", ALGOS)
def test_every_file_takes_the_policy_mapping_flags(algo):
    args_cls = module(algo).Args
    fields = args_cls.__dataclass_fields__
    assert {"share_params", "agent_groups", "train_groups", "load_group"} <= set(fields)
    assert typing.get_args(typing.get_type_hints(args_cls)["share_params"]) == ("all", "group", "none")
    assert callable(module(algo).acting_policy)  # what --load-group builds another algorithm's run with


@pytest.mark.parametrize("share", ["all", "group", "none"])
@pytest.mark.parametrize("algo", ALGOS)
def test_competitive_runs_with_every_sharing(algo, share, tmp_path):
    if algo in ONE_NETWORK and share != "all":  # refused, saying why
        with pytest.raises(ConfigError, match="one transformer"):
            run(algo, tmp_path, share_params=share)
        return
    summary = run(algo, tmp_path, share_params=share)
    assert finite(summary["final_losses"]), summary["final_losses"]
    assert sorted(summary["eval_group_returns"]) == ["adversary", "agent"]
    assert sum(summary["eval_group_returns"].values()) == pytest.approx(summary["eval_return_mean"], abs=1e-3)
    ckpt = load(summary)
    assert ckpt["agent_groups"] == ["adversary"] * 3 + ["agent"]
    if share == "group":  # per-team returns in TensorBoard, training and evaluation
        (events,) = glob.glob(os.path.join(summary["run_dir"], "events.out.tfevents*"))
        tags = set(EventAccumulator(events).Reload().Tags()["scalars"])
        assert {"eval/team_adversary/episodic_return", "eval/team_agent/episodic_return",
                "charts/team_adversary/episodic_return", "charts/team_agent/episodic_return"} <= tags


@pytest.mark.parametrize("algo", ALGOS)
def test_one_group_is_the_same_as_all(algo, tmp_path):
    """--share-params group on a cooperative env (one group) builds the all-shared networks."""
    env = "torch:simple_spread"
    shared = run(algo, tmp_path / "a", env=env, share_params="all")
    grouped = run(algo, tmp_path / "b", env=env, share_params="group")
    assert shared["final_losses"] == grouped["final_losses"]
    assert "team_" not in " ".join(grouped.get("eval_group_returns", {}))


# ----------------------------------------------------------------------------- fixed and loaded groups
@pytest.mark.parametrize("algo", ALGOS)
def test_fixed_group_keeps_the_loaded_weights_bit_for_bit(algo, tmp_path):
    if algo in ONE_NETWORK:  # a group fixed beside learning ones cannot share their one network: refused
        with pytest.raises(ConfigError, match="fixed"):
            run(algo, tmp_path, train_groups=("adversary",))
        return
    source = run(algo, tmp_path / "source", share_params="group")
    # The prey come from the source run (same algorithm: weights copied) and stay fixed; the predators learn.
    trained = run(algo, tmp_path / "run", seed=7, share_params="group", train_groups=("adversary",),
                  load_group=(f"agent={source['run_dir']}",))
    assert finite(trained["final_losses"]), trained["final_losses"]
    src, dst = load(source), load(trained)
    prey_src, prey_dst = rows_of(src, PREY), rows_of(dst, PREY)
    assert prey_dst and prey_src.keys() == prey_dst.keys()
    for key in prey_src:
        assert torch.equal(prey_src[key], prey_dst[key]), key
    predators_src, predators_dst = rows_of(src, PREDATORS), rows_of(dst, PREDATORS)
    assert any(not torch.equal(predators_src[k], predators_dst[k]) for k in predators_src)


@pytest.fixture(scope="module")
def prey_runs(tmp_path_factory):
    """Runs on torch:simple_tag whose prey other algorithms load: MAPPO (discrete and continuous
    actions) and QMIX."""
    root = tmp_path_factory.mktemp("prey")
    continuous = SHORT + ("continuous_actions=true",)
    return {name: run(algo, root / name, share_params="group", **extra)["run_dir"]
            for name, algo, extra in (("mappo", "mappo", {}), ("mappo_cont", "mappo", {"env_kwargs": continuous}),
                                      ("qmix", "qmix", {}))}


@pytest.mark.parametrize("algo", ALGOS)
def test_prey_loaded_from_another_algorithms_run(algo, prey_runs, tmp_path):
    """Every file trains its predators against prey acting as a MAPPO run (QMIX's for MAPPO)."""
    source = prey_runs["qmix" if algo == "mappo" else "mappo_cont" if algo in CONTINUOUS_ONLY | CONTINUOUS_FIRST
                       else "mappo"]
    summary = run(algo, tmp_path, share_params="group", load_group=(f"agent={source}",))
    assert finite(summary["final_losses"]), summary["final_losses"]
    assert sorted(summary["eval_group_returns"]) == ["adversary", "agent"]
    again = run(algo, tmp_path, evaluate_checkpoint=summary["run_dir"])  # the prey act as the MAPPO run again
    assert again["eval_return_mean"] == pytest.approx(summary["eval_return_mean"])


@pytest.mark.parametrize("source_algo,algo", [("mappo", "qmix"), ("qmix", "maddpg"), ("mappo", "happo")])
def test_a_loaded_group_acts_as_its_runs_own_evaluation(source_algo, algo, prey_runs, tmp_path):
    """On the same observations the loaded prey pick the actions that the source run's own
    acting network (what its --evaluate-checkpoint plays) picks, in the rollout and in evaluation."""
    source = prey_runs[source_algo]
    args = settings(algo, tmp_path, share_params="group", load_group=(f"agent={source}",),
                    env_kwargs=SHORT + ("continuous_actions=false",))
    E = 3
    env = make_env("torch:simple_tag", E, 5, {"max_cycles": 4})
    teams = policy_map(args, env, algo, torch.device("cpu"))
    assert list(teams.foreign) == ["agent"] and teams.trained_list == [True, True, True, False]
    ckpt = load({"run_dir": source})
    src = module(source_algo)
    theirs = src.acting_policy(src.Args(**saved_args(src.Args, ckpt["args"])), env, ckpt, "cpu")
    # The file's own actor for the other agents: a fresh IPPO actor (it never decides for the prey).
    mine = ippo.build_networks(make_args(ippo.Args, env="torch:simple_tag", share_params="group"), env, "cpu")[0]
    policy = teams.policy(mine)
    obs = torch.as_tensor(env.reset()[0])
    starts = torch.ones(1, E, 4)
    state, their_state = policy.initial_state(E), theirs.initial_state(E)
    for _ in range(6):
        dist, state = policy(obs[None], state, starts, None)
        expected, their_state = theirs(obs[None], their_state, starts, None)
        action, wanted = dist.mode()[0], expected.mode()[0]
        assert torch.equal(action[:, PREY], wanted[:, PREY])  # evaluation
        rollout = teams.override(torch.zeros_like(action), obs, starts[0])
        assert torch.equal(rollout[:, PREY], wanted[:, PREY])  # and in the rollout
        their_state = theirs.remember(their_state, wanted) if hasattr(theirs, "remember") else their_state
        state = policy.remember(state, action)
        step = env.step(action)
        obs = torch.as_tensor(step.obs)
        starts = torch.as_tensor(step.done, dtype=torch.float32)[None, :, None].expand(1, E, 4)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("algo", ALGOS)
def test_unknown_group_names_fail_at_once_naming_the_groups(algo, tmp_path):
    for flag, value in (("train_groups", ("predator",)), ("load_group", ("prey=runs/x",)),
                        ("agent_groups", ("prey_0=prey",))):
        with pytest.raises(ConfigError, match="adversary.*agent|agents: adversary_0"):
            run(algo, tmp_path, share_params="group", **{flag: value})
    assert not os.path.exists(tmp_path / "runs")  # nothing written


def test_bad_group_input_is_one_line_without_traceback(prey_runs, tmp_path):
    base = [sys.executable, os.path.join(ROOT, "algos", "qmix.py"), "--env", "torch:simple_tag",
            "--run-dir", str(tmp_path), "--share-params", "group"]
    maddpg = [os.path.join(ROOT, "algos", "maddpg.py")]  # continuous actions where an env has both; MAPPO's: discrete
    cases = {tuple(maddpg + ["--load-group", f"agent={prey_runs['mappo']}"]): "cannot act in this env as it is here",
             ("--train-groups", "predator"): "--train-groups names group(s) ['predator']",
             ("--load-group", f"agent={prey_runs['mappo']}", "--env-kwargs", "num_good=2"): "the agents differ",
             ("--load-group", f"agent={prey_runs['mappo']}", "--train-groups", "agent"): "stays fixed",
             ("--env", "torch:simple_spread", "--load-group", f"agent={prey_runs['mappo']}"): "that run played"}
    for extra, message in cases.items():
        command = base[:1] + list(extra[:1]) + base[2:] + list(extra[1:]) if extra[0] in maddpg else base + list(extra)
        out = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not os.listdir(tmp_path)


# ----------------------------------------------------------------------------- cooperative runs unchanged
# Tiny default runs on torch:simple_spread (seed 1), recorded with the tree before the policy mapping
# (e7afb73): (final losses, greedy evaluation return). One group of every agent must train as before.
BEFORE = {
    "mappo": ({"policy_loss": -1.043081e-07, "value_loss": 0.5008789, "entropy": 1.609412, "approx_kl": 0,
               "clipfrac": 0, "grad_norm": 2.409961, "explained_variance": 0.2868157}, -10.55441),
    "ia2c": ({"policy_loss": 0.002499898, "value_loss": 0.2867316, "entropy": 1.609349, "grad_norm": 1.222883,
              "explained_variance": 0.1463006}, -10.27983),
    "qmix": ({"td_loss": 0.4970475, "q_taken_mean": 0.5538445, "target_mean": -0.1277395, "grad_norm":
              5.816301}, -9.698392),
    "maddpg": ({"td_loss": 8.320597, "policy_loss": -0.09671062, "q_taken_mean": 0.127113, "target_mean":
                -2.605721, "grad_norm": 26.15246, "actor_grad_norm": 0.3755156}, -9.847371),
    "happo": ({"policy_loss": -0.009042405, "value_loss": 0.4424816, "entropy": 1.609391, "approx_kl": 0,
               "clipfrac": 0, "grad_norm": 0.8641085, "explained_variance": -0.280252}, -10.13381),
    "coma": ({"policy_loss": 0.0002301832, "td_loss": 0.8052165, "entropy": 1.60943, "q_taken_mean": -11.43589,
              "grad_norm": 0.3084697, "explained_variance": 0.01746166}, -11.65072),
}


@pytest.mark.parametrize("algo", sorted(BEFORE))
def test_cooperative_default_runs_train_as_before(algo, tmp_path):
    summary = run(algo, tmp_path, env="torch:simple_spread")
    losses, eval_return = BEFORE[algo]
    assert summary["final_losses"].keys() == losses.keys()
    for key, value in losses.items():
        assert summary["final_losses"][key] == pytest.approx(value, rel=1e-3, abs=1e-5), key
    assert summary["eval_return_mean"] == pytest.approx(eval_return, rel=1e-4)


# ----------------------------------------------------------------------------- groups of different shapes
@pytest.mark.parametrize("share", ["group", "none"])
def test_padding_never_reaches_a_groups_own_network(share, tmp_path):
    """simple_world_comm: the leader sees 34 numbers and has 20 actions, the good agents 28 and 5;
    the adapter pads to 34 and 20. With a network per group (or agent), each set's network is the
    network of its true sizes inside the stacked weights: its padding frame (padded inputs, other
    groups' one-hot entries, padded actions) is 0 at the start, stays 0 through Adam steps, takes no
    gradient, and whatever is fed there changes nothing; its true block starts orthogonal at the true
    shape, and plain true-size matmuls over the true entries give the network's logits."""
    from algos import mappo
    args = make_args(mappo.Args, env="simple_world_comm", env_kwargs=("max_cycles=5",), share_params=share,
                     agent_groups=("leadadversary=lead",), hidden_sizes=(16,), cuda=False, run_dir=str(tmp_path))
    env = make_env(args.env, 2, 0, {"max_cycles": 5})
    true_obs = env.obs_dims  # 34 34 34 34 28 28
    true_actions = torch.as_tensor(env.action_dim_mask).sum(-1).tolist()  # 20 5 5 5 5 5
    N, D = env.n_agents, env.obs_dim
    actor, _ = mappo.build_networks(args, env, "cpu")
    net = actor.net
    first, head = net.body.net[0], net.head  # stacked (sets, in, out) weights
    sets = net.set_of_agent.tolist()
    members = {s: [n for n in range(N) if sets[n] == s] for s in set(sets)}

    def frames():  # every set's true rows of the first layer (obs entries, own one-hot), the others, true actions
        for s, agents in members.items():
            rows = list(range(true_obs[agents[0]])) + ([D + n for n in agents] if net.agent_id_input else [])
            outside = torch.ones(first.weight.shape[1], dtype=torch.bool)
            outside[rows] = False
            yield s, agents, rows, outside, true_actions[agents[0]]

    for s, agents, rows, outside, acts in frames():
        assert not first.weight[s, outside].any() and not head.weight[s, :, acts:].any()
        assert not head.bias[s, :, acts:].any()
        block = first.weight[s, rows].detach()  # (true inputs, 16): orthonormal columns times the gain
        assert torch.allclose(block.T @ block, 2 * torch.eye(16), atol=1e-5)

    obs, _, _ = env.reset()
    rng, steps = np.random.default_rng(0), []
    for _ in range(5):  # a few random steps
        steps.append(torch.as_tensor(obs))
        obs = env.step(env.sample_actions(rng)).obs
    obs = torch.stack(steps)  # (L, B, N, 34), zeros after each agent's true size
    logits = actor(obs)[0].logits
    noisy = obs.clone()
    for n in range(N):
        noisy[..., n, true_obs[n]:] = 100.0  # garbage in the padding changes nothing
    assert torch.equal(actor(noisy)[0].logits, logits)
    for s, agents, rows, _, acts in frames():  # the true-size network, written out by hand
        for n in agents:
            x = obs[..., n, :true_obs[n]]
            if net.agent_id_input:
                x = torch.cat([x, torch.eye(N)[n, agents].expand(*x.shape[:-1], -1)], -1)
            h = torch.tanh(x @ first.weight[s, rows] + first.bias[s, 0])
            own = h @ head.weight[s, :, :acts] + head.bias[s, 0, :acts]
            assert torch.allclose(torch.log_softmax(own, -1), logits[..., n, :acts], atol=1e-5)

    optimizer = torch.optim.Adam(actor.parameters(), lr=0.01)
    for _ in range(3):  # a few updates: the frame gets no gradient and stays 0
        optimizer.zero_grad()
        dist, _ = actor(obs)
        (dist.entropy().sum() + dist.log_prob(dist.sample()).sum()).backward()
        for s, agents, rows, outside, acts in frames():
            assert first.weight.grad[s, rows].abs().sum() > 0
            assert not first.weight.grad[s, outside].any() and not head.weight.grad[s, :, acts:].any()
        optimizer.step()
    for s, agents, rows, outside, acts in frames():
        assert not first.weight[s, outside].any() and not head.weight[s, :, acts:].any()
    env.close()


def test_ppo_iql_takes_the_same_flags_and_loads_a_group_as_its_run(prey_runs, tmp_path):
    """ppo_iql's groups are its two learners; a loaded group acts as its run (even a ppo_iql one)
    and its learner learns nothing: here the prey act as the MAPPO run, the PPO predators learn."""
    from algos import ppo_iql
    fields = ppo_iql.Args.__dataclass_fields__
    assert {"share_params", "agent_groups", "train_groups", "load_group"} <= set(fields)
    settings = dict(env="torch:simple_tag", env_kwargs=SHORT, num_envs=2, num_steps=4, total_timesteps=16,
                    eval_episodes=2, eval_num_envs=1, batch_size=2, cuda=False, run_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="group only"):
        ppo_iql.main(make_args(ppo_iql.Args, share_params="all", **settings))
    summary = ppo_iql.main(make_args(ppo_iql.Args, load_group=(f"agent={prey_runs['mappo']}",), **settings))
    assert sorted(summary["eval_group_returns"]) == ["adversary", "agent"] and finite(summary["final_losses"])
    again = ppo_iql.main(make_args(ppo_iql.Args, load_group=(f"agent={summary['run_dir']}",), **settings))
    assert sorted(again["eval_group_returns"]) == ["adversary", "agent"]  # a ppo_iql run's prey, acting as it
