"""ITRPO: independent TRPO, every agent with its own decentralised critic (Schulman et al.
2015, "Trust Region Policy Optimization", arXiv:1502.05477; the independent-learner setting of
de Witt et al. 2020, arXiv:2011.09533).

The same file as MATRPO except the critic: each agent's value is learned from its own
observation only. The actor moves by one natural-gradient step per rollout (conjugate gradient
on Fisher-vector products), shrunk by a backtracking line search until the KL to the rollout's
policy is within --max-kl and the surrogate improved; every parameter set (one per agent with
--share-params none, one per group with group) has its own trust region. Run:

    python algos/itrpo.py --env simple_spread
"""
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, Tuple

import torch
from torch.distributions import kl_divergence
from torch.func import functional_call

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.turns import turn_gae, whose_move
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, MaskedCategorical, ValueNorm, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):  # bases last to first: --help lists RunArgs' fields first
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
    # --- policy mapping: --share-params (every parameter set of the actor has its own trust region, all solved
    # together), --agent-groups, --train-groups, --load-group (common.groups.GroupArgs)

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


def to_chunks(x: torch.Tensor, L: int) -> torch.Tensor:
    """(T, E, ...) -> (L, (T // L) * E, ...): cut every env's rollout into chunks of L steps."""
    T, E = x.shape[:2]
    return x.reshape(T // L, L, E, *x.shape[2:]).transpose(0, 1).reshape(L, (T // L) * E, *x.shape[2:])


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def group_mean(x: torch.Tensor, mask: torch.Tensor, group_onehot: torch.Tensor) -> torch.Tensor:
    """Masked mean of x (T, E, N) over each group's agents (group_onehot (N, G)), given to every agent: (N,).
    Rival teams (a predator's catch is the prey's loss) never share a mean and scale."""
    return sum(masked_mean(x, mask * g) * g for g in group_onehot.T)  # g (N,): 1 on the group's agents


def set_rows(actor) -> dict:
    """{name: (G, c)}: the rows (first axis) of every actor parameter that each of its G parameter sets owns. A
    stacked nets.AgentLinear's row g is set g's; the per-agent log-std's rows go to their agents' sets (padded with
    the index of an extra row of zeros where a set has fewer agents); with one set for all, every row is set 0's."""
    sets, agent_rows, index = actor.net.set_of_agent.tolist(), actor.agent_rows(), {}  # row agent n uses, or None
    for name, p in actor.named_parameters():
        rows = agent_rows[name]
        owner = dict.fromkeys(range(len(p)), 0) if rows is None else dict(zip(rows.tolist(), sets))  # row -> set
        owned = [[r for r, s in owner.items() if s == g] for g in range(actor.net.n_sets)]
        width = max(map(len, owned))
        index[name] = torch.tensor([o + [len(p)] * (width - len(o)) for o in owned], device=p.device)
    return index


def flat_params(actor) -> torch.Tensor:
    """The actor's parameters as one (G, P) matrix, row g all of parameter set g's (set_rows): G = 1 with one
    set for every agent, N with one per agent, the number of groups with one per group."""
    return torch.cat([torch.cat([p.detach(), p.new_zeros(1, *p.shape[1:])])[index].flatten(1)
                      for p, index in zip(actor.parameters(), set_rows(actor).values())], dim=1)


def as_param_dict(actor, theta: torch.Tensor) -> dict:
    """(G, P) -> {name: tensor shaped as that parameter}: the inverse of flat_params, for functional_call."""
    params, start = {}, 0
    for (name, p), index in zip(actor.named_parameters(), set_rows(actor).values()):
        size = index.shape[1] * p[0].numel()
        rows = theta[:, start:start + size].reshape(-1, *p.shape[1:])  # set 0's rows, then set 1's, ...
        params[name] = rows[index.flatten().argsort()[:len(p)]]  # in the parameter's row order, padding dropped
        start += size
    return params


def policy_kl(old, new) -> torch.Tensor:
    """KL(old || new) of two nets.Actor distributions, exact per agent step: (L, B, N)."""
    if isinstance(old, MaskedCategorical):  # masked (and padded) actions have old.probs = 0: no term
        return (old.probs * (old.logits - new.logits)).sum(-1)
    return (kl_divergence(old.normal, new.normal) * old.dim_mask).sum(-1)  # the agent's real dimensions


def set_mean(x: torch.Tensor, mask: torch.Tensor, sets: torch.Tensor) -> torch.Tensor:
    """(L, B, N) -> (G,): the masked mean over the steps of the agents using each parameter set (sets (N, G))."""
    if sets.shape[1] == 1:
        return masked_mean(x, mask)[None]
    return ((x * mask).sum((0, 1)) @ sets) / (mask.sum((0, 1)) @ sets).clamp(min=1.0)


def surrogate_and_kl(actor, theta, d, a_state, old_dist):
    """TRPO's objective and constraint at parameters theta (G, P), each (G,): the surrogate
    mean_alive[rho * A] (Schulman et al. 2015, eq. 14, with rho = pi_theta / pi_old) and
    mean_alive[KL(pi_old || pi_theta)], the mean over the live steps of the agents using that set."""
    dist, _ = functional_call(actor, as_param_dict(actor, theta),
                              (d["obs"], a_state, d["episode_starts"], d.get("action_masks")))
    ratio = (dist.log_prob(d["actions"]) - d["log_probs"]).exp()  # (L, B, N)
    sets = torch.nn.functional.one_hot(actor.net.set_of_agent, theta.shape[0]).to(ratio.dtype)  # (N, G)
    return (set_mean(ratio * d["advantages"], d["alive"], sets), set_mean(policy_kl(old_dist, dist), d["alive"], sets))


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


def trpo_step(actor, d, a_state, max_kl: float, damping: float, cg_iters: int,
              backtrack_coef: float, backtrack_iters: int) -> dict:
    """One TRPO update of the actor on the rollout d (Schulman et al. 2015, Appendix C). Every
    parameter set (each agent's, or each group's) gets its own natural-gradient direction, step
    size and line search, all computed together. Returns the step's statistics."""
    theta_old = flat_params(actor)  # (G, P)
    with torch.no_grad():
        old_dist, _ = actor(d["obs"], a_state, d["episode_starts"], d.get("action_masks"))
    theta = theta_old.clone().requires_grad_(True)
    with torch.backends.cudnn.flags(enabled=False):  # F v differentiates twice; cuDNN's GRU/LSTM cannot
        surrogate, kl = surrogate_and_kl(actor, theta, d, a_state, old_dist)  # (G,) each
    grad = torch.autograd.grad(surrogate.sum(), theta, retain_graph=True)[0]  # (G, P)
    kl_grad = torch.autograd.grad(kl.sum(), theta, create_graph=True)[0]  # (G, P), zero here; its derivative is F
    fvp = partial(fisher_vector_product, kl_grad, theta, damping=damping)
    direction = conjugate_gradient(fvp, grad, cg_iters)  # (G, P), about F^-1 g
    # Scale so that the quadratic model of the KL, 0.5 * s^T F s, equals max_kl
    full_step = direction * (2 * max_kl / (direction * fvp(direction)).sum(-1, keepdim=True).clamp(min=1e-12)).sqrt()
    # Backtracking line search: each group takes the largest fraction of its step whose true KL is
    # within the limit and whose surrogate improved; a set with no such fraction stays where it is, as does a set
    # without gradient (fixed groups' sets: no live step of a learning agent): its direction is exactly 0.
    fraction = torch.zeros(len(theta_old), 1, device=theta_old.device)  # (G, 1), 0 = no step
    moving = grad.abs().sum(-1) > 0  # (G,)
    with torch.no_grad():
        for k in range(backtrack_iters):
            new_surrogate, new_kl = surrogate_and_kl(actor, theta_old + backtrack_coef**k * full_step, d, a_state,
                                                     old_dist)
            accept = (new_kl <= max_kl) & (new_surrogate > surrogate) & (fraction[:, 0] == 0)
            fraction[accept] = backtrack_coef**k
            if bool((fraction[:, 0] > 0)[moving].all()):
                break
        for p, value in zip(actor.parameters(), as_param_dict(actor, theta_old + fraction * full_step).values()):
            p.copy_(value)
        dist, _ = actor(d["obs"], a_state, d["episode_starts"], d.get("action_masks"))
        new_surrogate = masked_mean((dist.log_prob(d["actions"]) - d["log_probs"]).exp() * d["advantages"], d["alive"])
    return dict(policy_loss=-new_surrogate.item(), entropy=masked_mean(dist.entropy(), d["alive"]).item(),
                kl=masked_mean(policy_kl(old_dist, dist), d["alive"]).item(), step_fraction=fraction.mean().item())


def checkpoint_payload(args, teams, actor, critic, value_norm, optimizer, shuffle_gen, global_step, iteration, rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; the
    agents' groups and parameter rows let --load-group take one group's weights out of it. `rollout`:
    what the rollout carries into the next iteration (episode starts, recurrent states)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(), "rollout": rollout,
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
    teams.load_weights({"actor": actor, "critic": critic}, value_norm)  # --load-group from an ITRPO run: copy it
    # Only the critic has an optimiser: the actor moves by trust-region steps (section 7).
    optimizer = torch.optim.Adam(critic.parameters(), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    # Minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        actor.load_state_dict(ckpt["actor"])
        critic.load_state_dict(ckpt["critic"])
        value_norm.load_state_dict(ckpt["value_norm"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])
    L = args.chunk_len if args.recurrent != "none" else 1

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
        for step in range(T):
            global_step += E
            extras = {"episode_starts": starts, "critic_inputs": local_critic_inputs(obs, state)}
            if actor_state is not None:  # states *before* this step, to restart training sequences
                extras["prev_hidden_states"], extras["prev_critic_hidden_states"] = actor_state[0], critic_state[0]
                if args.recurrent == "lstm":
                    extras["prev_cell_states"], extras["prev_critic_cell_states"] = actor_state[1], critic_state[1]
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
            if acting is not None:  # each agent's own moves: rewards go to its last move; only moves are learned
                advantages, returns, b["alive"] = turn_gae(b, values, next_values, acting, args.gamma, args.gae_lambda)
            else:
                advantages, returns = compute_gae(b["rewards"], values, next_values, b["terminated"], b["truncated"],
                                                  args.gamma, args.gae_lambda)
            # Fixed groups (not in --train-groups) act but take no part in any loss or statistic: their sets
            # get no trust-region step and their critic rows no gradient, so their weights stay as they were.
            learn = b["alive"] * trained  # (T, E, N) live steps of agents whose group learns
            adv_mean = group_mean(advantages, learn, teams.onehot)  # (N,) each group's mean over the rollout
            adv_std = group_mean((advantages - adv_mean) ** 2, learn, teams.onehot).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8) * trained  # normalised within each group
            if args.value_norm:
                value_norm.update(returns, learn)
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # Lay the rollout out as (L, S, N, ...): S sequences of L steps (L = 1 without recurrence).
        data = {k: to_chunks(v, L) for k, v in b.items() if not k.startswith("prev_")}
        data.update(advantages=to_chunks(advantages, L), targets=to_chunks(targets, L),
                    alive=to_chunks(learn, L))  # the update's mask: fixed groups' steps count as dead
        # Recurrent states stored at each chunk's first step restart the sequences: (S, N, H).
        init_states = {k: v[::L].reshape(-1, N, v.shape[-1]) for k, v in b.items() if k.startswith("prev_")}
        S = data["rewards"].shape[1]

# ============================================================================ 7. UPDATE
        # The actor: one trust-region step on the whole rollout, every sequence at once.
        a_state = c_state = None
        if args.recurrent != "none":
            a_state = (init_states["prev_hidden_states"],) + (
                (init_states["prev_cell_states"],) if args.recurrent == "lstm" else ())
        actor_stats = trpo_step(actor, data, a_state, args.max_kl, args.cg_damping, args.cg_iters,
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
                    old_value = d["values"]
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
                     explained_variance=explained_variance(values[learn.bool()], returns[learn.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]}, groups=groups,
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]})
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, value_norm, optimizer, shuffle_gen, global_step, iteration,
                (starts, actor_state, critic_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, value_norm, optimizer, shuffle_gen, global_step, args.num_iterations,
        (starts, actor_state, critic_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
