"""MATRPO: TRPO with a centralised critic (Schulman et al. 2015, "Trust Region Policy
Optimization", arXiv:1502.05477; the multi-agent baseline of Kuba et al. 2022, arXiv:2109.11251).

Each agent acts from its own observation; the critic sees the global state (or all agents'
observations) and is used only during training. The actor moves by one natural-gradient step
per rollout (conjugate gradient on Fisher-vector products), shrunk by a backtracking line search
until the KL to the rollout's policy is within --max-kl and the surrogate improved. The same
file as algos/mappo.py except that update. Run:

    python algos/matrpo.py --env simple_spread
"""
import time
from dataclasses import dataclass
from functools import partial
from typing import Literal, Tuple

import torch
from torch.distributions import kl_divergence
from torch.func import functional_call

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.run_utils import (RunRecorder, args_dict, centralised_input_shape, checkpoint_for_evaluation, pick_device,
                              report_greedy_evaluation, resume_envs, rng_state, seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, MaskedCategorical, ValueNorm, explained_variance


# ============================================================================ 1. ARGS
@dataclass
class Args(RunArgs):
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
    """Adam learning rate of the critic (the actor takes trust-region steps, no optimiser)"""
    anneal_lr: bool = True
    """decay the learning rate linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step episodes learns much faster than 0.99 there)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    max_kl: float = 0.01
    """trust-region radius: the largest mean KL(old policy || new policy) per live agent step, in nats"""
    cg_iters: int = 10
    """conjugate-gradient iterations for the natural-gradient direction"""
    cg_damping: float = 0.1
    """added to the Fisher matrix (F + damping * I) so that conjugate gradient stays well conditioned"""
    backtrack_coef: float = 0.5
    """the line search tries the full step, then this fraction of it, its square, ..."""
    backtrack_iters: int = 10
    """line-search trials; if none keeps the KL within --max-kl and improves the surrogate, the actor stays"""
    update_epochs: int = 10
    """passes of the critic over each rollout"""
    num_minibatches: int = 1
    """critic minibatches per epoch (the actor's step always uses the whole rollout)"""
    clip_coef: float = 0.2
    """clip of the value prediction around the rollout's prediction (with --clip-vloss)"""
    clip_vloss: bool = True
    """clip the value prediction around the rollout's prediction"""
    max_grad_norm: float = 10.0
    """gradient-norm clip of the critic"""
    value_norm: bool = True
    """normalise value targets with running statistics (MAPPO's ValueNorm)"""
    share_params: bool = True
    """one actor and one critic for all agents (with an agent-id one-hot, one trust region); --no-share-params:
    one per agent, each with its own trust region, all solved together"""
    critic_input: Literal["state", "concat_obs"] = "state"
    """what the centralised critic sees: the env's global state, or every agent's observation concatenated"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in actor and critic"""
    chunk_len: int = 25
    """recurrent models train on sequence chunks of this many steps (must divide num_steps)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actor and critic"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""

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
    if args.render_gif and not args.evaluate_checkpoint:
        raise ConfigError("--render-gif needs --evaluate-checkpoint")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised actor on local obs; centralised critic on the global state. Image observations
    (obs_shape (H, W, C)) and image states get a small CNN in front (nets.encoder_for)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    actor = Actor(env.obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  args.share_params, args.hidden_sizes, args.recurrent, args.activation).to(device)
    critic_dim = centralised_input_shape(args, env)  # the state (an image gets a CNN) or all observations
    critic = Critic(critic_dim, env.n_agents, args.share_params, args.hidden_sizes, args.recurrent,
                    args.activation).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def critic_inputs(obs: torch.Tensor, state: torch.Tensor, kind: str) -> torch.Tensor:
    """Centralised-critic input for every agent: (E, N, obs_dim), (E, state_dim) -> (E, N, D).

    Every agent's critic sees the same global information; with shared parameters the
    agent-id one-hot (added in the network) tells the critic whose value it predicts.
    """
    E, N = obs.shape[:2]
    if kind == "state":
        return state[:, None, :].expand(E, N, state.shape[-1])  # (E, N, state_dim)
    return obs.reshape(E, 1, -1).expand(E, N, -1)  # (E, N, N * obs_dim)


def compute_gae(rewards, values, next_values, terminated, truncated, gamma: float, lam: float):
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16), all tensors (T, E, N).

    next_values[t] is V of the true next state s_{t+1} (the final observation where the episode
    ended). A time-limit truncation still bootstraps from it: the episode was cut, the task
    was not over. Termination does not. Either way the advantage does not flow back across
    the episode boundary.
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
    """Mean over the entries where mask is 1: dead agents' steps do not count in any loss."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def flat_params(actor, groups: int) -> torch.Tensor:
    """The actor's parameters as one (G, P) matrix. G = N with separate parameters: every tensor has the
    agent axis first (stacked nets.AgentLinear weights, the per-agent log-std), so row n is all of agent n's."""
    return torch.cat([p.detach().reshape(groups, -1) for p in actor.parameters()], dim=1)


def as_param_dict(actor, theta: torch.Tensor) -> dict:
    """(G, P) -> {name: tensor shaped as that parameter}: the inverse of flat_params, for functional_call."""
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


def group_mean(x: torch.Tensor, mask: torch.Tensor, groups: int) -> torch.Tensor:
    """(L, B, N) -> (G,): the masked mean over each agent's steps (G = N) or over all of them (G = 1)."""
    if groups == 1:
        return masked_mean(x, mask)[None]
    return (x * mask).sum((0, 1)) / mask.sum((0, 1)).clamp(min=1.0)


def surrogate_and_kl(actor, theta, d, a_state, old_dist, groups: int):
    """TRPO's objective and constraint at parameters theta (G, P), each (G,): the surrogate
    mean_alive[rho * A] (Schulman et al. 2015, eq. 14, with rho = pi_theta / pi_old) and
    mean_alive[KL(pi_old || pi_theta)], the mean over the rollout's live agent steps."""
    dist, _ = functional_call(actor, as_param_dict(actor, theta),
                              (d["states"], a_state, d["episode_starts"], d.get("action_masks")))
    ratio = (dist.log_prob(d["actions"]) - d["log_probs"]).exp()  # (L, B, N)
    return (group_mean(ratio * d["advantages"], d["alive"], groups),
            group_mean(policy_kl(old_dist, dist), d["alive"], groups))


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


def trpo_step(actor, d, a_state, groups: int, max_kl: float, damping: float, cg_iters: int,
              backtrack_coef: float, backtrack_iters: int) -> dict:
    """One TRPO update of the actor on the rollout d (Schulman et al. 2015, Appendix C). Every
    parameter group (each agent with separate parameters) gets its own natural-gradient
    direction, step size and line search, all computed together. Returns the step's statistics."""
    theta_old = flat_params(actor, groups)  # (G, P)
    with torch.no_grad():
        old_dist, _ = actor(d["states"], a_state, d["episode_starts"], d.get("action_masks"))
    theta = theta_old.clone().requires_grad_(True)
    surrogate, kl = surrogate_and_kl(actor, theta, d, a_state, old_dist, groups)  # (G,) each
    grad = torch.autograd.grad(surrogate.sum(), theta, retain_graph=True)[0]  # (G, P)
    kl_grad = torch.autograd.grad(kl.sum(), theta, create_graph=True)[0]  # (G, P), zero here; its derivative is F
    fvp = partial(fisher_vector_product, kl_grad, theta, damping=damping)
    direction = conjugate_gradient(fvp, grad, cg_iters)  # (G, P), about F^-1 g
    # Scale so that the quadratic model of the KL, 0.5 * s^T F s, equals max_kl
    full_step = direction * (2 * max_kl / (direction * fvp(direction)).sum(-1, keepdim=True).clamp(min=1e-12)).sqrt()
    # Backtracking line search: each group takes the largest fraction of its step whose true KL is
    # within the limit and whose surrogate improved; a group with no such fraction stays where it is.
    fraction = torch.zeros(groups, 1, device=theta_old.device)  # (G, 1), 0 = no step
    with torch.no_grad():
        for k in range(backtrack_iters):
            new_surrogate, new_kl = surrogate_and_kl(actor, theta_old + backtrack_coef**k * full_step, d, a_state,
                                                     old_dist, groups)
            accept = (new_kl <= max_kl) & (new_surrogate > surrogate) & (fraction[:, 0] == 0)
            fraction[accept] = backtrack_coef**k
            if bool((fraction > 0).all()):
                break
        for p, value in zip(actor.parameters(), as_param_dict(actor, theta_old + fraction * full_step).values()):
            p.copy_(value)
        dist, _ = actor(d["states"], a_state, d["episode_starts"], d.get("action_masks"))
        new_surrogate = masked_mean((dist.log_prob(d["actions"]) - d["log_probs"]).exp() * d["advantages"], d["alive"])
    return dict(policy_loss=-new_surrogate.item(), entropy=masked_mean(dist.entropy(), d["alive"]).item(),
                kl=masked_mean(policy_kl(old_dist, dist), d["alive"]).item(), step_fraction=fraction.mean().item())


def checkpoint_payload(args, actor, critic, value_norm, optimizer, shuffle_gen, global_step, iteration, rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; `rollout`
    is what the rollout carries into the next iteration (episode starts, recurrent states)."""
    return {"algo": "matrpo", "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(), "rollout": rollout}


def evaluate_checkpoint(args: Args) -> dict:
    """Load a run's actor, run greedy episodes, print the returns (and save a GIF if asked)."""
    ckpt, saved, env, device = checkpoint_for_evaluation(args, "matrpo", Args)
    actor, _ = build_networks(saved, env, device)
    actor.load_state_dict(ckpt["actor"])
    return report_greedy_evaluation(args, saved, env, actor, device)


def main(args: Args) -> dict:
    validate(args)
    if args.evaluate_checkpoint:
        return evaluate_checkpoint(args)

# ============================================================================ 4. SETUP
    seed_everything(args.seed, args.torch_deterministic)
    torch.set_num_threads(args.torch_threads)
    device = pick_device(args.cuda)
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    envs = make_env(args.env, args.num_envs, args.seed, env_kwargs, device=device)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    actor, critic = build_networks(args, envs, device)
    value_norm = ValueNorm().to(device)
    # Only the critic has an optimiser: the actor moves by trust-region steps (section 7).
    optimizer = torch.optim.Adam(critic.parameters(), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N, capacity=1)
    # Minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, "matrpo", device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        actor.load_state_dict(ckpt["actor"])
        critic.load_state_dict(ckpt["critic"])
        value_norm.load_state_dict(ckpt["value_norm"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])
    L = args.chunk_len if args.recurrent != "none" else 1
    G = 1 if args.share_params else N  # parameter groups, each with its own trust region

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
    recorder = RunRecorder(args, "matrpo", run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for step in range(T):
            global_step += E
            extras = {"episode_starts": starts, "critic_inputs": critic_inputs(obs, state, args.critic_input)}
            if actor_state is not None:  # states *before* this step, to restart training sequences
                extras["prev_hidden_states"], extras["prev_critic_hidden_states"] = actor_state[0], critic_state[0]
                if args.recurrent == "lstm":
                    extras["prev_cell_states"], extras["prev_critic_cell_states"] = actor_state[1], critic_state[1]
            if mask is not None:
                extras["action_masks"] = mask
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                action = dist.sample()  # (1, E, N) or (1, E, N, act_dim)
                logprob = dist.log_prob(action)  # (1, E, N)
                value, critic_state = critic(extras["critic_inputs"][None], critic_state, starts[None])  # (1, E, N)
            result = envs.step(action[0])  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final obs) where an episode ended: what a truncation bootstraps from
                final_state = torch.as_tensor(result.final_state, device=device)
                with torch.no_grad():
                    final_value, _ = critic(critic_inputs(final_obs, final_state, args.critic_input)[None], critic_state,
                                            torch.zeros_like(starts)[None])  # (1, E, N)
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                states=obs, actions=action[0], log_probs=logprob[0], state_values=value[0],
                rewards=torch.as_tensor(result.reward, device=device), next_states=final_obs,
                dones=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_values=final_value[0], **extras)
            obs, state = next_obs, torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # V(s_T): bootstraps the last step wherever its episode goes on
            last_value, _ = critic(critic_inputs(obs, state, args.critic_input)[None], critic_state, starts[None])  # (1, E, N)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        buffer.end_episode()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        with torch.no_grad():
            # V(s_{t+1}) is the next step's value while the episode goes on, and the value of the
            # final observation where it ended (the next step's value belongs to a new episode).
            next_values = torch.cat([b["state_values"][1:], last_value], dim=0)  # (T, E, N)
            next_values = torch.where(b["episode_ends"].bool(), b["final_values"], next_values)
            values = value_norm.denormalize(b["state_values"]) if args.value_norm else b["state_values"]
            next_values = value_norm.denormalize(next_values) if args.value_norm else next_values
            advantages, returns = compute_gae(b["rewards"], values, next_values, b["dones"], b["truncated"],
                                              args.gamma, args.gae_lambda)
            alive = b["alive"]
            adv_mean = masked_mean(advantages, alive)
            adv_std = masked_mean((advantages - adv_mean) ** 2, alive).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8)  # normalised over the whole rollout
            if args.value_norm:
                value_norm.update(returns[alive.bool()])
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # Lay the rollout out as (L, S, N, ...): S sequences of L steps (L = 1 without recurrence).
        data = {k: to_chunks(v, L) for k, v in b.items() if not k.startswith("prev_")}
        data.update(advantages=to_chunks(advantages, L), targets=to_chunks(targets, L))
        # Recurrent states stored at each chunk's first step restart the sequences: (S, N, H).
        init_states = {k: v[::L].reshape(-1, N, v.shape[-1]) for k, v in b.items() if k.startswith("prev_")}
        S = data["rewards"].shape[1]

# ============================================================================ 7. UPDATE
        # The actor: one trust-region step on the whole rollout, every sequence at once.
        a_state = c_state = None
        if args.recurrent != "none":
            a_state = (init_states["prev_hidden_states"],) + (
                (init_states["prev_cell_states"],) if args.recurrent == "lstm" else ())
        actor_stats = trpo_step(actor, data, a_state, G, args.max_kl, args.cg_damping, args.cg_iters,
                                args.backtrack_coef, args.backtrack_iters)
        # The critic: regression on the value targets, --update-epochs passes of --num-minibatches.
        for epoch in range(args.update_epochs):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v[:, mb] for k, v in data.items()}  # (L, B, N, ...)
                if args.recurrent != "none":
                    c_state = (init_states["prev_critic_hidden_states"][mb],) + (
                        (init_states["prev_critic_cell_states"][mb],) if args.recurrent == "lstm" else ())
                new_value, _ = critic(d["critic_inputs"], c_state, d["episode_starts"])  # (L, B, N)
                alive_mb = d["alive"]
                # Value loss, clipped around the rollout's prediction (in normalised units)
                v_loss_unclipped = (new_value - d["targets"]) ** 2
                if args.clip_vloss:
                    old_value = d["state_values"]
                    v_clipped = old_value + (new_value - old_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - d["targets"]) ** 2), alive_mb)
                else:
                    v_loss = 0.5 * masked_mean(v_loss_unclipped, alive_mb)

                optimizer.zero_grad()
                v_loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
                optimizer.step()
        stats = dict(policy_loss=actor_stats["policy_loss"], value_loss=v_loss.item(), entropy=actor_stats["entropy"],
                     kl=actor_stats["kl"], step_fraction=actor_stats["step_fraction"], grad_norm=grad_norm.item(),
                     explained_variance=explained_variance(values[alive.bool()], returns[alive.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, actor, global_step)  # greedy, every --eval-every env steps
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]})
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, actor, critic, value_norm, optimizer, shuffle_gen, global_step, iteration,
                (starts, actor_state, critic_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, actor, global_step)
    recorder.save_checkpoint(checkpoint_payload(
        args, actor, critic, value_norm, optimizer, shuffle_gen, global_step, args.num_iterations,
        (starts, actor_state, critic_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
