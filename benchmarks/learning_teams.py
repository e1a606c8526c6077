"""Teams on simple_tag: predators trained against fixed prey, against random predators.

Trains MAPPO (or IPPO) on the torch port of mpe2 simple_tag with one policy per side
(`--share-params group`) and only the predators learning (`--train-groups adversary`): the prey
keep their initial weights, whose near-zero output layer (gain 0.01) makes them act almost
uniformly at random. Then plays, against the same fixed prey:

    trained   the trained predators' policy (sampled, as in training)
    random    uniformly random predator actions

and prints each group's mean return per episode (R_pz3 of the group: its agents' rewards summed
over the episode's steps) with a 95% confidence interval over episodes. Predators share +10
per collision with the prey (each predator gets it), so the predator return counts catches.

    python benchmarks/learning_teams.py --total-timesteps 500000 --seeds 1
    python benchmarks/learning_teams.py --algo ippo --total-timesteps 500000 --episodes 500
"""
import argparse
import json
import os

import numpy as np
import torch

from algos import ippo, mappo
from common.cli import make_args
from common.groups import agent_names, assign_groups
from common.run_utils import evaluate, load_checkpoint
from envs import make_env
from nets import MaskedCategorical

ALGOS = {"mappo": mappo, "ippo": ippo}
ENV = "torch:simple_tag"


class UniformFor(torch.nn.Module):
    """An actor whose chosen agents act uniformly at random (every valid action equally likely);
    the others act from the actor. Same interface as `nets.Actor` (what `evaluate` calls)."""

    def __init__(self, actor, random_agents):
        super().__init__()
        self.actor, self.random_agents = actor, torch.as_tensor(random_agents, dtype=torch.bool)

    def initial_state(self, batch, device=None):
        return self.actor.initial_state(batch, device)

    def forward(self, obs, state=None, starts=None, action_mask=None):
        dist, state = self.actor(obs, state, starts, action_mask)
        logits = torch.where(self.random_agents[:, None], torch.zeros_like(dist.logits), dist.logits)  # (1, E, N, A)
        mask = self.actor.action_dim_mask if action_mask is None else action_mask
        return MaskedCategorical(logits, mask), state


def group_returns(agent_returns: np.ndarray, group_of_agent, names) -> dict:
    """Per-episode returns (episodes, N) -> {group: (mean, 95% CI half-width)} of the group sums."""
    out = {}
    for g, name in enumerate(names):
        per_episode = agent_returns[:, np.asarray(group_of_agent) == g].sum(-1)
        out[name] = (float(per_episode.mean()), float(1.96 * per_episode.std(ddof=1) / np.sqrt(len(per_episode))))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ALGOS), default="mappo")
    parser.add_argument("--total-timesteps", type=int, default=500_000, help="training env steps per seed")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1..S, trained one after another")
    parser.add_argument("--episodes", type=int, default=500, help="evaluation episodes per matchup")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--run-dir", default="runs/teams")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    opts = parser.parse_args(argv)
    module = ALGOS[opts.algo]

    results = []
    for seed in range(1, opts.seeds + 1):
        args = make_args(module.Args, env=ENV, seed=seed, total_timesteps=opts.total_timesteps,
                         num_envs=opts.num_envs, share_params="group", train_groups=("adversary",),
                         eval_every=0, eval_episodes=100, checkpoint_every=0, torch_threads=opts.torch_threads,
                         run_dir=opts.run_dir, cuda=False)
        summary = module.main(args)
        ckpt = load_checkpoint(summary["run_dir"])
        env = make_env(ENV, 10, seed + 20_000)
        names, group_of_agent = assign_groups(agent_names(env))
        actor, _ = module.build_networks(args, env, "cpu")
        actor.load_state_dict(ckpt["actor"])
        predators = [names[g] == "adversary" for g in group_of_agent]
        row = {"seed": seed, "run_dir": summary["run_dir"], "train_wall_time_s": summary["wall_time_s"],
               "train_sps": summary["sps"], "greedy_eval_group_returns": summary["eval_group_returns"]}
        for label, policy in (("trained", actor), ("random", UniformFor(actor, predators))):
            torch.manual_seed(seed)
            per_agent = evaluate(env, policy, opts.episodes, torch.device("cpu"), greedy=False, per_agent=True)
            row[label] = group_returns(per_agent, group_of_agent, names)
        results.append(row)

    print(f"\n{opts.algo.upper()} on {ENV}, {opts.total_timesteps:,} env steps, predators trained against fixed "
          f"near-uniform prey; {opts.episodes} sampled episodes per matchup (mean +- 95% CI)")
    print(f"{'seed':>4} | {'predators':>9} | {'adversary return':>18} | {'agent (prey) return':>20}")
    for row in results:
        for label in ("trained", "random"):
            adv, prey = row[label]["adversary"], row[label]["agent"]
            print(f"{row['seed']:>4} | {label:>9} | {adv[0]:8.1f} +- {adv[1]:5.1f} | {prey[0]:9.1f} +- {prey[1]:6.1f}")
    gain = np.mean([r["trained"]["adversary"][0] - r["random"]["adversary"][0] for r in results])
    catches = gain / (10.0 * 3)  # each catch pays +10 to each of the 3 predators
    print(f"\nWhat it means: trained predators earn {gain:+.1f} more per episode than random ones against the same "
          f"prey, about {catches:+.1f} more predator-prey contacts (collision steps) per 25-step episode; the prey's return falls by as much as it "
          "is caught (-10 per collision) plus its boundary penalty.")
    out = {"algo": opts.algo, "env": ENV, "total_timesteps": opts.total_timesteps, "num_envs": opts.num_envs,
           "episodes": opts.episodes, "runs": results}
    if opts.out:
        os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
        with open(opts.out, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
