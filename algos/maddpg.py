"""MADDPG: multi-agent deep deterministic policy gradient (Lowe et al. 2017, "Multi-Agent
Actor-Critic for Mixed Cooperative-Competitive Environments", NeurIPS, arXiv:1706.02275).

Every agent i has a deterministic actor mu_i(o_i) that acts from its own observation and a
centralised critic Q_i(s, a_1..a_N) on the global state and every agent's action, trained on
agent i's own reward from a replay of transitions; the critics are used only in training.
Continuous actions use mu_i directly (tanh into the adapter's normalised box [-1, 1], Gaussian
exploration noise); discrete actions are one-hot draws of a straight-through Gumbel-softmax, so
that the critic's gradient still reaches the logits. Run:

    python algos/maddpg.py --env torch:simple_spread --env-kwargs continuous_actions=true
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import torch
import torch.nn.functional as F

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, centralised_input_shape, evaluate_checkpoint, pick_device,
                              resume_envs, rng_state, seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs, with_continuous_actions
from nets import Critic, DeterministicActor


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 2_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE; continuous_actions=true is added where the env takes it (mpe2),
    continuous_actions=false gives discrete actions (Gumbel-softmax)"""
    num_envs: int = 16
    """E, env copies stepped together"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each iteration (one iteration = T * E env steps = one replay entry)"""
    buffer_size: int = 200_000
    """replay capacity in env steps (transitions of all agents); the oldest iteration's entry is dropped"""
    batch_size: int = 32
    """stored sequences (one env copy's T steps of one entry) per gradient step: 32 x 25 = 800 transitions"""
    learning_starts: int = 10_000
    """env steps of uniformly random actions before the first gradient step"""
    updates_per_iteration: int = 8
    """gradient steps (critic, then actor) after every iteration: 8 per 400 env steps with the defaults"""
    actor_learning_rate: float = 1e-3
    """Adam learning rate of the actors"""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the critics"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step, clock-cut episodes)"""
    td_lambda: float = 0.8
    """lambda of the TD(lambda) critic targets along each stored sequence (0: MADDPG's one-step target)"""
    tau: float = 0.01
    """target networks move tau of the way to the online ones after every gradient step"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip, of the critics and of the actors separately (Lowe et al. use 0.5)"""
    exploration_noise: float = 0.1
    """continuous actions: std of the Gaussian noise added to mu(o) while training, in normalised units
    (the action box is [-1, 1])"""
    gumbel_temperature: float = 1.0
    """discrete actions: temperature of the Gumbel-softmax whose gradient the actor follows"""
    logit_reg: float = 1e-3
    """discrete actions: weight of the mean squared logits in the actor loss (keeps the softmax from saturating)"""
    critic_input: Literal["state", "concat_obs"] = "state"
    """what the centralised critic sees besides the joint action: the env's global state, or every agent's
    observation concatenated"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actors and critics"""
    activation: Literal["tanh", "relu"] = "relu"
    """hidden activation"""

    @property
    def steps_per_iteration(self) -> int:
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.steps_per_iteration)  # rounded up: at least total_timesteps


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "batch_size", "buffer_size", "updates_per_iteration", "eval_episodes",
                 "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0.0 <= args.td_lambda <= 1.0:
        raise ConfigError(f"--td-lambda must be in [0, 1], got {args.td_lambda}")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    if args.buffer_size < args.steps_per_iteration:
        raise ConfigError(f"--buffer-size {args.buffer_size} must hold at least one iteration "
                          f"(--num-steps x --num-envs = {args.steps_per_iteration} env steps)")
    check_group_args(args)


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised deterministic actors on local obs; centralised critics Q_i(s, a_1..a_N). Image
    observations (obs_shape (H, W, C)) and an image state get a small CNN (nets.encoder_for), the
    state's before the actions join it."""
    A = env.n_actions if env.discrete else env.action_dim  # one-hot width or continuous action size
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = DeterministicActor(env.obs_shape, env.n_agents, env.discrete, A, torch.as_tensor(env.action_dim_mask),
                               sets, args.hidden_sizes, args.activation, obs_sizes=env.obs_dims).to(device)
    info_in = centralised_input_shape(args, env)  # the state (an image gets a CNN) or all observations
    critic = Critic((info_in, (env.n_agents * A,)), env.n_agents, sets, args.hidden_sizes, "none",
                    args.activation).to(device)
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def gumbel_softmax_st(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017), (..., A) -> (..., A).

    Forward: the one-hot of argmax(logits + g), g ~ Gumbel(0, 1): an exact draw from
    softmax(logits). Backward: the gradient of softmax((logits + g) / temperature), so a critic's
    gradient with respect to the one-hot action reaches the logits. (soft - soft.detach()) is
    exactly 0, so the forward value is exactly one-hot.
    """
    gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp(min=1e-20)))
    soft = ((logits + gumbel) / temperature).softmax(-1)
    hard = F.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft.dtype)
    return hard + (soft - soft.detach())


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


def explore(actor, obs, mask, args: Args, random: bool) -> torch.Tensor:
    """Training actions (E, N, A): continuous mu(o) + N(0, noise^2) clipped to [-1, 1], or a one-hot
    Gumbel-softmax draw; uniformly random (available) actions while `random` (before learning starts)."""
    out = actor.output(obs, mask)  # (E, N, A): actions or masked logits
    if actor.discrete:  # a one-hot draw from softmax(logits); uniform over the available actions while random
        logits = torch.where(out > torch.finfo(out.dtype).min, 0.0, out) if random else out
        return gumbel_softmax_st(logits, 1.0)
    if random:
        return (torch.rand_like(out) * 2 - 1) * actor.action_dim_mask
    return (out + args.exploration_noise * torch.randn_like(out)).clamp(-1.0, 1.0) * actor.action_dim_mask


def joint_action_critic_inputs(info: torch.Tensor, joint_actions: torch.Tensor):
    """Critic inputs of every agent: info (B, D) global state (or all observations), joint_actions
    (B, N, N, A) where row i is the joint action that agent i's critic values -> the two inputs
    (info (B, N, D), joint (B, N, N * A)), which the critic concatenates after encoding the info (an
    image state goes through its CNN before the actions join it: nets.MultiEncoder)."""
    B, N = joint_actions.shape[:2]
    return info[:, None].expand(B, N, info.shape[-1]), joint_actions.reshape(B, N, -1)


def with_own_action(replay_actions: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """(B, N, A) stored joint action, (B, N, A) each agent's new action -> (B, N, N, A): row i is the
    stored joint action with agent i's slot replaced by its new action (MADDPG's policy gradient,
    Lowe et al. 2017, eq. 6: the other agents' actions come from the replay)."""
    N = own.shape[1]
    eye = torch.eye(N, dtype=torch.bool, device=own.device)[:, :, None]  # (N, N, 1)
    return torch.where(eye, own[:, None], replay_actions[:, None])


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critic, target_actor, target_critic, actor_optimizer, critic_optimizer,
                       buffer, sample_gen, global_step, iteration, updates):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "target_actor": target_actor.state_dict(), "target_critic": target_critic.state_dict(),
            "actor_optimizer": actor_optimizer.state_dict(), "critic_optimizer": critic_optimizer.state_dict(),
            "replay": buffer.state_dict(), "global_step": global_step, "iteration": iteration, "updates": updates,
            "rng": rng_state(), "sample_rng": sample_gen.get_state(), **teams.payload(actor=actor, critic=critic)}


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
    args.env_kwargs = with_continuous_actions(args.env, args.env_kwargs)  # recorded: evaluation and resume build this env
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    envs = make_env(args.env, args.num_envs, args.seed, env_kwargs, device=device, workers=args.env_workers)
    validate(args, envs)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    actor, critic = build_networks(args, envs, device)
    teams.load_weights({"actor": actor, "critic": critic})  # --load-group from a MADDPG run: copy its weights
    target_actor, target_critic = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.actor_learning_rate, foreach=True)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=args.critic_learning_rate, foreach=True)
    # One stored entry is one iteration: T steps of E copies, so the replay keeps buffer_size // (T E) of them.
    capacity = args.buffer_size // args.steps_per_iteration
    buffer = MultiAgentRolloutBuffer(N, capacity=capacity)
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critic, "critic"), (target_actor, "target_actor"),
                            (target_critic, "target_critic"), (actor_optimizer, "actor_optimizer"),
                            (critic_optimizer, "critic_optimizer")):
            module.load_state_dict(ckpt[key])
        buffer.load_state_dict(ckpt["replay"])
        buffer.capacity = capacity
        global_step, start_iteration, updates = ckpt["global_step"], ckpt["iteration"] + 1, ckpt["updates"]
        sample_gen.set_state(ckpt["sample_rng"])

    obs, state, mask, _ = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where a resumed run's envs were
    obs, state = torch.as_tensor(obs, device=device), torch.as_tensor(state, device=device)  # (E, N, obs_dim), (E, S)
    mask = None if mask is None else torch.as_tensor(mask, device=device)  # (E, N, n_actions), discrete only
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: a loaded run's recurrent state resets there
    trained = teams.trained  # (N,) 1 where the agent's group learns: fixed groups take no part in any loss
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic))
    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for _ in range(T):
            with torch.no_grad():
                action = explore(actor, obs, mask, args, random=global_step < args.learning_starts)  # (E, N, A)
                # Groups loaded from another algorithm's run act as that run does (one-hots where actions are
                # discrete); the replay keeps the joint action played, which the centralised critics learn from.
                action = teams.override(action, obs, starts, mask)
            result = envs.step(action.argmax(-1) if envs.discrete else action)  # a torch env keeps it on the device
            global_step += E
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true o_{t+1}, before auto-reset
            extras = {}
            team = {}  # entries of the whole team: one per env copy
            if args.critic_input == "state":
                final_state = torch.as_tensor(result.final_state, device=device)
                team.update(global_states=state, next_global_states=final_state)  # (E, S) each, once per copy
            if mask is not None:
                final_mask = result.final_action_mask if result.final_action_mask is not None else result.action_mask
                extras.update(action_masks=mask, next_action_masks=torch.as_tensor(final_mask, device=device))
            buffer.add_transition(
                obs=obs, actions=action, rewards=torch.as_tensor(result.reward, device=device),
                next_obs=final_obs, terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), team=team, **extras)
            obs, state = torch.as_tensor(result.obs, device=device), torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            done = torch.as_tensor(result.done).cpu().bool()
            starts = done.to(device).float()[:, None].expand(E, N)  # (E, N)
            if done.any():
                episode_return = torch.as_tensor(result.episode_return).cpu()[done]  # (episodes, N)
                train_returns.extend(episode_return.sum(-1).tolist())
                agent_returns.extend(episode_return.tolist())
                train_lengths.extend(torch.as_tensor(result.episode_length).cpu()[done].tolist())
        buffer.end_episode()
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        # (inside the update loop: every gradient step draws its own batch of stored transitions)
        t_update = time.time()
        for _ in range(args.updates_per_iteration if global_step >= args.learning_starts else 0):
            b = buffer.sample_episodes(args.batch_size, sample_gen, device)  # (B_seq, T, N, ...)
            # time-major transitions (B, N, ...), B = T * B_seq: row t * B_seq + j is step t of sequence j
            b = {k: v.transpose(0, 1).flatten(0, 1) for k, v in b.items() if k != "filled"}
            obs_b, next_obs_b, actions = b["obs"], b["next_obs"], b["actions"]
            alive = b["alive"] * trained  # (B, N) the steps that count in the losses: alive agents of learning groups
            B = obs_b.shape[0]
            if args.critic_input == "state":
                info, next_info = b["global_states"], b["next_global_states"]  # (B, S)
            else:
                info, next_info = obs_b.reshape(B, -1), next_obs_b.reshape(B, -1)  # (B, N * obs_dim)
            with torch.no_grad():
                # Q'_i(s', mu'_1(o'_1), ..., mu'_N(o'_N)) at every step's true next state (the final one where
                # an episode ended), then TD(lambda) targets along each stored sequence.
                next_out = target_actor.output(next_obs_b, b.get("next_action_masks"))  # (B, N, A)
                next_actions = gumbel_softmax_st(next_out, 1.0) if actor.discrete else next_out
                next_joint = next_actions[:, None].expand(B, N, N, next_actions.shape[-1])  # (B, N, N, A)
                next_q, _ = target_critic(joint_action_critic_inputs(next_info, next_joint))  # (B, N)
                seq = (T, B // T, N)  # back to (T, B_seq, N) for the backward recursion
                ended = torch.maximum(b["terminated"], b["truncated"]).view(seq).clone()
                ended[-1] = 1.0  # the stored sequence stops: its last step bootstraps from Q' alone
                targets = td_lambda_targets(b["rewards"].view(seq), next_q.view(seq), b["terminated"].view(seq), ended,
                                            args.gamma, args.td_lambda).flatten(0, 1)  # (B, N)

# ============================================================================ 7. UPDATE
            joint = actions[:, None].expand(B, N, N, actions.shape[-1])  # (B, N, N, A): the replay's joint action
            q, _ = critic(joint_action_critic_inputs(info, joint))  # (B, N)
            td_loss = masked_mean((q - targets) ** 2, alive)
            critic_optimizer.zero_grad()
            td_loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
            critic_optimizer.step()

            # Deterministic policy gradient through agent i's critic, with agent i's action from
            # its current policy and the others' from the replay (Lowe et al. eq. 6).
            out = actor.output(obs_b, b.get("action_masks"))  # (B, N, A)
            own = gumbel_softmax_st(out, args.gumbel_temperature) if actor.discrete else out
            q_pi, _ = critic(joint_action_critic_inputs(info, with_own_action(actions, own)))  # (B, N)
            policy_loss = -masked_mean(q_pi, alive)
            if actor.discrete:  # Lowe et al.'s regulariser on the logits of the available actions
                real = out > torch.finfo(out.dtype).min
                policy_loss = policy_loss + args.logit_reg * masked_mean(torch.where(real, out, 0.0) ** 2,
                                                                         real * trained[:, None])
            actor_optimizer.zero_grad()
            policy_loss.backward()
            actor_grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
            actor_optimizer.step()
            soft_update(target_actor, actor, args.tau)
            soft_update(target_critic, critic, args.tau)
            updates += 1
            stats = dict(td_loss=td_loss.item(), policy_loss=policy_loss.item(),
                         q_taken_mean=masked_mean(q.detach(), alive).item(), target_mean=masked_mean(targets, alive).item(),
                         grad_norm=grad_norm.item(), actor_grad_norm=actor_grad_norm.item())
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        # greedy (no noise), every --eval-every env steps
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, teams.members)
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               console={"td_loss": stats.get("td_loss"), "q_taken_mean": stats.get("q_taken_mean")},
                               groups=teams.members)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, target_actor, target_critic, actor_optimizer, critic_optimizer, buffer,
                sample_gen, global_step, iteration, updates))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, teams.members)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, target_actor, target_critic, actor_optimizer, critic_optimizer, buffer, sample_gen,
        global_step, args.num_iterations, updates))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
