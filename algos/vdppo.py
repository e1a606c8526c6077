"""VDPPO: PPO with a value-decomposition critic (Su, Adams, Beling 2021, "Value-Decomposition
Multi-Agent Actor-Critics", AAAI, arXiv:2007.12306; the PPO objective as in MARLlib's VDPPO).

Each agent acts from its own observation and has its own value V_i(o_i); a mixer combines the
V_i into a team value V_tot (a sum, or a monotone QMIX-style network on the global state).
GAE on V_tot and the team reward gives one team advantage, which every agent's clipped PPO
objective uses. The same file as algos/mappo.py except the critic. Run:

    python algos/vdppo.py --env simple_spread
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import numpy as np
import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, PerGroup, QMixer, ValueNorm, VDNMixer, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 5_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50 continuous_actions=true"""
    num_envs: int = 256
    """E, env copies stepped together in the rollout (256 x 25 steps, 3 epochs x 8 minibatches: MAPPO's defaults,
    docs/benchmarks-history.md)"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps)"""
    learning_rate: float = 2e-3
    """Adam learning rate of actor, critic and mixer"""
    anneal_lr: bool = True
    """decay the learning rate linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.95
    """discount factor (0.95, as MAPPO's: a horizon near MPE's 25-step episodes learns much faster than 0.99 there)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation (on the team value V_tot)"""
    update_epochs: int = 3
    """passes over each rollout in the update"""
    num_minibatches: int = 8
    """minibatches per epoch"""
    clip_coef: float = 0.2
    """PPO ratio clip"""
    clip_vloss: bool = True
    """clip the team-value prediction around the rollout's prediction (same coefficient)"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """value-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    value_norm: bool = True
    """normalise the team-value targets with running statistics (MAPPO's ValueNorm)"""
    mixer: Literal["vdn", "qmix"] = "vdn"
    """how the agents' values V_i become V_tot: vdn (their sum, VDAC-sum) or qmix (a monotone network whose
    weights come from the global state, VDAC-mix; its hypernetworks read the raw, unbounded state, and on
    simple_spread V_tot overestimated the final states truncations bootstrap from: docs/algorithms/vdppo.md)"""
    mixer_embed_dim: int = 32
    """width of the qmix mixing network"""
    hypernet_hidden: int = 64
    """hidden width of the qmix hypernetworks that produce the mixing weights"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in actor and per-agent critic"""
    chunk_len: int = 25
    """recurrent models train on sequence chunks of this many steps (must divide num_steps)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actor and per-agent critic"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""
    factored_actions: bool = False
    """where each action is a tuple of choices (simple_reference's move and word, env.action_factors), one
    categorical per choice, their logits summed into the joint action's (nets.Actor); off: one logit per action"""

    @property
    def batch_size(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_size)  # rounded up: at least total_timesteps


def validate(args: Args) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    check_group_args(args)
    for name in ("num_envs", "num_steps", "chunk_len", "update_epochs", "eval_episodes", "eval_num_envs",
                 "total_timesteps", "mixer_embed_dim", "hypernet_hidden"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.recurrent != "none" and args.num_steps % args.chunk_len:
        raise ConfigError(f"--chunk-len {args.chunk_len} must divide --num-steps {args.num_steps}")
    sequences = args.num_envs * (args.num_steps // args.chunk_len if args.recurrent != "none" else args.num_steps)
    if not 1 <= args.num_minibatches <= sequences:
        raise ConfigError(f"--num-minibatches must be between 1 and {sequences} (the number of "
                          f"{'sequence chunks' if args.recurrent != 'none' else 'env steps'} per rollout)")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device, learning=None):
    """Decentralised actor and per-agent critic V_i on local obs (an image, obs_shape (H, W, C), through a
    small CNN: nets.encoder_for); one mixer per learning team (`learning`: each team's agents, by default one
    team of every agent) that makes its V_tot (on the flat state, whatever its shape)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = Actor(env.obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  sets, args.hidden_sizes, args.recurrent, args.activation, obs_sizes=env.obs_dims,
                  action_factors=factored_actions(args, env)).to(device)
    critic = Critic(env.obs_shape, env.n_agents, sets, args.hidden_sizes, args.recurrent, args.activation,
                    in_sizes=env.obs_dims).to(device)
    learning = learning or [list(range(env.n_agents))]
    mixer = PerGroup([VDNMixer() if args.mixer == "vdn" else
                      QMixer(len(m), env.state_dim, args.mixer_embed_dim, args.hypernet_hidden) for m in learning],
                     learning).to(device)
    return actor, critic, mixer


# ============================================================================ 3. ALGORITHM FUNCTIONS
def mixed_team_value(critic, mixer, obs, state, critic_state, starts):
    """V_tot(s) = mixer(V_1(o_1), ..., V_N(o_N); s) of every team: obs (L, B, N, obs_dim), state (L, B, state_dim)
    -> (V_tot (L, B, K), critic_state). Each V_i sees only its agent's observation; the mixer is
    where the global state enters (qmix), and the credit the team value gives each agent flows
    back through it. Team k's mixer mixes only its own agents' values."""
    agent_values, critic_state = critic(obs, critic_state, starts)  # (L, B, N)
    return mixer(agent_values, state), critic_state  # (L, B, K)


def team_flags(truncated: torch.Tensor, episode_ends: torch.Tensor):
    """Per-agent flags (T, E, N) -> the team's (terminated, truncated), each (T, E).

    The team's episode ends when the env copy's episode ends (`episode_ends`, the same for
    every agent); it was cut by the clock if any agent was truncated, and otherwise ended by
    the task. An agent that leaves early does not end the team's episode.
    """
    ended = episode_ends[..., 0]  # (T, E)
    cut = truncated.amax(-1)  # (T, E)
    return ended * (1.0 - cut), ended * cut


def compute_gae(rewards, values, next_values, terminated, truncated, gamma: float, lam: float):
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16), all tensors (T, E, N), or (T, E) for a
    team reward and a team value.

    next_values[t] is V of the true next state s_{t+1} (the final observation where the episode
    ended). A time-limit truncation still bootstraps from it: the episode was cut, the task
    was not over. Termination does not. Either way the advantage does not flow back across
    the episode boundary. lam = 1 gives the n-step returns of A3C (Mnih et al. 2016): the
    discounted rewards up to the rollout's end, plus the discounted V(s_T) there.
    """
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        not_terminal = 1.0 - terminated[t]
        episode_goes_on = 1.0 - torch.maximum(terminated[t], truncated[t])
        delta = rewards[t] + gamma * next_values[t] * not_terminal - values[t]
        last = delta + gamma * lam * episode_goes_on * last
        advantages[t] = last
    return advantages, advantages + values  # advantages, returns (value targets)


def to_chunks(x: torch.Tensor, L: int) -> torch.Tensor:
    """(T, E, ...) -> (L, (T // L) * E, ...): cut every env's rollout into chunks of L steps."""
    T, E = x.shape[:2]
    return x.reshape(T // L, L, E, *x.shape[2:]).transpose(0, 1).reshape(L, (T // L) * E, *x.shape[2:])


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critic, mixer, value_norm, optimizer, shuffle_gen, global_step, iteration,
                       rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts, and the groups and
    rows --load-group reads; `rollout`: what the rollout carries into the next iteration (starts, recurrent states)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "mixer": mixer.state_dict(), "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(),
            "global_step": global_step, "iteration": iteration, "rng": rng_state(),
            "shuffle_rng": shuffle_gen.get_state(), "rollout": rollout, **teams.payload(actor=actor, critic=critic)}


def acting_policy(saved: Args, env, ckpt: dict, device):
    """A saved run's acting network (for --evaluate-checkpoint, and --load-group in any algorithm)."""
    actor, _, _ = build_networks(saved, env, device)
    actor.load_state_dict(ckpt["actor"])
    return actor


def main(args: Args) -> dict:
    validate(args)
    if args.evaluate_checkpoint:
        return evaluate_checkpoint(args, ALGO, Args, acting_policy)

# ============================================================================ 4. SETUP
    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = pick_device(args.cuda)
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    envs = make_env(args.env, args.num_envs, args.seed, env_kwargs, device=device, workers=args.env_workers)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    groups, trained, K = teams.members, teams.trained, len(teams.learning)  # {name: agents}, (N,), learning teams
    team_of = teams.team_of_agent  # (N,) every agent's learning team
    firsts = [m[0] for m in teams.learning]  # one agent of each team: team values stored per agent are read there
    actor, critic, mixer = build_networks(args, envs, device, teams.learning)  # one mixer per learning team
    teams.load_weights({"actor": actor, "critic": critic})  # --load-group from a vdppo run: copy its weights
    # One team: one set of statistics; rival teams each keep their own (a predator's +10 is the prey's -10).
    value_norm = (ValueNorm() if K == 1 else ValueNorm(groups=range(K))).to(device)
    params = list(actor.parameters()) + list(critic.parameters()) + list(mixer.parameters())
    optimizer = torch.optim.Adam(params, lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    # Minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critic, "critic"), (mixer, "mixer"), (value_norm, "value_norm"),
                            (optimizer, "optimizer")):
            module.load_state_dict(ckpt[key])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])
    L = args.chunk_len if args.recurrent != "none" else 1

    obs_np, state_np, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    state = torch.as_tensor(state_np, device=device)  # (E, state_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, n_actions)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: recurrent states reset there
    actor_state = actor.initial_state(E, device)  # tuple of (E, N, H), or None
    critic_state = critic.initial_state(E, device)
    if restored:  # the resumed rollout goes on mid-episode where it stopped
        starts, actor_state, critic_state = ckpt["rollout"]
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic, mixer))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for step in range(T):
            global_step += E
            # The global state is a team entry (once per env copy); V_tot, one per team, is stored per
            # agent (its team's) and read back at one agent of each team ([..., firsts]).
            extras = {"episode_starts": starts}
            if actor_state is not None:  # states *before* this step, to restart training sequences
                extras["prev_hidden_states"], extras["prev_critic_hidden_states"] = actor_state[0], critic_state[0]
                if args.recurrent == "lstm":
                    extras["prev_cell_states"], extras["prev_critic_cell_states"] = actor_state[1], critic_state[1]
            if mask is not None:
                extras["action_masks"] = mask
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                action = teams.override(dist.sample()[0], obs, starts, mask)[None]  # (1, E, N[, act_dim]); groups
                # loaded from another algorithm's run act as that run does
                logprob = dist.log_prob(action)  # (1, E, N)
                value, critic_state = mixed_team_value(critic, mixer, obs[None], state[None], critic_state,
                                                       starts[None])  # (1, E, K)
            result = envs.step(action[0])  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V_tot of the final obs and state where an episode ended: a truncation's bootstrap
                final_state = torch.as_tensor(result.final_state, device=device)
                with torch.no_grad():
                    final_value, _ = mixed_team_value(critic, mixer, final_obs[None], final_state[None], critic_state,
                                                      torch.zeros_like(starts)[None])  # (1, E, K)
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action[0], log_probs=logprob[0], values=value[0][:, team_of],
                rewards=torch.as_tensor(result.reward, device=device), next_obs=final_obs,
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_values=final_value[0][:, team_of], team={"global_states": state}, **extras)
            obs, state = next_obs, torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # V_tot(s_T): bootstraps the last step wherever its episode goes on
            last_value, _ = mixed_team_value(critic, mixer, obs[None], state[None], critic_state,
                                             starts[None])  # (1, E, K)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        with torch.no_grad():
            # V_tot(s_{t+1}) is the next step's value while the episode goes on, and the value of
            # the final observation where it ended (the next step's value belongs to a new episode).
            values = b["values"][..., firsts]  # (T, E, K) V_tot as predicted in the rollout
            next_values = torch.cat([values[1:], last_value], dim=0)  # (T, E, K)
            next_values = torch.where(b["episode_ends"][..., :1].bool(), b["final_values"][..., firsts], next_values)
            values = value_norm.denormalize(values) if args.value_norm else values
            next_values = value_norm.denormalize(next_values) if args.value_norm else next_values
            # One team reward, one team value: GAE gives one advantage per env step and team, shared
            # by the team's agents (Su et al. 2021, with GAE in place of their n-step TD error).
            team_reward = teams.team_rewards(b["rewards"])  # (T, E, K), R_pz3 units for mpe2
            terminated, truncated = team_flags(b["truncated"], b["episode_ends"])  # (T, E) each
            advantages, returns = compute_gae(team_reward, values, next_values, terminated[..., None],
                                              truncated[..., None], args.gamma, args.gae_lambda)  # (T, E, K) each
            # (T, E, K): steps in which some agent of the team acted
            team_alive = torch.stack([b["alive"][..., m].amax(-1) for m in teams.learning], -1)
            for k in range(K):  # normalised over the rollout, per team: rivals never share a mean and scale
                adv_mean = masked_mean(advantages[..., k], team_alive[..., k])
                adv_std = masked_mean((advantages[..., k] - adv_mean) ** 2, team_alive[..., k]).sqrt()
                advantages[..., k] = (advantages[..., k] - adv_mean) / (adv_std + 1e-8)
            if args.value_norm:
                value_norm.update(returns[team_alive.bool()] if K == 1 else returns, team_alive)
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # Lay the rollout out as (L, S, N, ...): S sequences of L steps (L = 1 without recurrence).
        data = {k: to_chunks(v, L) for k, v in b.items() if not k.startswith("prev_")}
        data.update(advantages=to_chunks(advantages, L), targets=to_chunks(targets, L),
                    team_alive=to_chunks(team_alive, L))  # team tensors: (L, S, K)
        # Recurrent states stored at each chunk's first step restart the sequences: (S, N, H).
        init_states = {k: v[::L].reshape(-1, N, v.shape[-1]) for k, v in b.items() if k.startswith("prev_")}
        S = data["rewards"].shape[1]

# ============================================================================ 7. UPDATE
        clipfracs = []
        for epoch in range(args.update_epochs):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v[:, mb] for k, v in data.items()}  # (L, B, N, ...) per agent, (L, B, K) per team
                a_state = c_state = None
                if args.recurrent != "none":
                    a_state = (init_states["prev_hidden_states"][mb],) + (
                        (init_states["prev_cell_states"][mb],) if args.recurrent == "lstm" else ())
                    c_state = (init_states["prev_critic_hidden_states"][mb],) + (
                        (init_states["prev_critic_cell_states"][mb],) if args.recurrent == "lstm" else ())
                dist, _ = actor(d["obs"], a_state, d["episode_starts"], d.get("action_masks"))
                new_logprob, entropy = dist.log_prob(d["actions"]), dist.entropy()  # (L, B, N)
                new_value, _ = mixed_team_value(critic, mixer, d["obs"], d["global_states"], c_state,
                                                d["episode_starts"])  # (L, B, K)
                logratio = new_logprob - d["log_probs"]
                ratio = logratio.exp()
                alive_mb = d["alive"] * trained  # fixed groups' zero loss leaves their weights exactly as they were
                with torch.no_grad():
                    approx_kl = masked_mean((ratio - 1) - logratio, alive_mb)  # Schulman's k3 estimator
                    clipfracs.append(masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), alive_mb).item())

                # Clipped surrogate objective (Schulman et al. 2017, eq. 7), its team's advantage for every agent
                adv = d["advantages"][..., team_of]  # (L, B, N)
                clipped_ratio = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = masked_mean(torch.max(-adv * ratio, -adv * clipped_ratio), alive_mb)
                # Team-value loss on V_tot, clipped around the rollout's prediction (in normalised units)
                team_alive_mb = d["team_alive"]
                v_loss_unclipped = (new_value - d["targets"]) ** 2
                if args.clip_vloss:
                    old_value = d["values"][..., firsts]  # (L, B, K)
                    v_clipped = old_value + (new_value - old_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - d["targets"]) ** 2),
                                               team_alive_mb)
                else:
                    v_loss = 0.5 * masked_mean(v_loss_unclipped, team_alive_mb)
                entropy_loss = masked_mean(entropy, alive_mb)
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss

                optimizer.zero_grad()
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optimizer.step()
        live = team_alive.bool()
        stats = dict(policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_loss.item(),
                     approx_kl=approx_kl.item(), clipfrac=float(np.mean(clipfracs)), grad_norm=grad_norm.item(),
                     explained_variance=explained_variance(values[live], returns[live]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, mixer, value_norm, optimizer, shuffle_gen, global_step, iteration,
                (starts, actor_state, critic_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, mixer, value_norm, optimizer, shuffle_gen, global_step, args.num_iterations,
        (starts, actor_state, critic_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
