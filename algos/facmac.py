"""FACMAC: factored multi-agent centralised policy gradients (Peng et al. 2021, "FACMAC: Factored
Multi-Agent Centralised Policy Gradients", NeurIPS, arXiv:2003.06709).

Every agent i has a deterministic actor mu_i(o_i) and a utility Q_i(o_i, a_i) on its own
observation and action; a mixing network conditioned on the global state combines the utilities
into the team value Q_tot(s, Q_1..Q_N), trained by TD on the team reward. The mixer need not be
monotone, since no agent ever takes an argmax over its Q_i (--mixer nonmonotonic); the default is
QMIX's monotone mixer, as in the paper's main method and the authors' particle-task config. The
actors are trained together by the centralised policy gradient through Q_tot, with *every* agent's
action taken from its current policy (not from the replay, as in MADDPG). Continuous actions use
mu_i directly (tanh into the adapter's normalised box [-1, 1], Gaussian noise); discrete ones a
straight-through Gumbel-softmax. Run:

    python algos/facmac.py --env torch:simple_spread --env-kwargs continuous_actions=true
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Literal, Optional, Tuple

import torch
import torch.nn.functional as F

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs, with_continuous_actions
from nets import Critic, DeterministicActor, NonMonotonicMixer, PerGroup, QMixer, RunningNorm, VDNMixer


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
    """Adam learning rate of the agent utilities and the mixer"""
    gamma: float = 0.85
    """discount factor (0.85, the authors' setting for particle tasks: with MADDPG's 0.95 and tau 0.01 the
    actors pushed Q_tot into regions it was never fitted on and seeds diverged, docs/algorithms/facmac.md)"""
    td_lambda: float = 0.8
    """lambda of the TD(lambda) critic targets along each stored sequence (0: the one-step target)"""
    tau: float = 0.001
    """target networks move tau of the way to the online ones after every gradient step (0.001 as in the
    authors' config; with 0.01 the targets followed the actors' overestimates fast enough to diverge)"""
    bootstrap_time_limit: bool = True
    """bootstrap from Q'_tot(s_T) where the clock (mpe2's max_cycles), not the task, ended an episode;
    --no-bootstrap-time-limit ends every episode's targets at its last step, as algos/qmix.py does"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip, of the critic (utilities and mixer) and of the actors separately"""
    exploration_noise: float = 0.1
    """continuous actions: std of the Gaussian noise added to mu(o) while training, in normalised units
    (the action box is [-1, 1])"""
    gumbel_temperature: float = 1.0
    """discrete actions: temperature of the Gumbel-softmax whose gradient the actor follows"""
    logit_reg: float = 1e-3
    """discrete actions: weight of the mean squared logits in the actor loss (keeps the softmax from saturating)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actors and agent utilities"""
    activation: Literal["tanh", "relu"] = "relu"
    """hidden activation"""
    mixer: Literal["qmix", "nonmonotonic", "vdn"] = "qmix"
    """how the agent utilities combine into Q_tot: "qmix", QMIX's hypernetwork mixer with non-negative weights
    (the authors' setting for continuous tasks, facmac_pp.yaml); "nonmonotonic", the same without abs() (the
    paper's nonmonotonic factorisation: more expressive, but the actors can push it where it was never fitted);
    "vdn", the plain sum"""
    mixer_embed_dim: int = 32
    """width of the mixing network"""
    hypernet_hidden: int = 64
    """hidden width of the hypernetworks that produce the mixing weights from the state"""
    state_norm: bool = False
    """feed the mixer the global state standardised per feature with running statistics of the states
    played (as algos/qmix.py: SMAX's state holds raw map coordinates, on which QMIX's mixer diverges)"""

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
def build_networks(args: Args, env, device, learning: Optional[List[List[int]]] = None):
    """Deterministic actors mu_i(o_i); agent utilities Q_i(o_i, a_i); a --mixer on the state (flat, whatever
    its shape) for every team in `learning` (default: one team of every agent). Image observations (H, W, C)
    get a small CNN (nets.encoder_for); the utility's two inputs, o_i and a_i, are concatenated after it."""
    A = env.n_actions if env.discrete else env.action_dim  # one-hot width or continuous action size
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = DeterministicActor(env.obs_shape, env.n_agents, env.discrete, A, torch.as_tensor(env.action_dim_mask),
                               sets, args.hidden_sizes, args.activation, obs_sizes=env.obs_dims).to(device)
    critic = Critic((env.obs_shape, (A,)), env.n_agents, sets, args.hidden_sizes, "none",
                    args.activation, in_sizes=(env.obs_dims, env.action_dims)).to(device)
    # One mixer per team (nets.PerGroup): rivals' utilities never mix into one Q_tot, and a fixed group's
    # agents are in no team, so neither its utilities nor its actors get a gradient.
    learning = learning or [list(range(env.n_agents))]
    mixer_class = QMixer if args.mixer == "qmix" else NonMonotonicMixer
    mixers = [VDNMixer() if args.mixer == "vdn" else
              mixer_class(len(m), env.state_dim, args.mixer_embed_dim, args.hypernet_hidden) for m in learning]
    return actor, critic, PerGroup(mixers, learning).to(device)


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


def mixed_q(critic, mixer, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor,
            alive: torch.Tensor) -> torch.Tensor:
    """Every team's Q_tot(s, Q_1(o_1, a_1), ..., Q_N(o_N, a_N)): obs (B, N, *obs_shape), actions (B, N, A),
    state (B, S), alive (B, N) -> (B, K). An agent that is not alive (it left early: MAgent2 deaths) enters
    the mix with Q_i = 0, as in algos/qmix.py: its observation is zeros and its action was never played (nor
    does the policy gradient reach its actor through the mix)."""
    qs, _ = critic((obs, actions))  # (B, N) agent utilities
    return mixer(qs * alive, state)


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critic, mixer, target_actor, target_critic, target_mixer, actor_optimizer,
                       critic_optimizer, state_norm, buffer, sample_gen, global_step, iteration, updates):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critic": critic.state_dict(),
            "mixer": mixer.state_dict(), "target_actor": target_actor.state_dict(),
            "target_critic": target_critic.state_dict(), "target_mixer": target_mixer.state_dict(),
            "actor_optimizer": actor_optimizer.state_dict(), "critic_optimizer": critic_optimizer.state_dict(),
            "state_norm": state_norm.state_dict(), "replay": buffer.state_dict(), "global_step": global_step,
            "iteration": iteration, "updates": updates,
            "rng": rng_state(), "sample_rng": sample_gen.get_state(), **teams.payload(actor=actor, critic=critic)}


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
    args.env_kwargs = with_continuous_actions(args.env, args.env_kwargs)  # recorded: evaluation and resume build this env
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    envs = make_env(args.env, args.num_envs, args.seed, env_kwargs, device=device, workers=args.env_workers)
    validate(args, envs)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    actor, critic, mixer = build_networks(args, envs, device, teams.learning)
    teams.load_weights({"actor": actor, "critic": critic})  # --load-group from a FACMAC run: copy its weights
    target_actor, target_critic, target_mixer = copy.deepcopy(actor), copy.deepcopy(critic), copy.deepcopy(mixer)
    # Utilities and mixer learn as one critic (one optimiser, one clip, one Polyak update; VDN's mixer has
    # no parameters of its own).
    team_critic = torch.nn.ModuleList([critic, mixer])
    target_team_critic = torch.nn.ModuleList([target_critic, target_mixer])
    critic_params = list(team_critic.parameters())
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=args.actor_learning_rate, foreach=True)
    critic_optimizer = torch.optim.Adam(critic_params, lr=args.critic_learning_rate, foreach=True)
    state_norm = RunningNorm(envs.state_dim).to(device)  # per feature, of the states played (--state-norm)
    # One stored entry is one iteration: T steps of E copies, so the replay keeps buffer_size // (T E) of them.
    capacity = args.buffer_size // args.steps_per_iteration
    buffer = MultiAgentRolloutBuffer(N, capacity=capacity)
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critic, "critic"), (mixer, "mixer"), (target_actor, "target_actor"),
                            (target_critic, "target_critic"), (target_mixer, "target_mixer"),
                            (actor_optimizer, "actor_optimizer"), (critic_optimizer, "critic_optimizer")):
            module.load_state_dict(ckpt[key])
        if "state_norm" in ckpt:  # checkpoints written before --state-norm existed have none
            state_norm.load_state_dict(ckpt["state_norm"])
        buffer.load_state_dict(ckpt["replay"])
        buffer.capacity = capacity
        global_step, start_iteration, updates = ckpt["global_step"], ckpt["iteration"] + 1, ckpt["updates"]
        sample_gen.set_state(ckpt["sample_rng"])

    obs, state, mask, _ = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where a resumed run's envs were
    obs, state = torch.as_tensor(obs, device=device), torch.as_tensor(state, device=device)  # (E, N, obs_dim), (E, S)
    mask = None if mask is None else torch.as_tensor(mask, device=device)  # (E, N, n_actions), discrete only
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: a loaded run's recurrent state resets there
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critic, mixer))
    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for _ in range(T):
            with torch.no_grad():
                action = explore(actor, obs, mask, args, random=global_step < args.learning_starts)  # (E, N, A)
                # Groups loaded from another algorithm's run act as that run does (one-hots where actions are
                # discrete); the replay keeps the joint action played.
                action = teams.override(action, obs, starts, mask)
            result = envs.step(action.argmax(-1) if envs.discrete else action)  # a torch env keeps it on the device
            global_step += E
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true o_{t+1}, before auto-reset
            final_state = torch.as_tensor(result.final_state, device=device)
            # the mixer's state: an entry of the whole team, one per env copy
            team, extras = {"global_states": state, "next_global_states": final_state}, {}  # team: (E, S) each
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
        episode = buffer.end_episode()
        if args.state_norm:  # running statistics of every feature of the states played, (T, E, S) at once
            state_norm.update(episode["team"]["global_states"].stack().flatten(2))
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        # (inside the update loop: every gradient step draws its own batch of stored transitions)
        t_update = time.time()
        for _ in range(args.updates_per_iteration if global_step >= args.learning_starts else 0):
            b = buffer.sample_episodes(args.batch_size, sample_gen, device)  # (B_seq, T, N, ...)
            # time-major transitions (B, N, ...), B = T * B_seq: row t * B_seq + j is step t of sequence j
            b = {k: v.transpose(0, 1).flatten(0, 1) for k, v in b.items() if k != "filled"}
            obs_b, next_obs_b, actions, alive = b["obs"], b["next_obs"], b["actions"], b["alive"]
            state_b, next_state_b = b["global_states"], b["next_global_states"]  # (B, S)
            if args.state_norm:  # standardised per feature
                state_b, next_state_b = state_norm(state_b.flatten(1)), state_norm(next_state_b.flatten(1))
            team_reward = teams.team_rewards(b["rewards"])  # (B, K) each learning team's, R_pz3 units for mpe2
            # A team's episode is over where none of its agents goes on: each terminated, truncated or gone already
            # (an agent that dies mid-episode, as in MAgent2, ends its own part only); cut by the clock where
            # an agent was truncated, ended by the task (terminated: no bootstrap) otherwise.
            agent_over = torch.maximum(torch.maximum(b["terminated"], b["truncated"]), 1.0 - alive)  # (B, N)
            over = torch.stack([agent_over[:, m].amin(-1) for m in teams.learning], -1)  # (B, K)
            clock = torch.stack([b["truncated"][:, m].amax(-1) for m in teams.learning], -1)  # (B, K)
            terminated = over * (1.0 - clock) if args.bootstrap_time_limit else over  # (B, K)
            B = obs_b.shape[0]
            with torch.no_grad():
                # Q'_tot(s', Q'_i(o'_i, mu'_i(o'_i))) at every step's true next state (the final one where an
                # episode ended), then TD(lambda) targets along each stored sequence.
                next_out = target_actor.output(next_obs_b, b.get("next_action_masks"))  # (B, N, A)
                next_actions = gumbel_softmax_st(next_out, 1.0) if actor.discrete else next_out
                next_alive = alive * (1.0 - b["terminated"])  # (B, N) present in s': acted and did not terminate
                next_q = mixed_q(target_critic, target_mixer, next_obs_b, next_actions, next_state_b,
                                 next_alive)  # (B, K)
                seq = (T, B // T, -1)  # back to (T, B_seq, K) for the backward recursion
                ended = over.view(seq).clone()
                ended[-1] = 1.0  # the stored sequence stops: its last step bootstraps from Q'_tot alone there
                targets = td_lambda_targets(team_reward.view(seq), next_q.view(seq), terminated.view(seq), ended,
                                            args.gamma, args.td_lambda).flatten(0, 1)  # (B, K)

# ============================================================================ 7. UPDATE
            q_tot = mixed_q(critic, mixer, obs_b, actions, state_b, alive)  # (B, K) of the stored joint action
            td_loss = ((q_tot - targets) ** 2).mean()
            critic_optimizer.zero_grad()
            td_loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(critic_params, args.max_grad_norm)
            critic_optimizer.step()

            # Centralised policy gradient (Peng et al. 2021, eq. 6): grad of Q_tot(s, mu_1(o_1), ..., mu_N(o_N))
            # with every agent's action from its current policy, so that all actors move together on one
            # joint action instead of each against the others' past actions.
            out = actor.output(obs_b, b.get("action_masks"))  # (B, N, A)
            new_actions = gumbel_softmax_st(out, args.gumbel_temperature) if actor.discrete else out
            policy_loss = -mixed_q(critic, mixer, obs_b, new_actions, state_b, alive).mean()
            if actor.discrete:  # regulariser on the logits of the available actions (as MADDPG)
                real = out > torch.finfo(out.dtype).min
                policy_loss = policy_loss + args.logit_reg * masked_mean(torch.where(real, out, 0.0) ** 2,
                                                                         real * teams.trained[:, None])
            actor_optimizer.zero_grad()
            policy_loss.backward()
            actor_grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), args.max_grad_norm)
            actor_optimizer.step()
            soft_update(target_actor, actor, args.tau)
            soft_update(target_team_critic, team_critic, args.tau)
            updates += 1
            stats = dict(td_loss=td_loss.item(), policy_loss=policy_loss.item(), q_taken_mean=q_tot.mean().item(),
                         target_mean=targets.mean().item(), grad_norm=grad_norm.item(),
                         actor_grad_norm=actor_grad_norm.item())
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
                args, teams, actor, critic, mixer, target_actor, target_critic, target_mixer, actor_optimizer,
                critic_optimizer, state_norm, buffer, sample_gen, global_step, iteration, updates))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, teams.members)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, mixer, target_actor, target_critic, target_mixer, actor_optimizer,
        critic_optimizer, state_norm, buffer, sample_gen, global_step, args.num_iterations, updates))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
