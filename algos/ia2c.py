"""IA2C: independent synchronous advantage actor-critic, every agent with its own decentralised
critic (Papoudakis et al. 2021, "Benchmarking Multi-Agent Deep Reinforcement Learning Algorithms
in Cooperative Tasks", arXiv:2006.07869; A2C is the synchronous A3C of Mnih et al. 2016,
arXiv:1602.01783).

The same file as MAA2C except the critic: each agent's value is learned from its own
observation only, so nothing global is needed at training time either. Every rollout gives one
gradient step on the plain policy-gradient loss: no ratio clipping, no epochs. Run:

    python algos/ia2c.py --env simple_spread
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.turns import turn_gae, whose_move
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, ValueNorm, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):  # bases last to first: --help lists RunArgs' fields first
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 5_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once); the learning-rate
    schedule anneals over it"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50 continuous_actions=true"""
    num_envs: int = 32
    """E, env copies stepped together in the rollout (A2C's only source of decorrelated samples)"""

    # --- algorithm
    num_steps: int = 10
    """T, steps per env copy in each rollout (one iteration = T * E env steps and one gradient step)"""
    learning_rate: float = 3e-3
    """Adam learning rate (annealed to 0 over --total-timesteps with --anneal-lr; on simple_spread 3e-3 learns
    several times faster than 1e-3, docs/benchmarks-history.md) of actor and critic"""
    anneal_lr: bool = True
    """decay the learning rate linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.95
    """discount factor (0.99 made one-step-per-rollout learning diverge on simple_spread; see the docs page)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation; 1.0 gives A3C's n-step returns (every step bootstraps
    from V at the rollout's end, n = the steps left in the rollout)"""
    norm_adv: bool = True
    """normalise advantages to zero mean and unit std over the rollout, per group (live entries)"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """value-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    value_norm: bool = True
    """normalise value targets with running statistics (MAPPO's ValueNorm)"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in actor and critic (trained on each copy's whole rollout of T steps)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actor and critic"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""
    factored_actions: bool = False
    """where each action is a tuple of choices (simple_reference's move and word, env.action_factors), one
    categorical per choice, their logits summed into the joint action's (nets.Actor); off: one logit per action"""
    # --- policy mapping: --share-params, --agent-groups, --train-groups, --load-group (common.groups.GroupArgs)

    @property
    def batch_size(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_size)  # rounded up: at least total_timesteps


def validate(args: Args) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "eval_episodes", "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0.0 <= args.gae_lambda <= 1.0:
        raise ConfigError(f"--gae-lambda must be in [0, 1] (1.0: n-step returns), got {args.gae_lambda}")
    check_group_args(args)  # --share-params, --load-group (common/groups.py)


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised actor and decentralised critic, both on each agent's own observation (an image,
    obs_shape (H, W, C), through a small CNN: nets.encoder_for)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = Actor(env.obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  sets, args.hidden_sizes, args.recurrent, args.activation, obs_sizes=env.obs_dims,
                  action_factors=factored_actions(args, env)).to(device)
    critic = Critic(env.obs_shape, env.n_agents, sets, args.hidden_sizes, args.recurrent,
                    args.activation, in_sizes=env.obs_dims).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def local_critic_inputs(obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Independent critic input: each agent's own observation, (E, N, obs_dim). The global
    state is ignored: an independent critic sees no more than the agent's policy does."""
    return obs


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


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def group_mean(x: torch.Tensor, mask: torch.Tensor, group_onehot: torch.Tensor) -> torch.Tensor:
    """Masked mean of x (T, E, N) over each group's agents (group_onehot (N, G)), given to every agent: (N,).
    Rival teams (a predator's catch is the prey's loss) never share a mean and scale."""
    return sum(masked_mean(x, mask * g) * g for g in group_onehot.T)  # g (N,): 1 on the group's agents


def checkpoint_payload(args, teams, actor, critic, value_norm, optimizer, global_step, iteration, rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; the
    agents' groups and parameter rows let --load-group take one group's weights out of it. `rollout`:
    what the rollout carries into the next iteration (episode starts, recurrent states)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "rollout": rollout,
            **teams.payload(actor=actor, critic=critic)}


def acting_policy(saved: Args, env, ckpt: dict, device):
    """A saved run's acting network (for --evaluate-checkpoint, and --load-group in any algorithm)."""
    actor, _ = build_networks(saved, env, device)
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
    teams = policy_map(args, envs, ALGO, device, turn_based=True)  # bad names and unusable runs fail here
    groups, trained = teams.members, teams.trained  # {name: agents}, (N,) 1 where the agent's group learns
    actor, critic = build_networks(args, envs, device)
    value_norm = ValueNorm(groups=teams.group_of_agent).to(device)  # statistics per group: rival returns never mix
    teams.load_weights({"actor": actor, "critic": critic}, value_norm)  # --load-group from an IA2C run: copy it
    optimizer = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        actor.load_state_dict(ckpt["actor"])
        critic.load_state_dict(ckpt["critic"])
        value_norm.load_state_dict(ckpt["value_norm"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1

    obs_np, state_np, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    acting = whose_move(envs, device)  # (E, N) the mover in a turn-based game, SMAX's live units (turns.py), else None
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
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        # The update replays each copy's whole rollout as one sequence from these states; the
        # networks do not change in between, so it rebuilds exactly the rollout's states.
        first_actor_state, first_critic_state = actor_state, critic_state
        for step in range(T):
            global_step += E
            extras = {"episode_starts": starts, "critic_inputs": local_critic_inputs(obs, state)}
            if mask is not None:
                extras["action_masks"] = mask
            if acting is not None:
                extras["acting"] = acting
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                action = teams.override(dist.sample()[0], obs, starts, mask)[None]  # (1, E, N[, act_dim]); groups
                # loaded from another algorithm's run act as that run does
                logprob = dist.log_prob(action)  # (1, E, N)
                value, critic_state = critic(extras["critic_inputs"][None], critic_state, starts[None])  # (1, E, N)
            result = envs.step(action[0])  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final obs) where an episode ended: what a truncation bootstraps from
                final_state = torch.as_tensor(result.final_state, device=device)
                with torch.no_grad():
                    final_value, _ = critic(local_critic_inputs(final_obs, final_state)[None], critic_state,
                                            torch.zeros_like(starts)[None])  # (1, E, N)
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action[0], log_probs=logprob[0], values=value[0],
                rewards=torch.as_tensor(result.reward, device=device), next_obs=final_obs,
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_values=final_value[0], **extras)
            obs, state = next_obs, torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            acting = whose_move(result, device)
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # V(s_T): bootstraps the last step wherever its episode goes on
            last_value, _ = critic(local_critic_inputs(obs, state)[None], critic_state, starts[None])  # (1, E, N)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        with torch.no_grad():
            # V(s_{t+1}) is the next step's value while the episode goes on, and the value of the
            # final observation where it ended (the next step's value belongs to a new episode).
            next_values = torch.cat([b["values"][1:], last_value], dim=0)  # (T, E, N)
            next_values = torch.where(b["episode_ends"].bool(), b["final_values"], next_values)
            values = value_norm.denormalize(b["values"]) if args.value_norm else b["values"]
            next_values = value_norm.denormalize(next_values) if args.value_norm else next_values
            if acting is not None:  # each agent's own moves: rewards credited to its last move; only moves are learned from
                advantages, returns, b["alive"] = turn_gae(b, values, next_values, acting, args.gamma, args.gae_lambda)
            else:
                advantages, returns = compute_gae(b["rewards"], values, next_values, b["terminated"], b["truncated"],
                                                  args.gamma, args.gae_lambda)
            # Fixed groups (not in --train-groups) act but take no part in any loss or statistic: their zero loss
            # leaves their weights exactly as they were.
            learn = b["alive"] * trained  # (T, E, N) live steps of agents whose group learns
            if args.norm_adv:
                adv_mean = group_mean(advantages, learn, teams.onehot)  # (N,) each group's mean over the rollout
                adv_std = group_mean((advantages - adv_mean) ** 2, learn, teams.onehot).sqrt()
                advantages = (advantages - adv_mean) / (adv_std + 1e-8)  # normalised within each group
            if args.value_norm:
                value_norm.update(returns, learn)
            targets = value_norm.normalize(returns) if args.value_norm else returns

# ============================================================================ 7. UPDATE
        # One gradient step on the whole rollout: every copy's T steps as one sequence, (T, E, N, ...).
        dist, _ = actor(b["obs"], first_actor_state, b["episode_starts"], b.get("action_masks"))
        new_logprob, entropy = dist.log_prob(b["actions"]), dist.entropy()  # (T, E, N)
        new_value, _ = critic(b["critic_inputs"], first_critic_state, b["episode_starts"])  # (T, E, N)

        # Policy gradient with the advantage as the weight (Mnih et al. 2016, Algorithm S3)
        pg_loss = -masked_mean(advantages * new_logprob, learn)
        v_loss = 0.5 * masked_mean((new_value - targets) ** 2, learn)
        entropy_loss = masked_mean(entropy, learn)
        loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss

        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(list(actor.parameters()) + list(critic.parameters()),
                                                   args.max_grad_norm)
        optimizer.step()
        stats = dict(policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_loss.item(),
                     grad_norm=grad_norm.item(),
                     explained_variance=explained_variance(values[learn.bool()], returns[learn.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, value_norm, optimizer, global_step, iteration,
                (starts, actor_state, critic_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, value_norm, optimizer, global_step, args.num_iterations,
        (starts, actor_state, critic_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
