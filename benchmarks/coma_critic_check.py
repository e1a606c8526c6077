"""Does a COMA critic rank an agent's own actions the way the environment does?

COMA's advantage Q_i(s, (a_-i, a)) - sum_a' pi_i(a') Q_i(s, (a_-i, a')) is only as good as the
critic's differences between agent i's own actions. This script measures them against Monte
Carlo on `torch:simple_spread`, whose worlds can be copied (`set_world`):

1. play S episodes with the checkpoint's behaviour policy to step t0 and draw a joint action;
2. for every own action a of agent i (the others' actions held), ask the critic for Q_i(s, (a_-i, a));
3. copy each world K times per own action, force that action at t0, follow the behaviour policy to
   the episode's end, and add the discounted team reward plus, where the clock cut the episode,
   gamma^k times the critic's own value of the last state (what its TD targets bootstrap from);
4. compare the critic's centred Q(a) with the Monte Carlo means: their correlation over all
   states and actions, how often the two pick the same best action (chance: 1 / n_actions), and
   the spread of Q over own actions next to the Monte Carlo standard error.

A correlation near 0 means the counterfactual advantage the actor follows is noise.

    python benchmarks/coma_critic_check.py runs/<coma run folder> [--states 100 --copies 64 --t0 5]
"""
import argparse
import dataclasses
import json
import os
import sys

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from algos import coma  # noqa: E402
from envs import make_env  # noqa: E402
from nets import ValueNorm  # noqa: E402


def load_run(path: str):
    """Checkpoint of a COMA run (folder or checkpoint.pt) -> (args, actor, critic, value_norm, epsilon)."""
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    ckpt = torch.load(path, weights_only=True)
    if ckpt.get("algo") != "coma":
        raise SystemExit(f"{path} is a {ckpt.get('algo')!r} checkpoint; this check reads COMA runs")
    names = {f.name for f in dataclasses.fields(coma.Args)}
    saved = {k: tuple(v) if isinstance(v, list) else v for k, v in ckpt["args"].items() if k in names}
    args = coma.Args(**saved)
    if not args.env.startswith("torch:"):
        raise SystemExit(f"the run trained on {args.env}; the Monte Carlo copies need a torch: env (set_world)")
    env = make_env(args.env, 1, 0, {})
    actor, critic = coma.build_networks(args, env, torch.device("cpu"))
    actor.load_state_dict(ckpt["actor"])
    critic.load_state_dict(ckpt["critic"])
    value_norm = ValueNorm()
    value_norm.load_state_dict(ckpt["value_norm"])
    return args, actor, critic, value_norm, coma.epsilon_at(args, ckpt["global_step"]), ckpt["global_step"]


def critic_q(args, critic, value_norm, state, obs, joint, agent: int, n_actions: int) -> torch.Tensor:
    """Q_agent(s, (a_-agent, a)) for every own action a, in return units: (S, A)."""
    q = critic(coma.counterfactual_critic_inputs(state, obs, F.one_hot(joint, n_actions).float()))[0][..., agent, :]
    return value_norm.denormalize(q) if args.value_norm else q


@torch.no_grad()
def check(path: str, states: int, copies: int, t0: int, agent: int, seed: int) -> dict:
    args, actor, critic, value_norm, epsilon, step = load_run(path)
    torch.manual_seed(seed)

    def behaviour(obs):
        dist, _ = actor(obs[None])
        return coma.behaviour_policy(dist, epsilon)

    env = make_env(args.env, states, seed, {})
    A = env.n_actions
    obs, state, _ = env.reset()
    for _ in range(t0):
        result = env.step(behaviour(obs).sample()[0])
        obs, state = result.obs, result.state
    joint = behaviour(obs).sample()[0]  # (S, N)
    q_critic = critic_q(args, critic, value_norm, state, obs, joint, agent, A)  # (S, A)

    # K copies of every world for every own action of the agent, that action forced at t0.
    big = make_env(args.env, states * A * copies, seed + 1, {})
    big.reset()
    repeat = lambda x: x.repeat_interleave(A * copies, 0)  # noqa: E731
    big.set_world(repeat(env.pos), repeat(env.vel), repeat(env.steps))
    actions = repeat(joint).clone()
    actions[:, agent] = torch.arange(A).repeat_interleave(copies).repeat(states)
    ret, discount = torch.zeros(states * A * copies), 1.0
    while True:
        result = big.step(actions)
        ret += discount * result.reward.sum(-1)
        discount *= args.gamma
        if bool(result.done.all()):
            break
        actions = behaviour(result.obs).sample()[0]
    if bool(result.truncated.any()):  # the critic's targets bootstrap where the clock cut the episode
        final = behaviour(result.final_obs)
        q_last = critic_q(args, critic, value_norm, result.final_state, result.final_obs, final.sample()[0], agent, A)
        ret += discount * (final.probs[0, :, agent] * q_last).sum(-1) * result.truncated[:, agent].float()
    mc = ret.reshape(states, A, copies)
    mc_mean, mc_se = mc.mean(-1), mc.std(-1) / copies ** 0.5

    d_mc = mc_mean - mc_mean.mean(-1, keepdim=True)
    d_critic = q_critic - q_critic.mean(-1, keepdim=True)
    return {"run": path, "env": args.env, "global_step": step, "epsilon": epsilon, "agent": agent, "t0": t0,
            "obs": states, "copies": copies,
            "correlation": float((d_mc * d_critic).sum() / (d_mc.norm() * d_critic.norm() + 1e-12)),
            "same_best_action": float((mc_mean.argmax(-1) == q_critic.argmax(-1)).float().mean()),
            "chance": 1.0 / A,
            "mc_spread": float(d_mc.std(-1).mean()), "mc_standard_error": float(mc_se.mean()),
            "critic_spread": float(d_critic.std(-1).mean()),
            "mc_mean": float(mc_mean.mean()), "critic_mean": float(q_critic.mean())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="COMA run folders or checkpoint.pt files (torch: envs)")
    parser.add_argument("--states", type=int, default=100, help="S, states sampled at step t0")
    parser.add_argument("--copies", type=int, default=64, help="K, Monte Carlo rollouts per state and own action")
    parser.add_argument("--t0", type=int, default=5, help="step of the episode where the action is forced")
    parser.add_argument("--agent", type=int, default=0, help="whose own actions are compared")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    cli = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for run in cli.runs:
        r = check(run, cli.states, cli.copies, cli.t0, cli.agent, cli.seed)
        results.append(r)
        print(f"{run} (step {r['global_step']:,}, eps {r['epsilon']:.2f}): correlation {r['correlation']:+.3f}, "
              f"same best action {r['same_best_action']:.2f} (chance {r['chance']:.2f}); spread over own actions "
              f"critic {r['critic_spread']:.2f}, Monte Carlo {r['mc_spread']:.2f} (standard error {r['mc_standard_error']:.2f})")
    if cli.json:
        with open(cli.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
