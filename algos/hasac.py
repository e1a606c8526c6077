"""HASAC: heterogeneous-agent soft actor-critic (Liu et al. 2024, "Maximum Entropy Heterogeneous-Agent
Reinforcement Learning", ICLR, arXiv:2306.10715; the sequential scheme is HAPPO's, Kuba et al. 2022).

Every agent i has its own stochastic actor pi_i(a_i | o_i) (--share-params none), a Gaussian squashed by
tanh into the adapter's normalised box [-1, 1], and its own temperature alpha_i tuned towards a target
entropy. Each learning team k has two centralised soft critics Q^1_k, Q^2_k(s, a_1..a_N) on the global
state and the joint action, trained on the team reward plus the entropy of the team's joint policy
(the sum of its agents' alpha_i H(pi_i)). The actors update one after another, in an order drawn afresh
for every gradient step: agent i_m maximises min_k Q_k(s, a) - alpha_i log pi_i with the actions of the
agents before it drawn from their already-updated policies and those after it from their current ones
(HARL's off_policy_ha_runner.py does exactly this: all draws first, then each agent's new draw
overwrites its slot after its step). The same file as algos/masac.py except the team critics and that
sequential update. Continuous actions only. Run:

    python algos/hasac.py --env torch:simple_spread --env-kwargs continuous_actions=true
"""
import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Literal, Optional, Tuple

import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, centralised_input_shape, evaluate_checkpoint, load_checkpoint,
                              pick_device, resume_envs, rng_state, seed_everything, start_or_resume)
from envs import continuous_hint, make_env, parse_env_kwargs, with_continuous_actions
from nets import Critic, SquashedGaussianActor


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
    batch_size: int = 32
    """stored sequences (one env copy's T steps of one entry) per gradient step: 32 x 25 = 800 transitions"""
    learning_starts: int = 10_000
    """env steps of uniformly random actions before the first gradient step"""
    updates_per_iteration: int = 8
    """gradient steps (critics, then every actor and temperature in turn) after every iteration"""
    actor_learning_rate: float = 1e-3
    """Adam learning rate of the actors"""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the critics"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step, clock-cut episodes)"""
    td_lambda: float = 0.8
    """lambda of the TD(lambda) critic targets along each stored sequence (0: the one-step target)"""
    tau: float = 0.01
    """target critics move tau of the way to the online ones after every gradient step"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip of the critics, and of each agent's actor step"""
    alpha: float = 0.2
    """entropy temperature: its starting value with --autotune, else its fixed value"""
    autotune: bool = True
    """tune every agent's temperature, in its turn, so that its policy's entropy tracks --target-entropy"""
    alpha_learning_rate: float = 1e-3
    """Adam learning rate of the log-temperatures"""
    target_entropy: Optional[float] = None
    """entropy the tuning aims at, in nats per agent step (default: minus the agent's number of action
    dimensions, SAC's heuristic)"""
    fixed_order: bool = False
    """update the agents in their env order every time instead of a random order per gradient step (an ablation;
    HARL's fixed_order)"""
    critic_input: Literal["state", "concat_obs"] = "state"
    """what the team critics see besides the joint action: the env's global state, or every agent's observation
    concatenated"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of actors and critics"""
    activation: Literal["tanh", "relu"] = "relu"
    """hidden activation"""
    share_params: Literal["all", "group", "none"] = "none"
    """none (HASAC's own): one actor per agent, each updated in its turn; all / group: agents share an actor set,
    which each of them updates in its turn (HARL's share_param). Also --agent-groups, --train-groups, --load-group"""

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
    if args.alpha <= 0:
        raise ConfigError(f"--alpha must be positive, got {args.alpha}")
    check_group_args(args)
    if env is not None and env.discrete:
        raise ConfigError(f"{ALGO} needs continuous actions; {args.env} has discrete ones here: "
                          f"{continuous_hint(args.env)}; "
                          "or use algos/happo.py (or algos/maddpg.py, Gumbel-softmax) for discrete actions")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device, n_teams: int = 1):
    """Decentralised squashed-Gaussian actors on local obs (one set per agent by default); two centralised team
    critics Q^j_k(s, a_1..a_N), j = 1, 2, per learning team k: the critic's "agents" are the K teams, each with its
    own weights (one team: its one-hot is a constant 1). An image state gets a small CNN (nets.encoder_for) before
    the actions join it."""
    A = env.action_dim
    actor = SquashedGaussianActor(env.obs_shape, env.n_agents, A, torch.as_tensor(env.action_dim_mask),
                                  param_layout(args, env), args.hidden_sizes, args.activation,
                                  obs_sizes=env.obs_dims).to(device)
    info_in = centralised_input_shape(args, env)  # the state (an image gets a CNN) or all observations
    critics = torch.nn.ModuleList([Critic((info_in, (env.n_agents * A,)), n_teams, n_teams == 1,
                                          args.hidden_sizes, "none", args.activation) for _ in range(2)]).to(device)
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


def explore_by_sampling(actor, obs, random: bool) -> torch.Tensor:
    """Training actions (E, N, A): a draw from pi(. | o); uniformly random in [-1, 1] while `random`
    (before learning starts). Padded dimensions stay 0."""
    dist, _ = actor(obs)
    if random:
        return (torch.rand_like(dist.mean) * 2 - 1) * actor.action_dim_mask
    return dist.sample()


def temperature_loss(log_alpha: torch.Tensor, log_pi: torch.Tensor, target_entropy: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """SAC's temperature objective (Haarnoja et al. 2018b, eq. 18) on log alpha, per agent:
    J = E[-log alpha_i (log pi_i(a_i | o_i) + H_target_i)], log_alpha (N,), log_pi (B, N), target (N,).
    When the policy's entropy -E[log pi] is below the target, log pi + H_target > 0 and descending J
    raises alpha (more weight on entropy); above the target, alpha falls."""
    return -masked_mean(log_alpha * (log_pi + target_entropy).detach(), mask)


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


def sequential_soft_actor_update(actor, critics, optimizers, set_of: List[int], order: List[int], team_of: List[int],
                                 obs, info, replay_actions, learning, alpha, alive, max_grad_norm: float):
    """HASAC's actor step (Liu et al. 2024, Algorithm 1; run as HARL's off_policy_ha_runner.py runs it).

    First every learning agent draws an action from its current policy (no gradient); agents of fixed or loaded
    groups (learning (N, 1) False) keep the action they played, a draw of their fixed policy. Then, for agent
    i_m in `order`: a reparameterised draw a_i = tanh(mean + std * eps) replaces its slot, it takes one step of
    its parameter set's optimizer on mean_alive[alpha_i log pi_i(a_i | o_i) - min_j Q^j_k(s, a)] (k its team),
    and its slot is redrawn from its UPDATED policy: the agents after it are conditioned on its new actions,
    those before it were on their own. obs (B, N, obs_dim), info (B, D), replay_actions (B, N, A), alpha (N,),
    alive (B, N). Returns, per agent of `order`: (policy loss, log pi (B, 1) of its draws, actor gradient norm).
    """
    K = max(team_of) + 1
    with torch.no_grad():
        joint = torch.where(learning, actor(obs)[0].sample(), replay_actions)  # (B, N, A)
    out = []
    for m, agent in enumerate(order):
        dist, _ = actor(obs)  # (B, N, A): a shared set serves several agents, so the whole actor runs
        own, log_pi = dist.rsample_with_log_prob()  # (B, N, A), (B, N)
        own, log_pi = own[:, agent:agent + 1], log_pi[:, agent:agent + 1]  # (B, 1, A), (B, 1)
        x = team_critic_inputs(info, with_agent_action(joint, agent, own), K)
        q_pi = torch.minimum(critics[0](x)[0], critics[1](x)[0])[:, team_of[agent]]  # (B,)
        policy_loss = masked_mean(alpha[agent] * log_pi[:, 0] - q_pi, alive[:, agent])
        optimizer = optimizers[set_of[agent]]
        optimizer.zero_grad()
        policy_loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(actor.parameters(), max_grad_norm)
        optimizer.step()
        if m < len(order) - 1:  # the agents after it see its updated policy's actions
            with torch.no_grad():
                joint[:, agent] = actor(obs)[0].sample()[:, agent]
        out.append((policy_loss.detach(), log_pi.detach(), grad_norm))
    return out


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def checkpoint_payload(args, teams, actor, critics, target_critics, log_alpha, actor_optimizers, critic_optimizer,
                       alpha_optimizers, buffer, sample_gen, global_step, iteration, updates):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(), "critics": critics.state_dict(),
            "target_critics": target_critics.state_dict(), "log_alpha": log_alpha.detach().clone(),
            "actor_optimizers": [o.state_dict() for o in actor_optimizers],
            "critic_optimizer": critic_optimizer.state_dict(),
            "alpha_optimizers": [o.state_dict() for o in alpha_optimizers],
            "replay": buffer.state_dict(), "global_step": global_step, "iteration": iteration, "updates": updates,
            "rng": rng_state(), "sample_rng": sample_gen.get_state(),
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
    # K learning teams, each with its own team reward and pair of critics; member (N, K) sums a team's entropies.
    K = len(teams.learning)
    member = torch.zeros(N, K, device=device)
    for k, members in enumerate(teams.learning):
        member[members, k] = 1.0
    team_of = teams.team_of_agent.tolist()
    actor, critics = build_networks(args, envs, device, K)
    teams.load_weights({"actor": actor})  # --load-group from a HASAC run: copy that group's actors
    target_critics = copy.deepcopy(critics)  # SAC keeps no target actor: a' is drawn from the current policy
    # One Adam per parameter set over the stacked actor weights (as algos/happo.py): agent n's loss has exactly
    # zero gradient on the other sets' rows, so its Adam's moments there stay zero and so do its updates there.
    set_of = actor.net.set_of_agent.tolist()  # (N,) the set agent n updates in its turn
    actor_optimizers = [torch.optim.Adam(actor.parameters(), lr=args.actor_learning_rate, foreach=True)
                        for _ in set(set_of)]
    critic_optimizer = torch.optim.Adam(critics.parameters(), lr=args.critic_learning_rate, foreach=True)
    # One temperature per agent, learned as its logarithm (always positive), each with its own Adam for the
    # same reason; the default target entropy is minus the agent's number of real action dimensions.
    log_alpha = torch.full((N,), math.log(args.alpha), device=device, requires_grad=True)  # (N,)
    alpha_optimizers = [torch.optim.Adam([log_alpha], lr=args.alpha_learning_rate) for _ in range(N)]
    for group in set(teams.load) - set(teams.foreign):  # a group copied from a HASAC run keeps its temperatures
        rows = torch.as_tensor([g == group for g in teams.agent_groups], device=device)  # (N,)
        log_alpha.data[rows] = load_checkpoint(teams.load[group], device)["log_alpha"][rows]
    dims = torch.as_tensor(envs.action_dim_mask, device=device).float().sum(-1)  # (N,)
    target_entropy = -dims if args.target_entropy is None else torch.full_like(dims, args.target_entropy)
    # One stored entry is one iteration: T steps of E copies, so the replay keeps buffer_size // (T E) of them.
    capacity = args.buffer_size // args.steps_per_iteration
    buffer = MultiAgentRolloutBuffer(N, capacity=capacity)
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws and agent orders: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((actor, "actor"), (critics, "critics"), (target_critics, "target_critics"),
                            (critic_optimizer, "critic_optimizer")):
            module.load_state_dict(ckpt[key])
        for optimizer, saved in zip(actor_optimizers + alpha_optimizers,
                                    ckpt["actor_optimizers"] + ckpt["alpha_optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        with torch.no_grad():
            log_alpha.copy_(ckpt["log_alpha"])
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
    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for _ in range(T):
            with torch.no_grad():
                action = explore_by_sampling(actor, obs, random=global_step < args.learning_starts)  # (E, N, A)
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
            alive = b["alive"] * trained  # (B, N) what the actor losses count: fixed groups' nets and temperatures stay
            B = obs_b.shape[0]
            if args.critic_input == "state":
                info, next_info = b["global_states"], b["next_global_states"]  # (B, S)
            else:
                info, next_info = obs_b.reshape(B, -1), next_obs_b.reshape(B, -1)  # (B, N * obs_dim)
            alpha = log_alpha.detach().exp()  # (N,)
            terminated, ended, team_alive = learning_team_flags(b["terminated"], b["truncated"], b["alive"],
                                                                teams.learning)
            with torch.no_grad():
                # The team's soft value of every step's true next state (the final one where an episode ended),
                # min_j Q'^j_k(s', a') - sum_{i in team k} alpha_i log pi_i(a'_i | o'_i) with a' ~ pi(. | o'), the
                # sum over the team's agents that act on at s'; then TD(lambda) targets along each stored sequence
                # on the team reward (the entropy bonus enters at the bootstrap points only).
                next_dist, _ = actor(next_obs_b)
                next_actions, next_log_pi = next_dist.rsample_with_log_prob()  # (B, N, A), (B, N)
                next_actions = loaded_group_actions(teams, next_obs_b, next_actions)
                x = team_critic_inputs(next_info, next_actions, K)
                next_q = torch.minimum(target_critics[0](x)[0], target_critics[1](x)[0])  # (B, K), clipped double Q
                acts_on = b["alive"] * (1.0 - b["terminated"])  # (B, N) the agent acts at s'
                next_v = next_q - (alpha * next_log_pi * acts_on) @ member  # (B, K)
                seq = (T, B // T, K)  # back to (T, B_seq, K) for the backward recursion
                ended = ended.view(seq).clone()
                ended[-1] = 1.0  # the stored sequence stops: its last step bootstraps from the soft value alone
                team_reward = teams.team_rewards(b["rewards"])  # (B, K), R_pz3 units for mpe2
                targets = td_lambda_targets(team_reward.view(seq), next_v.view(seq), terminated.view(seq), ended,
                                            args.gamma, args.td_lambda).flatten(0, 1)  # (B, K)

# ============================================================================ 7. UPDATE
            critics.requires_grad_(True)
            x = team_critic_inputs(info, actions, K)
            q1, q2 = critics[0](x)[0], critics[1](x)[0]  # (B, K) each
            td_loss = masked_mean((q1 - targets) ** 2, team_alive) + masked_mean((q2 - targets) ** 2, team_alive)
            critic_optimizer.zero_grad()
            td_loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(critics.parameters(), args.max_grad_norm)
            critic_optimizer.step()
            critics.requires_grad_(False)  # the actor steps need gradients through the critics' inputs only

            # The actors one after another, in a random order over the learning agents (sequential_soft_actor_update),
            # then each one's temperature on the draws of its step. alpha_i enters agent i's own loss only, so
            # stepping the temperatures after the loop gives what stepping each in its turn (HARL) gives.
            order = [n for n in (range(N) if args.fixed_order else torch.randperm(N, generator=sample_gen).tolist())
                     if teams.trained_list[n]]
            agent_steps = sequential_soft_actor_update(actor, critics, actor_optimizers, set_of, order, team_of, obs_b,
                                                       info, actions, learning, alpha, alive, args.max_grad_norm)
            alpha_losses, entropies = [], []
            for agent, (_, log_pi, _) in zip(order, agent_steps):
                alpha_loss = temperature_loss(log_alpha[agent:agent + 1], log_pi, target_entropy[agent:agent + 1],
                                              alive[:, agent:agent + 1])
                if args.autotune:
                    alpha_optimizers[agent].zero_grad()
                    alpha_loss.backward()
                    alpha_optimizers[agent].step()
                alpha_losses.append(alpha_loss.detach())
                entropies.append(-masked_mean(log_pi, alive[:, agent:agent + 1]))
            soft_update(target_critics, critics, args.tau)
            updates += 1
            stats = dict(td_loss=td_loss.item(), policy_loss=torch.stack([s[0] for s in agent_steps]).mean().item(),
                         q_taken_mean=masked_mean(q1.detach(), team_alive).item(),
                         target_mean=masked_mean(targets, team_alive).item(), grad_norm=grad_norm.item(),
                         actor_grad_norm=torch.stack([s[2] for s in agent_steps]).mean().item(),
                         entropy=torch.stack(entropies).mean().item(), alpha=alpha[order].mean().item(),
                         alpha_loss=torch.stack(alpha_losses).mean().item())
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        # greedy (tanh of the mean), every --eval-every env steps
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, teams.members)
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               console={"td_loss": stats.get("td_loss"), "alpha": stats.get("alpha")},
                               groups=teams.members)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critics, target_critics, log_alpha, actor_optimizers, critic_optimizer,
                alpha_optimizers, buffer, sample_gen, global_step, iteration, updates))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, teams.members)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critics, target_critics, log_alpha, actor_optimizers, critic_optimizer, alpha_optimizers,
        buffer, sample_gen, global_step, args.num_iterations, updates))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
