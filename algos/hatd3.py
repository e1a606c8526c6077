"""HATD3: heterogeneous-agent TD3 (Zhong et al. 2024, "Heterogeneous-Agent Reinforcement Learning",
JMLR, arXiv:2304.09870; TD3: Fujimoto et al. 2018, "Addressing Function Approximation Error in
Actor-Critic Methods", arXiv:1802.09477).

Every agent has its own deterministic actor mu_i(o_i) (--share-params none); each learning team has
one pair of centralised critics Q^1, Q^2(s, a_1..a_N) on the global state and the joint action,
trained on the TEAM reward with TD3's clipped double Q and target policy smoothing. Every
--policy-delay critic steps the actors update one after another, in a random order: the joint action
starts as every agent's current deterministic action mu_j(o_j) (as HARL's off-policy HA runner does:
not the replay's actions), agent i_m ascends Q^1(s, joint with its own slot from mu_{i_m}), and its
new action then replaces its slot, so each agent improves given the already-updated agents' new
actions. The same file as algos/matd3.py except the team critics and that sequential actor step.
Continuous actions only. Run:

    python algos/hatd3.py --env torch:simple_spread --env-kwargs continuous_actions=true
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Literal, Tuple

import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, centralised_input_shape, evaluate_checkpoint, pick_device,
                              resume_envs, rng_state, seed_everything, start_or_resume)
from envs import continuous_hint, make_env, parse_env_kwargs, with_continuous_actions
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
    """scenario arguments as KEY=VALUE; continuous_actions=true is added where the env takes it (mpe2)"""
    num_envs: int = 16
    """E, env copies stepped together"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each iteration (one iteration = T * E env steps = one replay entry)"""
    buffer_size: int = 200_000
    """replay capacity in env steps (transitions of all agents); the oldest iteration's entry is dropped"""
    batch_size: int = 64
    """stored sequences (one env copy's T steps of one entry) per gradient step: 64 x 25 = 1,600 transitions, twice
    MATD3's and MADDPG's 32: each agent's own actor learns from its agent's rows alone (3 seeds x 2M on simple_spread:
    docs/algorithms/hatd3.md, haddpg.md)"""
    learning_starts: int = 10_000
    """env steps of uniformly random actions before the first gradient step"""
    updates_per_iteration: int = 8
    """critic gradient steps after every iteration: 8 per 400 env steps with the defaults"""
    actor_learning_rate: float = 1e-3
    """Adam learning rate of every agent's actor"""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the team critics"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step, clock-cut episodes)"""
    td_lambda: float = 0.8
    """lambda of the TD(lambda) critic targets along each stored sequence (0: the one-step target)"""
    tau: float = 0.01
    """target networks move tau of the way to the online ones after every actor step"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip, of the critics and of each agent's actor step separately"""
    exploration_noise: float = 0.1
    """std of the Gaussian noise added to mu(o) while training, in normalised units (the action box is [-1, 1])"""
    policy_noise: float = 0.2
    """target policy smoothing: std of the noise added to the target actions, in normalised units"""
    noise_clip: float = 0.5
    """target policy smoothing: the noise is clipped to [-noise_clip, noise_clip] before it is added"""
    policy_delay: int = 2
    """critic steps per (sequential) actor step; the target networks move with the actors"""
    critic_input: Literal["state", "concat_obs"] = "state"
    """what the team critics see besides the joint action: the env's global state, or every agent's
    observation concatenated"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actors and critics"""
    activation: Literal["tanh", "relu"] = "relu"
    """hidden activation"""
    share_params: Literal["all", "group", "none"] = "none"
    """none (HARL's own): one actor per agent, each updated in its turn; all / group: agents share an actor set,
    which each of them updates in its turn. Also --agent-groups, --train-groups, --load-group"""

    @property
    def steps_per_iteration(self) -> int:
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.steps_per_iteration)  # rounded up: at least total_timesteps


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "batch_size", "buffer_size", "updates_per_iteration", "policy_delay",
                 "eval_episodes", "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0.0 <= args.td_lambda <= 1.0:
        raise ConfigError(f"--td-lambda must be in [0, 1], got {args.td_lambda}")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    if args.buffer_size < args.steps_per_iteration:
        raise ConfigError(f"--buffer-size {args.buffer_size} must hold at least one iteration "
                          f"(--num-steps x --num-envs = {args.steps_per_iteration} env steps)")
    if args.noise_clip < 0 or args.policy_noise < 0:
        raise ConfigError("--policy-noise and --noise-clip must be non-negative")
    check_group_args(args)
    if env is not None and env.discrete:
        raise ConfigError(f"{ALGO} needs continuous actions; {args.env} has discrete ones here: "
                          f"{continuous_hint(args.env)}; or use algos/maddpg.py (Gumbel-softmax) for discrete actions")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device, n_teams: int = 1):
    """Decentralised deterministic actors on local obs (separate parameters per agent by default: stacked
    weights, one batched call); two centralised critics Q^k(s, a_1..a_N), k = 1, 2, with one head per learning
    team (the critic's "agents" are the K teams, each with its own weights). Image observations and an image
    state get a small CNN (nets.encoder_for), the state's before the joint action joins it."""
    A = env.action_dim
    actor = DeterministicActor(env.obs_shape, env.n_agents, False, A, torch.as_tensor(env.action_dim_mask),
                               param_layout(args, env), args.hidden_sizes, args.activation,
                               obs_sizes=env.obs_dims).to(device)
    info_in = centralised_input_shape(args, env)  # the state (an image gets a CNN) or all observations
    critics = torch.nn.ModuleList([Critic((info_in, (env.n_agents * A,)), n_teams, n_teams == 1, args.hidden_sizes,
                                          "none", args.activation) for _ in range(2)]).to(device)
    return actor, critics


# ============================================================================ 3. ALGORITHM FUNCTIONS
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


def explore_continuous(actor, obs, args: Args, random: bool) -> torch.Tensor:
    """Training actions (E, N, A): mu(o) + N(0, noise^2) clipped to [-1, 1]; uniformly random in
    [-1, 1] while `random` (before learning starts). Padded dimensions stay 0."""
    out = actor.output(obs)  # (E, N, A)
    if random:
        return (torch.rand_like(out) * 2 - 1) * actor.action_dim_mask
    return (out + args.exploration_noise * torch.randn_like(out)).clamp(-1.0, 1.0) * actor.action_dim_mask


def smoothed_target_actions(actions: torch.Tensor, noise_std: float, noise_clip: float,
                            dim_mask: torch.Tensor) -> torch.Tensor:
    """Target policy smoothing (Fujimoto et al. 2018, eq. 15), (B, N, A) -> (B, N, A):
    a' = clip(mu'(o') + clip(eps, -c, c), -1, 1), eps ~ N(0, sigma^2). The clipped noise makes the
    target average Q' over a small neighbourhood of mu'(o'), so that the critic cannot be
    exploited at a narrow peak; the outer clip keeps a' inside the action box."""
    noise = (noise_std * torch.randn_like(actions)).clamp(-noise_clip, noise_clip)
    return (actions + noise).clamp(-1.0, 1.0) * dim_mask


def team_critic_inputs(info: torch.Tensor, joint: torch.Tensor, K: int):
    """Inputs of the K team critics: info (B, D) global state (or all observations), joint (B, N, A) the joint
    action -> (info (B, K, D), joint (B, K, N * A)); every team's critic values the same joint action."""
    B = joint.shape[0]
    return info[:, None].expand(B, K, info.shape[-1]), joint.reshape(B, 1, -1).expand(B, K, -1)


def with_agent_action(joint: torch.Tensor, agent: int, own: torch.Tensor) -> torch.Tensor:
    """(B, N, A) joint action, (B, 1, A) agent `agent`'s new action -> the joint action with that slot replaced
    (gradients reach `own` only)."""
    slot = torch.zeros(joint.shape[1], 1, dtype=torch.bool, device=joint.device)
    slot[agent] = True
    return torch.where(slot, own, joint)


def learning_team_flags(dones, truncated, alive, learning: List[List[int]]):
    """Per-agent flags (B, N) -> every learning team's (terminated, ended, alive), each (B, K). A team's episode
    is over when none of its agents acts on (each terminated or already gone); cut by the clock (bootstrapped)
    if any of its agents was truncated. `ended` stops the TD(lambda) recursion; `alive` (any agent of the team
    acted) masks the team critic's loss."""
    flags = []
    for members in learning:
        gone = torch.maximum(dones[:, members], 1.0 - alive[:, members]).amin(-1)  # (B,)
        cut = truncated[:, members].amax(-1)
        flags.append((gone * (1.0 - cut), torch.maximum(gone, cut), alive[:, members].amax(-1)))
    return tuple(torch.stack(f, -1) for f in zip(*flags))


@torch.no_grad()
def loaded_group_actions(teams, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """actions (B, N, A) with the agents of groups loaded from another algorithm's run acting as that run does
    on obs (B, N, ...): what a team critic bootstraps with at s'. Their recurrent state starts afresh (exact
    for feed-forward runs)."""
    starts = torch.ones(obs.shape[:2], device=obs.device)  # (B, N)
    for policy in teams.foreign.values():
        theirs, _ = policy.act(obs, policy.initial_state(obs.shape[0], obs.device), starts)
        actions = torch.where(policy.rows(actions), theirs.to(actions.dtype), actions)
    return actions


def sequential_actor_update(actor, critic, optimizers, set_of: List[int], order: List[int], team_of: List[int],
                            obs, info, replay_actions, learning, alive, max_grad_norm: float):
    """The heterogeneous-agent actor step (Zhong et al. 2024, HATD3 and HADDPG; run as HARL's
    off_policy_ha_runner.py runs it).

    The joint action starts as every learning agent's CURRENT deterministic action mu_j(o_j) (no gradient, no
    noise: HARL's runner, not the replay's actions); agents of fixed or loaded groups (learning (N, 1) False)
    keep the action they played. Then, for agent i_m in `order`: its action mu_{i_m}(o) with gradient replaces
    its slot, one step of its parameter set's optimizer descends -mean_alive Q_k(s, a) (k its team, Q the team's
    critic: the first of the two in HATD3, as TD3), and its slot is recomputed from its UPDATED policy: the
    agents after it are conditioned on its new action. obs (B, N, obs_dim), info (B, D), replay_actions
    (B, N, A), alive (B, N). Returns the mean over the agents of (policy loss, actor gradient norm).
    """
    K = max(team_of) + 1
    params = list(actor.parameters())
    with torch.no_grad():
        joint = torch.where(learning, actor.output(obs), replay_actions)  # (B, N, A)
    losses, norms = [], []
    for m, agent in enumerate(order):
        own = actor.output(obs)[:, agent:agent + 1]  # (B, 1, A): a shared set serves several agents, so all run
        q, _ = critic(team_critic_inputs(info, with_agent_action(joint, agent, own), K))  # (B, K)
        policy_loss = -masked_mean(q[:, team_of[agent]], alive[:, agent])
        optimizer = optimizers[set_of[agent]]
        optimizer.zero_grad()
        policy_loss.backward(inputs=params)  # actor gradients only: the critic stays as it is
        norms.append(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        optimizer.step()
        if m < len(order) - 1:  # the agents after it see its updated policy's action
            with torch.no_grad():
                joint[:, agent] = actor.output(obs)[:, agent]
        losses.append(policy_loss.detach())
    return torch.stack(losses).mean(), torch.stack(norms).mean()


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critics, target_actor, target_critics, actor_optimizers, critic_optimizer,
                       buffer, sample_gen, global_step, iteration, updates):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critics": critics.state_dict(),
            "target_actor": target_actor.state_dict(), "target_critics": target_critics.state_dict(),
            "actor_optimizers": [o.state_dict() for o in actor_optimizers],
            "critic_optimizer": critic_optimizer.state_dict(), "replay": buffer.state_dict(),
            "global_step": global_step, "iteration": iteration, "updates": updates, "rng": rng_state(),
            "sample_rng": sample_gen.get_state(),
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
    args.env_kwargs = with_continuous_actions(args.env, args.env_kwargs)  # recorded: evaluation and resume build this env
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    envs = make_env(args.env, args.num_envs, args.seed, env_kwargs, device=device, workers=args.env_workers)
    validate(args, envs)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    K, team_of = len(teams.learning), teams.team_of_agent.tolist()  # K learning teams, each its own critic head
    actor, critics = build_networks(args, envs, device, K)
    teams.load_weights({"actor": actor})  # --load-group from a HATD3 run: copy that group's actor
    target_actor, target_critics = copy.deepcopy(actor), copy.deepcopy(critics)
    # One Adam per parameter set over the stacked actor weights: agent n's loss has exactly zero gradient on
    # the other sets' slices, so its Adam's moments and updates there stay zero (algos/happo.py).
    set_of = actor.net.set_of_agent.tolist()  # (N,) the set agent n updates in its turn
    actor_optimizers = [torch.optim.Adam(actor.parameters(), lr=args.actor_learning_rate, foreach=True)
                        for _ in set(set_of)]
    critic_optimizer = torch.optim.Adam(critics.parameters(), lr=args.critic_learning_rate, foreach=True)
    # One stored entry is one iteration: T steps of E copies, so the replay keeps buffer_size // (T E) of them.
    capacity = args.buffer_size // args.steps_per_iteration
    buffer = MultiAgentRolloutBuffer(N, capacity=capacity)
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws and agent orders: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critics, "critics"), (target_actor, "target_actor"),
                            (target_critics, "target_critics"), (critic_optimizer, "critic_optimizer")):
            module.load_state_dict(ckpt[key])
        for optimizer, saved in zip(actor_optimizers, ckpt["actor_optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        buffer.load_state_dict(ckpt["replay"])
        buffer.capacity = capacity
        global_step, start_iteration, updates = ckpt["global_step"], ckpt["iteration"] + 1, ckpt["updates"]
        sample_gen.set_state(ckpt["sample_rng"])

    obs, state, _, _ = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where a resumed run's envs were
    obs, state = torch.as_tensor(obs, device=device), torch.as_tensor(state, device=device)  # (E, N, obs_dim), (E, S)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: a loaded run's recurrent state resets there
    trained = teams.trained  # (N,) 1 where the agent's group learns: fixed groups take no part in any loss
    learning = trained.bool()[:, None]  # (N, 1)
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(actor, critics))
    stats, policy_loss, actor_grad_norm = {}, None, None  # the actors' figures exist from their first (delayed) step
    for iteration in range(start_iteration, args.num_iterations + 1):

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for _ in range(T):
            with torch.no_grad():
                action = explore_continuous(actor, obs, args, random=global_step < args.learning_starts)  # (E, N, A)
                # Groups loaded from another algorithm's run act as that run does; the replay keeps the joint
                # action played, which the team critics learn from.
                action = teams.override(action, obs, starts)
            result = envs.step(action)  # a torch env keeps it on the device
            global_step += E
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true o_{t+1}, before auto-reset
            extras = {}
            team = {}  # entries of the whole team: one per env copy
            if args.critic_input == "state":
                final_state = torch.as_tensor(result.final_state, device=device)
                team.update(global_states=state, next_global_states=final_state)  # (E, S) each, once per copy
            buffer.add_transition(
                obs=obs, actions=action, rewards=torch.as_tensor(result.reward, device=device),
                next_obs=final_obs, terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), team=team, **extras)
            obs, state = torch.as_tensor(result.obs, device=device), torch.as_tensor(result.state, device=device)
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
            alive = b["alive"] * trained  # (B, N) the steps that count in the actor losses: alive learning agents
            B = obs_b.shape[0]
            if args.critic_input == "state":
                info, next_info = b["global_states"], b["next_global_states"]  # (B, S)
            else:
                info, next_info = obs_b.reshape(B, -1), next_obs_b.reshape(B, -1)  # (B, N * obs_dim)
            with torch.no_grad():
                # min_k Q'^k(s', a') of every team at every step's true next state (the final one where an
                # episode ended), a' the smoothed target actions (loaded groups' as their runs act); then
                # TD(lambda) targets on the team reward (summed over the team's agents: R_pz3 units on mpe2)
                # along each stored sequence.
                next_actions = smoothed_target_actions(target_actor.output(next_obs_b), args.policy_noise,
                                                       args.noise_clip, actor.action_dim_mask)  # (B, N, A)
                next_actions = loaded_group_actions(teams, next_obs_b, next_actions)
                x = team_critic_inputs(next_info, next_actions, K)
                next_q = torch.minimum(target_critics[0](x)[0], target_critics[1](x)[0])  # (B, K), clipped double Q
                terminated, ended, team_alive = learning_team_flags(b["terminated"], b["truncated"], b["alive"],
                                                                    teams.learning)
                seq = (T, B // T, K)  # back to (T, B_seq, K) for the backward recursion
                ended = ended.view(seq).clone()
                ended[-1] = 1.0  # the stored sequence stops: its last step bootstraps from Q' alone there
                targets = td_lambda_targets(teams.team_rewards(b["rewards"]).view(seq), next_q.view(seq),
                                            terminated.view(seq), ended, args.gamma,
                                            args.td_lambda).flatten(0, 1)  # (B, K)

# ============================================================================ 7. UPDATE
            x = team_critic_inputs(info, actions, K)
            q1, q2 = critics[0](x)[0], critics[1](x)[0]  # (B, K) each
            td_loss = masked_mean((q1 - targets) ** 2, team_alive) + masked_mean((q2 - targets) ** 2, team_alive)
            critic_optimizer.zero_grad()
            td_loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(critics.parameters(), args.max_grad_norm)
            critic_optimizer.step()
            updates += 1

            if updates % args.policy_delay == 0:  # delayed policy updates: the critics settle first
                # The learning agents one after another in a random order (Zhong et al. 2024), each through
                # its team's first critic, given the new actions of those before it.
                order = [n for n in torch.randperm(N, generator=sample_gen).tolist() if teams.trained_list[n]]
                policy_loss, actor_grad_norm = sequential_actor_update(
                    actor, critics[0], actor_optimizers, set_of, order, team_of, obs_b, info, actions, learning, alive,
                    args.max_grad_norm)
                soft_update(target_actor, actor, args.tau)
                soft_update(target_critics, critics, args.tau)
            stats = dict(td_loss=td_loss.item(), q_taken_mean=masked_mean(q1.detach(), team_alive).item(),
                         target_mean=masked_mean(targets, team_alive).item(), grad_norm=grad_norm.item())
            if policy_loss is not None:
                stats.update(policy_loss=policy_loss.item(), actor_grad_norm=actor_grad_norm.item())
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
                args, teams, actor, critics, target_actor, target_critics, actor_optimizers, critic_optimizer, buffer,
                sample_gen, global_step, iteration, updates))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, teams.members)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critics, target_actor, target_critics, actor_optimizers, critic_optimizer, buffer,
        sample_gen, global_step, args.num_iterations, updates))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
