"""COMA: counterfactual multi-agent policy gradients (Foerster, Farquhar, Afouras, Nardelli,
Whiteson 2018, "Counterfactual Multi-Agent Policy Gradients", AAAI, arXiv:1705.08926).

Each agent acts from its own observation. A centralised critic Q_i(s, (a_-i, .)) sees the
global state, agent i's observation and the other agents' actions and outputs one value for
each of agent i's own actions; the counterfactual baseline b_i = sum_a pi_i(a | o_i) Q_i(s, (a_-i, a)) marginalises
agent i's own action under its policy, so the advantage Q_i(s, a) - b_i credits agent i with
what its own action changed, with the others' actions held fixed. The critic learns TD(lambda)
targets of the team reward against a slowly moving target critic; the actor takes one
on-policy gradient step per rollout. Discrete actions only. Run:

    python algos/coma.py --env simple_spread
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import torch
import torch.nn.functional as F

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import discrete_hint, make_env, parse_env_kwargs
from nets import Actor, AgentNet, MaskedCategorical, ValueNorm, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 5_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())'); discrete actions only"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50"""
    num_envs: int = 16
    """E, env copies stepped together in the rollout"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps and one actor gradient step)"""
    learning_rate: float = 1e-3
    """Adam learning rate of the actor"""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic"""
    anneal_lr: bool = True
    """decay both learning rates linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.95
    """discount factor (0.95, as MAPPO's: a horizon near MPE's 25-step episodes learns much faster than 0.99 there)"""
    td_lambda: float = 0.8
    """lambda of the critic's TD(lambda) targets (0: one-step targets, 1: returns to the rollout's end)"""
    critic_epochs: int = 10
    """passes of the critic over each rollout, before the actor's step"""
    critic_minibatches: int = 1
    """critic minibatches per pass (each one gradient step on the critic)"""
    tau: float = 0.05
    """the target critic moves tau of the way to the critic every target update (1.0: hard copy)"""
    target_update_interval: int = 1
    """critic gradient steps between target updates (hard copies: --tau 1 --target-update-interval 100)"""
    norm_adv: bool = True
    """normalise advantages to zero mean and unit std over the rollout (each team's live agent-steps); off, in
    the critic's units (ValueNorm units with --value-norm) they are tiny next to the entropy bonus"""
    ent_coef: float = 0.01
    """entropy bonus coefficient (on the actor's own policy, not the epsilon mix)"""
    eps_start: float = 0.5
    """exploration: agents act from (1 - eps) pi + eps uniform over their available actions, and the
    actor's gradient and the baseline use that mixed policy (as pymarl's COMA). Every action keeps being
    tried, so the critic keeps learning Q for the actions the policy is moving away from"""
    eps_finish: float = 0.05
    """... eps at the end of the anneal (evaluation is greedy on pi, without the mix)"""
    eps_anneal_steps: int = 500_000
    """env steps over which eps falls linearly from eps_start to eps_finish"""
    max_grad_norm: float = 10.0
    """gradient-norm clip, applied to actor and critic separately"""
    value_norm: bool = True
    """the critic predicts Q in units normalised by running statistics of its targets (MAPPO's ValueNorm)"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in the actor (trained on each copy's whole rollout); the critic sees the state and stays
    feed-forward"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor"""
    critic_hidden_sizes: Tuple[int, ...] = (128, 128)
    """hidden layer widths of the critic (its input holds the state, the agent's observation and N one-hot
    actions)"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation of actor and critic"""
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


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    check_group_args(args)
    for name in ("num_envs", "num_steps", "critic_epochs", "target_update_interval", "eval_episodes",
                 "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 1 <= args.critic_minibatches <= args.batch_size:
        raise ConfigError(f"--critic-minibatches must be between 1 and {args.batch_size} (env steps per rollout)")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.td_lambda <= 1.0:
        raise ConfigError(f"--td-lambda must be in [0, 1], got {args.td_lambda}")
    for name in ("eps_start", "eps_finish"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if args.eps_anneal_steps < 0:
        raise ConfigError(f"--eps-anneal-steps must be at least 0, got {args.eps_anneal_steps}")
    if env is not None and not env.discrete:
        raise ConfigError(f"{ALGO} needs discrete actions (its critic outputs one Q value per action and its baseline "
                          f"sums over them); {args.env} has continuous ones. For continuous actions use "
                          "algos/mappo.py, algos/ippo.py, algos/vdppo.py or algos/vda2c.py "
                          f"(or {discrete_hint(args.env)})")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised actor on local obs; centralised Q critic on (state, own obs, others' actions). Image
    observations (obs_shape (H, W, C)) and an image state each get a small CNN (nets.encoder_for) before
    the actions join them."""
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = Actor(env.obs_shape, env.n_agents, True, env.n_actions, torch.as_tensor(env.action_dim_mask),
                  sets, args.hidden_sizes, args.recurrent, args.activation, obs_sizes=env.obs_dims,
                  action_factors=factored_actions(args, env)).to(device)
    # One output per own action: Q_i(s, (a_-i, a)) for every a in a single forward pass. The small
    # output gain starts Q nearly equal for all own actions, so no action is favoured before data says so.
    state_in = env.state_shape if len(env.state_shape) == 3 else (env.state_dim,)  # an image state, or flat
    # three inputs: see counterfactual_critic_inputs
    critic_in = (state_in, env.obs_shape, (env.n_agents * env.n_actions,))
    critic = AgentNet(critic_in, env.n_actions, env.n_agents, sets, args.critic_hidden_sizes, "none",
                      out_gain=0.01, activation=args.activation, in_sizes=(None, env.obs_dims, None),
                      out_mask=torch.as_tensor(env.action_dim_mask)).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def counterfactual_critic_inputs(state: torch.Tensor, obs: torch.Tensor, actions_onehot: torch.Tensor):
    """COMA critic input for every agent: state (..., S), obs (..., N, *obs_shape), actions (..., N, A)
    one-hot -> the three inputs (state (..., N, S), obs (..., N, *obs_shape), joint (..., N, N * A)),
    which the critic encodes apart (an image through its CNN) and concatenates.

    Agent i's row holds the global state, agent i's own observation (as in the paper's critic) and
    the joint action with agent i's own block zeroed: the critic must not see the action it is
    asked to value, since it outputs Q for all of them. With shared parameters the agent-id
    one-hot (added in nets.AgentNet) says whose Q it is.
    """
    *lead, N, A = actions_onehot.shape
    joint = actions_onehot.reshape(*lead, 1, N * A).expand(*lead, N, N * A)  # (..., N, N * A)
    others = 1.0 - torch.eye(N, device=state.device).repeat_interleave(A, dim=1)  # (N, N * A), 0 on own block
    return state[..., None, :].expand(*lead, N, state.shape[-1]), obs, joint * others


def counterfactual_advantage(q: torch.Tensor, probs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """COMA's counterfactual advantage (Foerster et al. 2018, Sec. 4): q (..., N, A) = Q_i(s, (a_-i, a)) for every own
    action a, probs (..., N, A) = pi_i(a | o_i), actions (..., N) taken -> A_i (..., N) =
    Q_i(s, a) - sum_a' pi_i(a' | o_i) Q_i(s, (a_-i, a')). The baseline does not depend on agent i's
    own action, so it adds no bias; masked actions have probability 0 and drop out of it."""
    q_taken = q.gather(-1, actions[..., None]).squeeze(-1)  # (..., N)
    baseline = (probs * q).sum(-1)  # (..., N)
    return q_taken - baseline


def epsilon_at(args: Args, global_step: int) -> float:
    """Linear anneal of the exploration mix from eps_start to eps_finish over eps_anneal_steps."""
    frac = min(1.0, global_step / args.eps_anneal_steps) if args.eps_anneal_steps > 0 else 1.0
    return args.eps_start + frac * (args.eps_finish - args.eps_start)


def behaviour_policy(dist: MaskedCategorical, epsilon: float) -> MaskedCategorical:
    """The behaviour policy (1 - eps) pi + eps * uniform over the available actions (pymarl's COMA).
    Masked actions keep probability 0; gradients flow through pi."""
    available = (dist.logits > torch.finfo(dist.logits.dtype).min / 2).float()  # masked: logit at the floor
    probs = (1.0 - epsilon) * dist.probs + epsilon * available / available.sum(-1, keepdim=True)
    return MaskedCategorical(probs.clamp(min=1e-38).log(), available.bool())


def team_flags(truncated: torch.Tensor, episode_ends: torch.Tensor):
    """Per-agent flags (T, E, N) -> the team's (terminated, truncated), each (T, E).

    The team's episode ends when the env copy's episode ends (`episode_ends`, the same for
    every agent); it was cut by the clock if any agent was truncated, and otherwise ended by
    the task. An agent that leaves early does not end the team's episode.
    """
    ended = episode_ends[..., 0]  # (T, E)
    cut = truncated.amax(-1)  # (T, E)
    return ended * (1.0 - cut), ended * cut


def td_lambda_targets(rewards, next_q, terminated, ended, gamma: float, lam: float):
    """TD(lambda) targets, every tensor (T, B[, N]) over stored episodes or sequences (as in pymarl's COMA and
    QMIX): y_t = r_t + gamma (1 - term_t) [(1 - lambda) Q'_{t+1} + lambda y_{t+1}].

    next_q[t] is the target network's value Q'_{t+1} of the true s_{t+1} (for a critic of actions: and of the
    next action). Where an episode ends (`ended`, its last real step) or the stored sequence stops there is no
    y_{t+1} to use, so the target bootstraps from next_q alone: a time-limit truncation keeps that bootstrap (the
    task was not over), a termination removes it. Padded steps after an episode's end never leak into real ones.
    lambda = 0 is the one-step target of DQN, DDPG and MADDPG.
    """
    if lam == 0.0:  # the same targets without the loop
        return rewards + gamma * (1.0 - terminated) * next_q
    targets = torch.zeros_like(rewards)
    ret = next_q[-1]
    for t in reversed(range(rewards.shape[0])):
        bootstrap = torch.where(ended[t] > 0, next_q[t], (1 - lam) * next_q[t] + lam * ret)
        ret = rewards[t] + gamma * (1.0 - terminated[t]) * bootstrap
        targets[t] = ret
    return targets


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critic, target_critic, value_norm, actor_optimizer, critic_optimizer,
                       shuffle_gen, global_step, iteration, critic_updates, rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts, and the groups and
    rows --load-group reads; `rollout`: what the rollout carries into the next iteration (starts, actor state)."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "target_critic": target_critic.state_dict(), "value_norm": value_norm.state_dict(),
            "actor_optimizer": actor_optimizer.state_dict(), "critic_optimizer": critic_optimizer.state_dict(),
            "global_step": global_step, "iteration": iteration, "critic_updates": critic_updates,
            "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(), "rollout": rollout,
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
    try:
        validate(args, envs)  # continuous actions: fail before anything is written
        # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
        teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    except ConfigError:
        envs.close()
        raise
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T, A = args.num_envs, envs.n_agents, args.num_steps, envs.n_actions
    groups, trained = teams.members, teams.trained  # {name: agents}, (N,) 1 where the agent's group learns
    team_of = teams.team_of_agent  # (N,) every agent's learning team
    actor, critic = build_networks(args, envs, device)
    # One group: one set of statistics; rival groups each keep their own (a predator's +10 is the prey's -10).
    one_group = len(teams.names) == 1
    value_norm = (ValueNorm() if one_group else ValueNorm(groups=teams.group_of_agent)).to(device)
    # --load-group from a coma run: copy its weights (and its group's value statistics), then the target's copy.
    teams.load_weights({"actor": actor, "critic": critic}, value_norm)
    target_critic = copy.deepcopy(critic)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.learning_rate, eps=1e-5)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    # Minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration, critic_updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critic, "critic"), (target_critic, "target_critic"),
                            (value_norm, "value_norm"), (actor_optimizer, "actor_optimizer"),
                            (critic_optimizer, "critic_optimizer")):
            module.load_state_dict(ckpt[key])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        critic_updates = ckpt["critic_updates"]
        shuffle_gen.set_state(ckpt["shuffle_rng"])

    obs_np, state_np, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    state = torch.as_tensor(state_np, device=device)  # (E, state_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, A)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: recurrent states reset there
    actor_state = actor.initial_state(E, device)  # tuple of (E, N, H), or None
    if restored:  # the resumed rollout goes on mid-episode where it stopped
        starts, actor_state = ckpt["rollout"]
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1) / args.num_iterations
            actor_optimizer.param_groups[0]["lr"] = args.learning_rate * frac
            critic_optimizer.param_groups[0]["lr"] = args.critic_lr * frac

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        # The actor's update replays each copy's whole rollout as one sequence from this state.
        first_actor_state = actor_state
        epsilon = epsilon_at(args, global_step)  # one exploration rate for the rollout and its actor step
        for step in range(T):
            global_step += E
            # The global state is a team entry: stored once per env copy, (E, state_dim), not per agent.
            extras = {"episode_starts": starts}
            if mask is not None:
                extras["action_masks"] = mask
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                drawn = behaviour_policy(dist, epsilon).sample()[0]  # (E, N)
                action = teams.override(drawn, obs, starts, mask)[None]  # (1, E, N);
                # groups loaded from another algorithm's run act as that run does
            result = envs.step(action[0])  # a torch env keeps it on the device
            final_state = torch.as_tensor(result.final_state, device=device)  # true s_{t+1}, before auto-reset
            final_action = torch.zeros_like(action[0])  # (E, N)
            if result.done.any():  # a' ~ pi(. | final obs) where an episode ended: what a truncation bootstraps from
                final_obs = torch.as_tensor(result.final_obs, device=device)
                final_mask = result.final_action_mask if result.final_action_mask is not None else result.action_mask
                final_mask = None if final_mask is None else torch.as_tensor(final_mask, device=device)[None]
                with torch.no_grad():
                    final_dist, _ = actor(final_obs[None], actor_state, torch.zeros_like(starts)[None], final_mask)
                    final_action = behaviour_policy(final_dist, epsilon).sample()[0]
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action[0], rewards=torch.as_tensor(result.reward, device=device),
                next_obs=torch.as_tensor(result.final_obs, device=device),
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_actions=final_action, team={"global_states": state, "next_global_states": final_state},
                **extras)
            obs, state = torch.as_tensor(result.obs, device=device), torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # a_T ~ pi(. | o_T): bootstraps the last step wherever its episode goes on
            last_dist, _ = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
            last_action = behaviour_policy(last_dist, epsilon).sample()[0]  # (E, N)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        actions = b["actions"].long()  # (T, E, N)
        alive = b["alive"] * trained  # fixed groups' zero loss leaves their weights exactly as they were
        with torch.no_grad():
            # The next joint action a_{t+1} is the one taken at the next step while the episode goes
            # on, and a draw from the policy at the final observation where it ended (the next
            # step's action belongs to a new episode) or after the rollout's last step.
            next_actions = torch.cat([actions[1:], last_action[None].long()], dim=0)  # (T, E, N)
            next_actions = torch.where(b["episode_ends"].bool(), b["final_actions"].long(), next_actions)
            next_in = counterfactual_critic_inputs(b["next_global_states"], b["next_obs"],
                                                   F.one_hot(next_actions, A).float())  # three (T, E, N, ...) at s', a'
            next_q = target_critic(next_in)[0].gather(-1, next_actions[..., None]).squeeze(-1)  # (T, E, N)
            next_q = value_norm.denormalize(next_q) if args.value_norm else next_q
            # Every agent's Q_i learns its own team's reward (COMA's critic is trained on the team reward).
            team_reward = teams.team_rewards(b["rewards"])[..., team_of]  # (T, E, N), R_pz3 units for mpe2
            terminated, _ = team_flags(b["truncated"], b["episode_ends"])  # (T, E)
            targets = td_lambda_targets(team_reward, next_q, terminated[..., None].expand(T, E, N),
                                        b["episode_ends"], args.gamma, args.td_lambda)  # (T, E, N)
            inputs = counterfactual_critic_inputs(b["global_states"], b["obs"],
                                                  F.one_hot(actions, A).float())  # three (T, E, N, ...) at s_t, a_t
            q_old = critic(inputs)[0].gather(-1, actions[..., None]).squeeze(-1)  # (T, E, N), before the update
            q_old = value_norm.denormalize(q_old) if args.value_norm else q_old
            if args.value_norm:
                value_norm.update(targets[alive.bool()] if one_group else targets, alive)
            norm_targets = value_norm.normalize(targets) if args.value_norm else targets
        # The critic is feed-forward: every env step is a sample, laid out as (1, T * E, N, ...).
        data = {"actions": actions.reshape(1, T * E, N), "targets": norm_targets.reshape(1, T * E, N),
                "alive": alive.reshape(1, T * E, N)}
        samples = tuple(x.reshape(1, T * E, *x.shape[2:]) for x in inputs)  # the critic's inputs, (1, T * E, N, ...)

# ============================================================================ 7. UPDATE
        # Critic first: --critic-epochs passes of TD(lambda) regression on Q_i(s, a) of the taken actions.
        for epoch in range(args.critic_epochs):
            order = torch.randperm(T * E, generator=shuffle_gen).to(device)
            for mb in order.chunk(args.critic_minibatches):
                d = {k: v[:, mb] for k, v in data.items()}  # (1, B, N, ...)
                q = critic(tuple(x[:, mb] for x in samples))[0]  # (1, B, N, A)
                q_taken = q.gather(-1, d["actions"][..., None]).squeeze(-1)  # (1, B, N)
                td_loss = masked_mean((q_taken - d["targets"]) ** 2, d["alive"])
                critic_optimizer.zero_grad()
                td_loss.backward()
                torch.nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
                critic_optimizer.step()
                critic_updates += 1
                if critic_updates % args.target_update_interval == 0:
                    soft_update(target_critic, critic, args.tau)

        # Then one actor step on the whole rollout, with the counterfactual advantage of the updated critic.
        dist, _ = actor(b["obs"], first_actor_state, b["episode_starts"], b.get("action_masks"))
        behaviour = behaviour_policy(dist, epsilon)  # the policy the actions were drawn from
        logprob, entropy = behaviour.log_prob(actions), dist.entropy()  # (T, E, N)
        with torch.no_grad():
            q = critic(inputs)[0]  # (T, E, N, A): Q_i(s, (a_-i, a)) for every own action a, critic units
            advantages = counterfactual_advantage(q, behaviour.probs.detach(), actions)  # (T, E, N)
            for m in (teams.learning if args.norm_adv else []):  # over the rollout, per team: rivals never share one
                adv_mean = masked_mean(advantages[..., m], alive[..., m])
                adv_std = masked_mean((advantages[..., m] - adv_mean) ** 2, alive[..., m]).sqrt()
                advantages[..., m] = (advantages[..., m] - adv_mean) / (adv_std + 1e-8)
            q_acted = q.gather(-1, actions[..., None]).squeeze(-1)  # (T, E, N) Q_i(s, a) of the taken actions
            q_acted = value_norm.denormalize(q_acted) if args.value_norm else q_acted
        pg_loss = -masked_mean(advantages * logprob, alive)  # policy gradient with the counterfactual advantage
        entropy_loss = masked_mean(entropy, alive)
        loss = pg_loss - args.ent_coef * entropy_loss
        actor_optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
        actor_optimizer.step()
        live = alive.bool()
        stats = dict(policy_loss=pg_loss.item(), td_loss=td_loss.item(), entropy=entropy_loss.item(),
                     q_taken_mean=masked_mean(q_acted, alive).item(),
                     grad_norm=grad_norm.item(), explained_variance=explained_variance(q_old[live], targets[live]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": actor_optimizer.param_groups[0]["lr"], "epsilon": epsilon},
                               console={"td_loss": stats["td_loss"], "entropy": stats["entropy"]}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, target_critic, value_norm, actor_optimizer, critic_optimizer, shuffle_gen,
                global_step, iteration, critic_updates, (starts, actor_state)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, target_critic, value_norm, actor_optimizer, critic_optimizer, shuffle_gen,
        global_step, args.num_iterations, critic_updates, (starts, actor_state)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
