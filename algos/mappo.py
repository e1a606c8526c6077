"""MAPPO: PPO with a centralised critic (Yu et al. 2022, "The Surprising Effectiveness of PPO
in Cooperative Multi-Agent Games", arXiv:2103.01955).

Each agent acts from its own observation; the critic sees the global state (or all agents'
observations) and is used only during training. Run:

    python algos/mappo.py --env simple_spread
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import numpy as np
import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, check_args, factored_actions, run_cli
from common.gnn_args import GNNArgs, check_gnn_args, graph_net
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.turns import is_turn_based, turn_gae, whose_move
from common.run_utils import (RunRecorder, args_dict, centralised_input_shape, evaluate_checkpoint, pick_device,
                              resume_envs, rng_state, seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, ValueNorm, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method
# What the update reads of a rollout (besides advantages and targets): only these are cut into minibatches.
UPDATE_KEYS = ("obs", "actions", "log_probs", "values", "alive", "episode_starts", "critic_inputs", "action_masks")


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, GNNArgs, RunArgs):  # bases last to first: --help lists RunArgs' fields first
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 10_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""
    eval_policy: Literal["greedy", "sampled"] = "greedy"
    """how evaluation acts: "greedy" (the policy's mode) or "sampled" (draws from the policy, as EPyMARL evaluates
    its policy-gradient methods; on LBF a greedy policy can lock into a loop that sampling escapes)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50 continuous_actions=true"""
    num_envs: int = 256
    """E, env copies stepped together in the rollout (256 x 25 steps per update: on simple_spread this learns faster
    per env step than 32 copies with 10 epochs, docs/benchmarks-history.md)"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps)"""
    learning_rate: float = 2e-3
    """Adam learning rate of actor and critic"""
    anneal_lr: bool = True
    """decay the learning rate: linearly to zero over total_timesteps, or as set by --lr-decay-steps"""
    lr_decay_steps: int = 0
    """0: the linear decay over the run; D > 0: lr / (1 + env_steps / D), the same at every step whatever the run's length"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step episodes learns much faster than 0.99 there)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    update_epochs: int = 3
    """passes over each rollout in the update"""
    num_minibatches: int = 8
    """minibatches per epoch (recurrent models: sequence chunks are split, so num_envs * num_steps / chunk_len >= this)"""
    clip_coef: float = 0.2
    """PPO ratio clip"""
    clip_vloss: bool = True
    """clip the value prediction around the rollout's prediction (same coefficient)"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """value-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    value_norm: bool = True
    """normalise value targets with running statistics (MAPPO's ValueNorm)"""
    share_critic: bool = False
    """one centralised critic for every agent, whatever --share-params gives the actors: with group or none the
    actors stay one per group / per agent while a single critic (with the agent-id one-hot, so it knows whose value it
    predicts) serves all agents and is trained by the value losses of every learning group (--train-groups); value
    statistics stay per group, and --load-group then loads a group's actor only. With all the critic is shared
    already (accepted, changes nothing); with --critic-model gnn only there"""
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
    factored_actions: bool = False
    """where each action is a tuple of choices (simple_reference's move and word, env.action_factors), one
    categorical per choice, their logits summed into the joint action's (nets.Actor); off: one logit per action"""
    critic_model: Literal["mlp", "gnn"] = "mlp"
    """critic body: "mlp", or "gnn", a graph over the agents with each agent's observation as its node, its
    outputs pooled by --gnn-critic-pool"""
    gnn_critic_pool: Literal["mean", "none"] = "mean"
    """GNN critic output: "mean", the mean over agents' node outputs, one centralised value for every agent
    (any topology); "none", each agent's value from its own node (per-agent rewards; needs edges)"""
    # --- also --actor-model and --gnn-* (common.gnn_args.GNNArgs), and the policy mapping: --share-params,
    # --agent-groups, --train-groups, --load-group (common.groups.GroupArgs)

    @property
    def batch_size(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_size)  # rounded up: at least total_timesteps


def validate(args: Args) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    check_args(args)  # every count, rate and coefficient in its range (common.cli.RANGES)
    if args.recurrent != "none" and args.num_steps % args.chunk_len:
        raise ConfigError(f"--chunk-len {args.chunk_len} must divide --num-steps {args.num_steps}")
    sequences = args.num_envs * (args.num_steps // args.chunk_len if args.recurrent != "none" else args.num_steps)
    if not 1 <= args.num_minibatches <= sequences:
        raise ConfigError(f"--num-minibatches must be between 1 and {sequences} (the number of "
                          f"{'sequence chunks' if args.recurrent != 'none' else 'env steps'} per rollout)")
    check_group_args(args)  # --share-params, --load-group (common/groups.py)
    check_gnn_args(args, args.critic_model)  # --gnn-* and what a GNN critic rules out (common/gnn_args.py)


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised actor on local obs; centralised critic on the global state (one of each per
    agent, per group or for all, as --share-params says; --share-critic makes the critic one for all
    whatever the actors are). Image observations (obs_shape (H, W, C))
    and image states get a small CNN in front (nets.encoder_for). With --actor-model /
    --critic-model gnn a graph over the agents replaces the per-agent MLP (the critic then pools it)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    obs_shape = env.obs_shape  # (obs_dim,), or (H, W, C) for images
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor_net = graph_net(args, env, action_size, out_gain=0.01) if args.actor_model == "gnn" else None
    actor = Actor(obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  sets, args.hidden_sizes, args.recurrent, args.activation, net=actor_net,
                  obs_sizes=env.obs_dims, action_factors=factored_actions(args, env)).to(device)
    critic_dim = centralised_input_shape(args, env)  # the state (an image gets a CNN) or all observations
    critic_net = graph_net(args, env, 1, 1.0, args.gnn_critic_pool) if args.critic_model == "gnn" else None
    # --share-critic: one parameter set serves every agent (the one-hot tells it whose value to predict), so the
    # masked value loss over all agents sends every group's errors into the same weights.
    critic = Critic(critic_dim, env.n_agents, True if args.share_critic else sets, args.hidden_sizes, args.recurrent,
                    args.activation, net=critic_net).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def critic_inputs(obs: torch.Tensor, state: torch.Tensor, kind: str) -> torch.Tensor:
    """Centralised-critic input: (E, N, obs_dim), (E, state_dim) -> (E, 1, D), one input that every
    agent's critic reads.

    Every agent's critic sees the same global information, so it is stored once per env copy and
    the critic broadcasts it over the agents (nets.AgentNet: with shared parameters the first layer
    runs once per copy and the agent-id one-hot, added there, tells the critic whose value it
    predicts). A GNN critic ("obs") takes each agent's own observation as its node, (E, N, obs_dim),
    and gathers the rest by messages.
    """
    if kind == "obs":
        return obs  # (E, N, obs_dim)
    if kind == "state":
        return state[:, None, :]  # (E, 1, state_dim)
    return obs.reshape(obs.shape[0], 1, -1)  # (E, 1, N * obs_dim)


def learning_rate_at(args: Args, iteration: int, global_step: int) -> float:
    """The learning rate of this iteration: a linear decay over the run (CleanRL's) depends on
    --total-timesteps, so a 2M-step point of a 10M-step run differs from a 2M-step run; the
    inverse-time decay lr / (1 + t / D) gives every run the same rate at env step t."""
    if args.lr_decay_steps > 0:
        return args.learning_rate / (1.0 + global_step / args.lr_decay_steps)
    return args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)


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
    """Masked mean of x (T, E, N) over each group's agents, given to every agent: (N,).

    group_onehot (N, G) puts agent n in its group. Advantages are normalised per group so that
    rival teams' rewards (a predator's catch is the prey's loss) never share a mean and scale.
    """
    sums = (x * mask).sum((0, 1)) @ group_onehot  # (G,)
    counts = mask.sum((0, 1)) @ group_onehot  # (G,)
    return group_onehot @ (sums / counts.clamp(min=1.0))  # (N,)


def checkpoint_payload(args, teams, actor, critic, value_norm, optimizer, shuffle_gen, global_step, iteration,
                       rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; the
    agents' groups and parameter rows let --load-group take one group's weights out of it. `rollout`:
    what the rollout carries into the next iteration (episode starts, recurrent states)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(),
            "rollout": rollout, **teams.payload(actor=actor, critic=critic)}


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
    groups, group_onehot, trained = teams.members, teams.onehot, teams.trained  # {name: agents}, (N, G), (N,)
    actor, critic = build_networks(args, envs, device)
    # Statistics per group: rival returns (a predator's +10 is the prey's -10) never mix, also in a shared critic,
    # which predicts each agent's value in its group's units (the one-hot says which).
    value_norm = ValueNorm(groups=teams.group_of_agent).to(device)
    # --load-group from a MAPPO run (e.g. a trained opponent): copy its weights. A shared critic serves every group,
    # so one group's critic cannot be put into it: only the actor loads.
    teams.load_weights({"actor": actor} if args.share_critic else {"actor": actor, "critic": critic},
                       None if args.share_critic else value_norm)
    optimizer = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=args.learning_rate, eps=1e-5,
                                 fused=True)  # one kernel for every tensor
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
    critic_kind = "obs" if args.critic_model == "gnn" else args.critic_input  # what critic_inputs assembles

    obs_np, state_np, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    # (E, N) in a turn-based game (one agent moves per step), else None. SMAX names its live units too, for
    # critics of a unit's own view (common/turns.py); this critic values the team's state, a sound bootstrap
    # for a dead unit, so it runs plain GAE there
    moves_only = is_turn_based(envs)
    acting = whose_move(envs, device) if moves_only else None
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
            optimizer.param_groups[0]["lr"] = learning_rate_at(args, iteration, global_step)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for step in range(T):
            global_step += E
            extras = {"episode_starts": starts}
            team = {"critic_inputs": critic_inputs(obs, state, critic_kind)}  # one entry per env copy (E, 1 or N, D)
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
                value, critic_state = critic(team["critic_inputs"][None], critic_state, starts[None])  # (1, E, N)
            result = envs.step(action[0])  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final obs) where an episode ended: what a truncation bootstraps from
                final_state = torch.as_tensor(result.final_state, device=device)
                with torch.no_grad():
                    final_value, _ = critic(critic_inputs(final_obs, final_state, critic_kind)[None], critic_state,
                                            torch.zeros_like(starts)[None])  # (1, E, N)
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action[0], log_probs=logprob[0], values=value[0],
                rewards=torch.as_tensor(result.reward, device=device), next_obs=final_obs,
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_values=final_value[0], team=team, **extras)
            obs, state = next_obs, torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            acting = whose_move(result, device) if moves_only else None
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # V(s_T): bootstraps the last step wherever its episode goes on
            last_value, _ = critic(critic_inputs(obs, state, critic_kind)[None], critic_state, starts[None])  # (1, E, N)
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
            # Fixed groups (not in --train-groups) act but take no part in any loss or statistic.
            learn = b["alive"] * trained  # (T, E, N) live steps of agents whose group learns
            adv_mean = group_mean(advantages, learn, group_onehot)  # (N,) each group's mean over the rollout
            adv_std = group_mean((advantages - adv_mean) ** 2, learn, group_onehot).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8) * trained  # normalised within each group
            if args.value_norm:
                value_norm.update(returns, learn)
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # Lay the rollout out as (L, S, N, ...): S sequences of L steps (L = 1 without recurrence).
        data = {k: to_chunks(v, L) for k, v in b.items() if k in UPDATE_KEYS}  # the minibatches draw these
        data.update(advantages=to_chunks(advantages, L), targets=to_chunks(targets, L))
        # Recurrent states stored at each chunk's first step restart the sequences: (S, N, H).
        init_states = {k: v[::L].reshape(-1, N, v.shape[-1]) for k, v in b.items() if k.startswith("prev_")}
        S = data["alive"].shape[1]

# ============================================================================ 7. UPDATE
        clipfracs = []
        for epoch in range(args.update_epochs):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v.index_select(1, mb) for k, v in data.items()}  # (L, B, N, ...); faster than v[:, mb]
                a_state = c_state = None
                if args.recurrent != "none":
                    a_state = (init_states["prev_hidden_states"][mb],) + (
                        (init_states["prev_cell_states"][mb],) if args.recurrent == "lstm" else ())
                    c_state = (init_states["prev_critic_hidden_states"][mb],) + (
                        (init_states["prev_critic_cell_states"][mb],) if args.recurrent == "lstm" else ())
                dist, _ = actor(d["obs"], a_state, d["episode_starts"], d.get("action_masks"))
                new_logprob, entropy = dist.log_prob(d["actions"]), dist.entropy()  # (L, B, N)
                new_value, _ = critic(d["critic_inputs"], c_state, d["episode_starts"])  # (L, B, N)
                logratio = new_logprob - d["log_probs"]
                ratio = logratio.exp()
                alive_mb = d["alive"] * trained  # fixed groups' zero loss leaves their weights exactly as they were
                with torch.no_grad():
                    approx_kl = masked_mean((ratio - 1) - logratio, alive_mb)  # Schulman's k3 estimator
                    clipfracs.append(masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), alive_mb).item())

                # Clipped surrogate objective (Schulman et al. 2017, eq. 7)
                adv = d["advantages"]
                clipped_ratio = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = masked_mean(torch.max(-adv * ratio, -adv * clipped_ratio), alive_mb)
                # Value loss, clipped around the rollout's prediction (in normalised units)
                v_loss_unclipped = (new_value - d["targets"]) ** 2
                if args.clip_vloss:
                    old_value = d["values"]
                    v_clipped = old_value + (new_value - old_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - d["targets"]) ** 2), alive_mb)
                else:
                    v_loss = 0.5 * masked_mean(v_loss_unclipped, alive_mb)
                entropy_loss = masked_mean(entropy, alive_mb)
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss

                optimizer.zero_grad()
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(list(actor.parameters()) + list(critic.parameters()),
                                                           args.max_grad_norm)
                optimizer.step()
        stats = dict(policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_loss.item(),
                     approx_kl=approx_kl.item(), clipfrac=float(np.mean(clipfracs)), grad_norm=grad_norm.item(),
                     explained_variance=explained_variance(values[learn.bool()], returns[learn.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every env steps
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]}, groups=groups)
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
