"""HATRPO: heterogeneous-agent TRPO (Kuba et al. 2022, "Trust Region Policy Optimisation in
Multi-Agent Reinforcement Learning", ICLR, arXiv:2109.11251).

Every agent has its own policy parameters (--share-params none); one critic on the global state
values the team's return (one per learning group: rival teams keep theirs). Each update draws a
random order of the agents; one after another, agent i_m takes a TRPO step (conjugate gradient,
line search under --max-kl) on the joint advantage weighted by the product of the ratios
pi_new / pi_old of the agents updated before it. The same file as algos/happo.py except that each
agent's step is a trust-region step. Run:

    python algos/hatrpo.py --env simple_spread
"""
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, Tuple

import numpy as np
import torch
from torch.distributions import kl_divergence

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, MaskedCategorical, ValueNorm, explained_variance, forward_agent


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
    num_envs: int = 32
    """E, env copies stepped together in the rollout"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps)"""
    learning_rate: float = 2e-3
    """Adam learning rate of the critic (the agents take trust-region steps, no optimiser)"""
    anneal_lr: bool = True
    """decay the learning rate linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.95
    """discount factor (0.95, as MAPPO's: a horizon near MPE's 25-step episodes learns much faster than 0.99 there)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation (on the team value)"""
    max_kl: float = 0.01
    """each agent's trust-region radius: the largest mean KL(old policy || new policy) over its live steps, nats"""
    cg_iters: int = 10
    """conjugate-gradient iterations for each agent's natural-gradient direction"""
    cg_damping: float = 0.1
    """added to the Fisher matrix (F + damping * I) so that conjugate gradient stays well conditioned"""
    backtrack_coef: float = 0.5
    """the line search tries the full step, then this fraction of it, its square, ..."""
    backtrack_iters: int = 10
    """line-search trials; if none keeps the KL within --max-kl and improves the surrogate, the agent stays"""
    update_epochs: int = 10
    """passes of the critic over each rollout"""
    num_minibatches: int = 1
    """critic minibatches per epoch (each agent's step always uses the whole rollout)"""
    clip_coef: float = 0.2
    """clip of the team-value prediction around the rollout's prediction (with --clip-vloss)"""
    clip_vloss: bool = True
    """clip the team-value prediction around the rollout's prediction"""
    max_grad_norm: float = 10.0
    """gradient-norm clip of the critic"""
    value_norm: bool = True
    """normalise the team-value targets with running statistics (MAPPO's ValueNorm)"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in actor and critic"""
    chunk_len: int = 25
    """recurrent models train on sequence chunks of this many steps (must divide num_steps)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actor and critic"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""
    factored_actions: bool = False
    """where each action is a tuple of choices (simple_reference's move and word, env.action_factors), one
    categorical per choice, their logits summed into the joint action's (nets.Actor); off: one logit per action"""
    share_params: Literal["all", "group", "none"] = "none"
    """none (HATRPO's own): one actor per agent, each stepping in its turn; all / group: agents share an actor set,
    which each of them steps in its turn (HARL's share_param). Also --agent-groups, --train-groups, --load-group"""

    @property
    def batch_size(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_size)  # rounded up: at least total_timesteps


def validate(args: Args) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "chunk_len", "update_epochs", "eval_episodes", "eval_num_envs",
                 "total_timesteps", "cg_iters", "backtrack_iters"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.recurrent != "none" and args.num_steps % args.chunk_len:
        raise ConfigError(f"--chunk-len {args.chunk_len} must divide --num-steps {args.num_steps}")
    sequences = args.num_envs * (args.num_steps // args.chunk_len if args.recurrent != "none" else args.num_steps)
    if not 1 <= args.num_minibatches <= sequences:
        raise ConfigError(f"--num-minibatches must be between 1 and {sequences} (the number of "
                          f"{'sequence chunks' if args.recurrent != 'none' else 'env steps'} per rollout)")
    if args.max_kl <= 0 or not 0 < args.backtrack_coef < 1:
        raise ConfigError("--max-kl must be positive and --backtrack-coef in (0, 1)")
    check_group_args(args)  # --share-params, --load-group (common/groups.py)


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device, n_teams: int = 1):
    """Decentralised actor with separate parameters per agent (stacked, run as one batched call; --share-params
    all / group: shared sets); one team critic V(s) on the global state per learning team. Image observations
    (obs_shape (H, W, C)) and image states get a small CNN in front (nets.encoder_for)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    actor = Actor(env.obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  param_layout(args, env), args.hidden_sizes, args.recurrent, args.activation,
                  obs_sizes=env.obs_dims, action_factors=factored_actions(args, env)).to(device)
    # The critic's "agents" are the K teams, each its own weights (one team: its one-hot is a constant 1):
    # (L, B, K, state_dim) -> (L, B, K)
    state_in = env.state_shape if len(env.state_shape) == 3 else env.state_dim  # an image state, or flat
    critic = Critic(state_in, n_teams, n_teams == 1, args.hidden_sizes, args.recurrent, args.activation).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def team_value(critic, state: torch.Tensor, critic_state, starts: torch.Tensor):
    """V(s) of every learning team: state (L, B, state_dim), starts (L, B, K) -> (value (L, B, K), critic_state).
    One value per env step and team: the joint advantage it gives is what its agents' updates weigh."""
    return critic(state.unsqueeze(-2).expand(*starts.shape, -1), critic_state, starts)  # (L, B, K)


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


def team_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """masked_mean of x (..., K) within each team: (K,). Rival teams never share a mean or a scale."""
    return torch.stack([masked_mean(x[..., k], mask[..., k]) for k in range(x.shape[-1])])


def own_sets(actor) -> bool:
    """Every agent has its own parameter set (--share-params none): its rows run and move alone."""
    return not actor.net.share_params and actor.net.n_sets == actor.net.n_agents


def agent_forward_at(actor, agent: int, *inputs, params=None):
    """nets.forward_agent (the agent's own rows of the stacked weights) with own_sets; shared sets (--share-params
    all / group) run the whole actor (at params) and cut the agent's distribution (over (L, B, 1)) out."""
    if own_sets(actor):
        return forward_agent(actor, agent, *inputs, params=params)
    return torch.func.functional_call(actor, params or {}, inputs)[0].agent(agent), None


def agent_ratio(dist, d, agent: int) -> torch.Tensor:
    """pi_new / pi_old of one agent at every step, (L, B), from its own distribution (over (L, B, 1),
    nets.forward_agent); 1 where the agent was not alive."""
    ratio = (dist.log_prob(d["actions"][:, :, agent:agent + 1])[..., 0] - d["log_probs"][..., agent]).exp()
    return torch.where(d["alive"][..., agent].bool(), ratio, torch.ones_like(ratio))


def flat_agent_params(actor, groups: int) -> torch.Tensor:
    """The actor's parameters as one (G, P) matrix. G = N with separate parameters: every tensor has the
    agent axis first (stacked nets.AgentLinear weights, the per-agent log-std), so row n is all of agent n's."""
    return torch.cat([p.detach().reshape(groups, -1) for p in actor.parameters()], dim=1)


def as_agent_param_dict(actor, theta: torch.Tensor) -> dict:
    """(G, P) -> {name: tensor shaped as that parameter}: the inverse of flat_agent_params, for functional_call."""
    params, start = {}, 0
    for name, p in actor.named_parameters():
        size = p.numel() // theta.shape[0]
        params[name] = theta[:, start:start + size].reshape(p.shape)
        start += size
    return params


def policy_kl(old, new) -> torch.Tensor:
    """KL(old || new) of two nets.Actor distributions, exact per agent step: (L, B, N)."""
    if isinstance(old, MaskedCategorical):  # masked (and padded) actions have old.probs = 0: no term
        return (old.probs * (old.logits - new.logits)).sum(-1)
    return (kl_divergence(old.normal, new.normal) * old.dim_mask).sum(-1)  # the agent's real dimensions


def agent_surrogate_and_kl(actor, theta_row, theta_all, agent: int, d, a_state, old_dist, factor):
    """One agent's surrogate mean_alive[M * rho * A] and mean_alive[KL(pi_old || pi)] over its live steps,
    each (1,), with its parameters at theta_row (1, P) (the others' rows of theta_all (N, P) are not read;
    shared sets: theta_all (1, P) is the whole actor); M = factor (L, S); old_dist: the agent's own policy
    before its step (with its own set, its rollout policy), over (L, S, 1)."""
    row = agent if len(theta_all) > 1 else 0
    theta = torch.cat([theta_all[:row], theta_row, theta_all[row + 1:]])  # (N, P), differentiable in theta_row
    dist, _ = agent_forward_at(actor, agent, d["obs"], a_state, d["episode_starts"], d.get("action_masks"),
                               params=as_agent_param_dict(actor, theta))  # the agent's own network, over (L, S, 1)
    ratio = (dist.log_prob(d["actions"][:, :, agent:agent + 1])[..., 0] - d["log_probs"][..., agent]).exp()
    alive = d["alive"][..., agent]
    return (masked_mean(factor * ratio * d["advantages"], alive)[None],
            masked_mean(policy_kl(old_dist, dist)[..., 0], alive)[None])


def conjugate_gradient(Avp, b: torch.Tensor, iters: int, tol: float = 1e-10) -> torch.Tensor:
    """Solve A x = b for every row of b (G, P) at once, each row its own system with its own step
    sizes; Avp(v) returns A v (A symmetric positive definite, rows not mixed). Nocedal and Wright
    2006, Algorithm 5.2. A row whose squared residual falls below tol stops moving."""
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()  # residual b - A x, search direction
    rr = (r * r).sum(-1, keepdim=True)  # (G, 1)
    for _ in range(iters):
        active = (rr > tol).float()
        Ap = Avp(p)
        alpha = active * rr / (p * Ap).sum(-1, keepdim=True).clamp(min=1e-30)
        x, r = x + alpha * p, r - alpha * Ap
        rr_new = (r * r).sum(-1, keepdim=True)
        p = r + active * rr_new / rr.clamp(min=1e-30) * p
        rr = rr_new
    return x


def fisher_vector_product(kl_grad: torch.Tensor, theta: torch.Tensor, v: torch.Tensor, damping: float):
    """(F + damping * I) v for v (G, P): F, the Hessian of the mean KL at the old parameters, is the Fisher
    matrix (Schulman et al. 2015, App. C); kl_grad was built with create_graph=True, so one backward gives F v."""
    return torch.autograd.grad((kl_grad * v).sum(), theta, retain_graph=True)[0] + damping * v


def agent_trpo_step(actor, d, a_state, old_dist, agent: int, factor, max_kl: float, damping: float, cg_iters: int,
                    backtrack_coef: float, backtrack_iters: int):
    """One TRPO step of one agent on the rollout d (Schulman et al. 2015, Appendix C), the others held
    fixed. Returns (the accepted fraction of the full step, 0 if none; the surrogate after the step). A shared set
    (--share-params all / group) is one row, the whole actor: the agent's step moves it for every agent using it
    (other sets and agents' rows get an exactly zero step: their gradient and Fisher rows are zero)."""
    row = agent if own_sets(actor) else 0
    # (N, P), row n = agent n; or (1, P)
    theta_all = flat_agent_params(actor, actor.net.n_agents if own_sets(actor) else 1)
    theta_old = theta_all[row:row + 1]  # (1, P)
    theta = theta_old.clone().requires_grad_(True)
    with torch.backends.cudnn.flags(enabled=False):  # F v differentiates twice; cuDNN's GRU/LSTM cannot
        surrogate, kl = agent_surrogate_and_kl(actor, theta, theta_all, agent, d, a_state, old_dist, factor)  # (1,)s
    grad = torch.autograd.grad(surrogate.sum(), theta, retain_graph=True)[0]  # (1, P)
    kl_grad = torch.autograd.grad(kl.sum(), theta, create_graph=True)[0]  # (1, P), zero here; its derivative is F
    fvp = partial(fisher_vector_product, kl_grad, theta, damping=damping)
    direction = conjugate_gradient(fvp, grad, cg_iters)  # (1, P), about F^-1 g
    # Scale so that the quadratic model of the KL, 0.5 * s^T F s, equals max_kl
    full_step = direction * (2 * max_kl / (direction * fvp(direction)).sum(-1, keepdim=True).clamp(min=1e-12)).sqrt()
    # Backtracking line search: the largest fraction within the KL limit that improves the surrogate
    fraction, new_surrogate = 0.0, surrogate.detach()
    with torch.no_grad():
        for k in range(backtrack_iters):
            trial_surrogate, trial_kl = agent_surrogate_and_kl(actor, theta_old + backtrack_coef**k * full_step,
                                                               theta_all, agent, d, a_state, old_dist, factor)
            if trial_kl.item() <= max_kl and trial_surrogate.item() > surrogate.item():
                fraction, new_surrogate = backtrack_coef**k, trial_surrogate
                break
        if fraction:  # a rejected step leaves the actor as it was (a zero or non-finite step included)
            theta_all[row] += fraction * full_step[0]
            for p, value in zip(actor.parameters(), as_agent_param_dict(actor, theta_all).values()):
                p.copy_(value)
    return fraction, new_surrogate.item()


def checkpoint_payload(args, teams, actor, critic, value_norm, critic_optimizer, shuffle_gen, global_step, iteration,
                       rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; `rollout`
    is what the rollout carries into the next iteration (episode starts, recurrent states)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "value_norm": value_norm.state_dict(), "critic_optimizer": critic_optimizer.state_dict(),
            "global_step": global_step, "iteration": iteration, "rng": rng_state(),
            "shuffle_rng": shuffle_gen.get_state(), "rollout": rollout,
            **teams.payload(actor=actor)}  # the critics are per team, not per agent: --load-group copies actors


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
    teams = policy_map(args, envs, ALGO, device)  # groups, which learn, which act as other runs; bad names fail
    # K learning teams, each with its own team reward and critic. The buffer keeps team k's value and critic state
    # in its agents' slots (team_of[n]: agent n's team, 0 for fixed agents: never read), read back at heads[k].
    K, heads, groups = len(teams.learning), [m[0] for m in teams.learning], teams.members  # groups: for the logs
    team_of = teams.team_of_agent.tolist()
    actor, critic = build_networks(args, envs, device, K)
    value_norm = ValueNorm(groups=None if K == 1 else range(K)).to(device)
    teams.load_weights({"actor": actor})  # --load-group from a HATRPO run: copy that group's actor
    # Only the critic has an optimiser: the agents move by trust-region steps (section 7).
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    # Agent orders and minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        actor.load_state_dict(ckpt["actor"])
        critic.load_state_dict(ckpt["critic"])
        value_norm.load_state_dict(ckpt["value_norm"])
        critic_optimizer.load_state_dict(ckpt["critic_optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])
    L = args.chunk_len if args.recurrent != "none" else 1

    obs_np, state_np, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    state = torch.as_tensor(state_np, device=device)  # (E, state_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, n_actions)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: recurrent states reset there
    actor_state = actor.initial_state(E, device)  # tuple of (E, N, H), or None
    critic_state = critic.initial_state(E, device)  # tuple of (E, K, H), or None
    if restored:  # the resumed rollout goes on mid-episode where it stopped
        starts, actor_state, critic_state = ckpt["rollout"]
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            critic_optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for step in range(T):
            global_step += E
            # The global state is a team entry (once per env copy); V(s) and the critic's recurrent
            # state, one per team, are stored per agent (its team's) and read back at one agent of each team.
            extras = {"episode_starts": starts}
            if actor_state is not None:  # states *before* this step, to restart training sequences
                extras["prev_hidden_states"] = actor_state[0]
                extras["prev_critic_hidden_states"] = critic_state[0][:, team_of]  # (E, N, H)
                if args.recurrent == "lstm":
                    extras["prev_cell_states"] = actor_state[1]
                    extras["prev_critic_cell_states"] = critic_state[1][:, team_of]
            if mask is not None:
                extras["action_masks"] = mask
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                action = teams.override(dist.sample()[0], obs, starts, mask)[None]  # (1, E, N[, act_dim]); groups
                # loaded from another algorithm's run act as that run does
                logprob = dist.log_prob(action)  # (1, E, N)
                value, critic_state = team_value(critic, state[None], critic_state,
                                                 starts[None][..., heads])  # (1, E, K)
            result = envs.step(action[0])  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final state) where an episode ended: what a truncation bootstraps from
                final_state = torch.as_tensor(result.final_state, device=device)
                with torch.no_grad():
                    final_value, _ = team_value(critic, final_state[None], critic_state,
                                                torch.zeros_like(starts)[None][..., heads])  # (1, E, K)
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
        with torch.no_grad():  # V(s_T): bootstraps the last step wherever its episode goes on
            last_value, _ = team_value(critic, state[None], critic_state, starts[None][..., heads])  # (1, E, K)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        with torch.no_grad():
            # V(s_{t+1}) is the next step's value while the episode goes on, and the value of the
            # final state where it ended (the next step's value belongs to a new episode).
            values = b["values"][..., heads]  # (T, E, K) V(s) as predicted in the rollout
            next_values = torch.cat([values[1:], last_value], dim=0)  # (T, E, K)
            next_values = torch.where(b["episode_ends"][..., heads].bool(), b["final_values"][..., heads], next_values)
            values = value_norm.denormalize(values) if args.value_norm else values
            next_values = value_norm.denormalize(next_values) if args.value_norm else next_values
            # One team reward, one team value per team: GAE gives the joint advantage A(s, a) of each env
            # step, the quantity the multi-agent advantage decomposition splits among the team's agents.
            team_reward = teams.team_rewards(b["rewards"])  # (T, E, K), R_pz3 units for mpe2
            flags = [team_flags(b["truncated"][..., m], b["episode_ends"][..., m]) for m in teams.learning]
            terminated, truncated = (torch.stack(f, -1) for f in zip(*flags))  # (T, E, K) each
            advantages, returns = compute_gae(team_reward, values, next_values, terminated, truncated,
                                              args.gamma, args.gae_lambda)  # (T, E, K) each
            team_alive = torch.stack([b["alive"][..., m].amax(-1) for m in teams.learning], -1)  # (T, E, K)
            adv_mean = team_mean(advantages, team_alive)  # (K,)
            adv_std = team_mean((advantages - adv_mean) ** 2, team_alive).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8)  # normalised over the rollout, per team
            if args.value_norm and K == 1:
                value_norm.update(returns[team_alive.bool()])
            elif args.value_norm:  # statistics per team: rivals' returns never share a mean
                value_norm.update(returns, team_alive)
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # Lay the rollout out as (L, S, N, ...): S sequences of L steps (L = 1 without recurrence).
        data = {k: to_chunks(v, L) for k, v in b.items() if not k.startswith("prev_")}
        data.update(advantages=to_chunks(advantages, L), targets=to_chunks(targets, L),
                    team_alive=to_chunks(team_alive, L))  # team tensors: (L, S, K)
        # Recurrent states stored at each chunk's first step restart the sequences: (S, N, H).
        init_states = {k: v[::L].reshape(-1, N, v.shape[-1]) for k, v in b.items() if k.startswith("prev_")}
        S = data["rewards"].shape[1]
        a_state = c_state = None
        if args.recurrent != "none":
            a_state = (init_states["prev_hidden_states"],) + (
                (init_states["prev_cell_states"],) if args.recurrent == "lstm" else ())
            c_state = (init_states["prev_critic_hidden_states"][:, heads],) + (
                (init_states["prev_critic_cell_states"][:, heads],) if args.recurrent == "lstm" else ())

# ============================================================================ 7. UPDATE
        # The agents update one after another, in an order drawn afresh for every update (Kuba et al.
        # 2022). factors[k] (L, S) is M, the product of pi_new / pi_old of team k's agents already updated; the
        # next agent takes a trust-region step on the surrogate of M * A. Each agent's forward passes
        # run its own network only (its rows of the stacked weights: forward_agent).
        # A shared set (--share-params all / group) takes one step per agent in turn, each on its own data.
        inputs = (data["obs"], a_state, data["episode_starts"], data.get("action_masks"))
        with torch.no_grad():  # the rollout's policy: with own sets every agent's KL is measured from it
            old_dist, _ = actor(*inputs)
        factors = [torch.ones(L, S, device=device) for _ in range(K)]  # (L, S) per team
        fractions, surrogates = [], []
        # Only learning groups' agents update (a random order over them): fixed groups' rows never move.
        for agent in [n for n in torch.randperm(N, generator=shuffle_gen).tolist() if teams.trained_list[n]]:
            team = team_of[agent]
            team_data = {**data, "advantages": data["advantages"][..., team]}  # (L, S): its team's advantage
            with torch.no_grad():  # the trust region is around its policy before its step (a shared set has moved
                # in earlier turns, and away from the KL's minimum its Hessian is no Fisher matrix: HARL does so too)
                start = old_dist.agent(agent) if own_sets(actor) else agent_forward_at(actor, agent, *inputs)[0]
            fraction, surrogate = agent_trpo_step(actor, team_data, a_state, start, agent, factors[team], args.max_kl,
                                                  args.cg_damping, args.cg_iters, args.backtrack_coef,
                                                  args.backtrack_iters)
            fractions, surrogates = fractions + [fraction], surrogates + [surrogate]
            with torch.no_grad():  # the agent's ratio at its new policy joins its team's factor
                dist, _ = agent_forward_at(actor, agent, *inputs)
                factors[team] = factors[team] * agent_ratio(dist, data, agent)
        with torch.no_grad():
            dist, _ = actor(*inputs)  # every agent's policy after the update (logged entropy and KL)
        learn = data["alive"] * teams.trained  # (L, S, N) live steps of learning agents
        # The team critic: regression on the value targets, as in MAPPO.
        for epoch in range(args.update_epochs):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v[:, mb] for k, v in data.items()}
                mb_state = None if c_state is None else tuple(s[mb] for s in c_state)
                new_value, _ = team_value(critic, d["global_states"], mb_state,
                                          d["episode_starts"][..., heads])  # (L, B, K)
                # Team-value loss, clipped around the rollout's prediction (in normalised units)
                v_loss_unclipped = (new_value - d["targets"]) ** 2
                if args.clip_vloss:
                    old_value = d["values"][..., heads]  # (L, B, K)
                    v_clipped = old_value + (new_value - old_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss_unclipped = torch.max(v_loss_unclipped, (v_clipped - d["targets"]) ** 2)
                v_loss = 0.5 * masked_mean(v_loss_unclipped, d["team_alive"])
                critic_optimizer.zero_grad()
                v_loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
                critic_optimizer.step()
        live = team_alive.bool()
        ev = [explained_variance(values[..., k][live[..., k]], returns[..., k][live[..., k]]) for k in range(K)]
        stats = dict(policy_loss=-float(np.mean(surrogates)), value_loss=v_loss.item(),
                     entropy=masked_mean(dist.entropy(), learn).item(),
                     kl=masked_mean(policy_kl(old_dist, dist), learn).item(),
                     step_fraction=float(np.mean(fractions)), grad_norm=grad_norm.item(),
                     explained_variance=sum(ev) / K)  # the mean over teams
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": critic_optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]},
                               groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, value_norm, critic_optimizer, shuffle_gen, global_step,
                iteration, (starts, actor_state, critic_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, value_norm, critic_optimizer, shuffle_gen, global_step,
        args.num_iterations, (starts, actor_state, critic_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
