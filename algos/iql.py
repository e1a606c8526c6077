"""IQL: independent Q-learning (Tan 1993, "Multi-Agent Reinforcement Learning: Independent
vs. Cooperative Agents"; with recurrent agents as in Tampuu et al. 2017, arXiv:1511.08779).

Every agent learns its own Q_i(tau_i, a_i) from its own reward, treating the other agents as
part of the environment: no mixer, no global state. It is the baseline that value
factorisation (VDN, QMIX, QPLEX) improves on: the other agents' changing policies make each
agent's environment non-stationary, and nothing ties an agent's target to the team's. The
same file as algos/qmix.py minus the mixer. Run:

    python algos/iql.py --env simple_spread
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Tuple

import torch
import torch.nn.functional as F

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from common.turns import is_turn_based, negamax_targets, turn_td_targets, whose_move
from envs import discrete_hint, make_env, parse_env_kwargs
from nets import QPolicy, ValueNorm


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 2_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())'); discrete actions only"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50"""
    num_envs: int = 8
    """E, env copies; every iteration plays one whole episode in each"""

    # --- algorithm
    buffer_size: int = 5000
    """replay capacity in episodes (one episode = one env copy from reset to its end); oldest dropped"""
    batch_size: int = 32
    """episodes per gradient step"""
    updates_per_iteration: int = 16
    """gradient steps after every iteration (num_envs episodes): 16 / 8 = two steps per episode played, twice
    QMIX's and VDN's (on simple_spread, 3-seed mean -32.3 at 2M against -38.2 with one; docs/benchmarks-history.md)"""
    learning_rate: float = 5e-4
    """Adam learning rate of the agents"""
    gamma: float = 0.95
    """discount factor (0.95 suits MPE's 25-step, clock-cut episodes: VDN on simple_spread reached -38.7 at
    700k env steps with it and stayed near -58 with 0.99; see docs/benchmarks-history.md)"""
    td_lambda: float = 0.0
    """lambda of the TD(lambda) targets (0: one-step targets). IQL uses EPyMARL's one-step targets and hard
    target copies: on simple_spread (one gradient step per episode), 3-seed mean -38.2 at 2M against -41.8
    with TD(0.6) and Polyak 0.01 (docs/benchmarks-history.md)"""
    double_q: bool = True
    """double Q-learning: the online agents pick the next action, the target agents value it"""
    tau: float = 1.0
    """target networks move tau of the way to the online ones every target update (1.0: hard copy)"""
    target_update_interval: int = 200
    """gradient steps between target updates (Polyak averaging every step: --tau 0.01 --target-update-interval 1)"""
    loss: Literal["mse", "huber"] = "mse"
    """TD loss"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    eps_start: float = 1.0
    """exploration: probability of a uniform random (available) action at the start"""
    eps_finish: float = 0.05
    """... at the end of the anneal"""
    eps_anneal_steps: int = 200_000
    """env steps over which epsilon falls linearly from eps_start to eps_finish"""
    standardise_rewards: bool = True
    """divide the rewards by their running standard deviation (same optimal policy, better-scaled TD errors)"""
    team_reward: bool = False
    """every agent learns from its group's summed reward (EPyMARL's common reward) instead of its own; rival
    groups' rewards are never summed"""
    last_action_input: bool = True
    """append the one-hot of the agent's previous action to its input"""
    zero_sum_targets: bool = False
    """two-player zero-sum turn-based games (tic-tac-toe, connect four): a move's target is its reward minus the
    value of the position it leaves to the player who moves next (negamax, common.turns.negamax_targets), instead
    of the reward up to the agent's next move plus that move's value (the other player's reply as it was played)"""
    recurrent: Literal["gru", "none"] = "gru"
    """recurrent core of the agent network"""
    hidden_dim: int = 64
    """width of the agent network (linear layers and GRU)"""
    hidden_layers: int = 1
    """linear layers before the GRU (or before the head with --recurrent none: a fully observed board game's
    feed-forward agent wants two)"""


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    check_group_args(args)
    for name in ("num_envs", "batch_size", "buffer_size", "updates_per_iteration", "target_update_interval",
                 "hidden_layers", "eval_episodes", "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.td_lambda <= 1.0:
        raise ConfigError(f"--td-lambda must be in [0, 1], got {args.td_lambda}")
    if env is not None and args.zero_sum_targets and not (is_turn_based(env) and env.n_agents == 2):
        raise ConfigError(f"--zero-sum-targets is for two-player turn-based games (classic:tictactoe, torch:connect_four); "
                          f"{args.env} has {env.n_agents} agents{'' if is_turn_based(env) else ' that act at once'}")
    if env is not None and not env.discrete:
        raise ConfigError(f"{ALGO} picks argmax actions and needs discrete actions; {args.env} has continuous ones. "
                          "For continuous actions use algos/mappo.py or algos/ippo.py "
                          f"(or {discrete_hint(args.env)})")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Agent utilities Q_i on local histories (image observations, obs_shape (H, W, C), through a small
    CNN: nets.encoder_for); nothing else."""
    return QPolicy(env.obs_shape, env.n_actions, env.n_agents, param_layout(args, env), args.hidden_dim,
                   args.recurrent, args.last_action_input,
                   obs_sizes=env.obs_dims, action_sizes=env.action_dims, hidden_layers=args.hidden_layers).to(device)


# ============================================================================ 3. ALGORITHM FUNCTIONS
def epsilon_greedy(q: torch.Tensor, mask: Optional[torch.Tensor], epsilon: float) -> torch.Tensor:
    """q (..., A) -> actions (...), e.g. (E, N, A) -> (E, N): with probability epsilon a uniform random available
    action, otherwise the best available one. Unavailable actions are never chosen either way."""
    available = torch.ones_like(q, dtype=torch.bool) if mask is None else mask.bool()
    greedy = q.masked_fill(~available, float("-inf")).argmax(-1)
    random = torch.rand(q.shape, device=q.device).masked_fill(~available, -1.0).argmax(-1)  # uniform over available
    explore = torch.rand(q.shape[:-1], device=q.device) < epsilon
    return torch.where(explore, random, greedy)


def learned_rewards(rewards: torch.Tensor, team_reward: bool, groups: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(..., N) rewards -> what each agent learns from: its own reward, or with team_reward the sum over
    its group's agents (groups: (N, G) one-hot, teams.onehot; default one group of every agent)."""
    if team_reward and groups is not None and groups.shape[1] > 1:
        return rewards @ groups @ groups.T  # each group's sum (..., G), given back to its agents
    return rewards.sum(-1, keepdim=True).expand_as(rewards) if team_reward else rewards


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


def after_death(rewards, alive, step_mask, ended, terminated, gamma: float):
    """Targets for an agent that dies while its episode goes on (a SMAX unit stays in the battle, seeing
    zeros and sharing the team's reward, until it is over). Its target at the death would bootstrap from
    Q_i of a zero view, which no loss trains (dead steps are out of the loss); instead its last live
    action is credited with the rewards after the death, discounted per step, to the episode's end:
    y_t = r_t + gamma G_{t+1}, G_t = r_t + gamma G_{t+1}. Where the clock cut that episode the return
    after the death is unknown, and that action is left out. All tensors (T, B, N) but step_mask and
    ended, (T, B). Returns death (T, B, N) 1 at each agent's last live step before its episode's end,
    tail (T, B, N) G_{t+1} there, and keep (T, B, N) 0 where a death's episode was cut.
    """
    next_alive = torch.cat([alive[1:], torch.zeros_like(alive[:1])])
    death = step_mask[..., None] * alive * (1.0 - next_alive) * (1.0 - ended[..., None]) * (1.0 - terminated)
    if not death.any():  # agents that never leave early, or leave by termination (MAgent2): nothing to do
        return death, torch.zeros_like(rewards), torch.ones_like(rewards)
    stops = torch.maximum(ended[..., None], terminated)
    returns = td_lambda_targets(rewards, torch.zeros_like(rewards), terminated, stops, gamma, 1.0)  # G_t, no bootstrap
    tail = torch.cat([returns[1:], torch.zeros_like(returns[:1])])  # G_{t+1}
    cut = (ended[..., None] * (1.0 - terminated)).amax(0, keepdim=True)  # (1, B, N) the clock ended the episode
    return death, tail, 1.0 - death * cut


def with_final_step(x: torch.Tensor, final: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(T, B, ...) per-step inputs and the (T, B, ...) "next" inputs -> (T + 1, B, ...) where row
    lengths[b] of sequence b holds its final (post-episode) input: the whole history a recurrent
    target network has to read before valuing s_{t+1}."""
    out = torch.cat([x, torch.zeros_like(x[:1])])
    b = torch.arange(x.shape[1], device=x.device)
    out[lengths, b] = final[lengths - 1, b]
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


def checkpoint_payload(args, teams, agents, target_agents, optimizer, reward_norm, buffer, sample_gen, global_step,
                       iteration, updates, fresh):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts;
    `fresh`: every env copy stands at an episode's start, so the next iteration does not reset. The agent
    network is saved as "q_net": "agents" holds the agent names (teams.payload, for --load-group)."""
    return {"algo": ALGO, "args": args_dict(args), "q_net": agents.state_dict(),
            "target_agents": target_agents.state_dict(),
            "optimizer": optimizer.state_dict(), "reward_norm": reward_norm.state_dict(),
            "replay": buffer.state_dict(), "global_step": global_step, "iteration": iteration, "updates": updates,
            "rng": rng_state(), "sample_rng": sample_gen.get_state(), "fresh": fresh, **teams.payload(q_net=agents)}


def acting_policy(saved: Args, env, ckpt: dict, device):
    """A saved run's agents (for --evaluate-checkpoint, and --load-group in any algorithm)."""
    agents = build_networks(saved, env, device)
    agents.load_state_dict(ckpt["q_net"] if "q_net" in ckpt else ckpt["agents"])  # "agents" before groups
    return agents


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
    validate(args, envs)
    eval_envs = make_env(args.env, args.eval_num_envs, args.seed + 10_000, env_kwargs, device=device)
    E, N, A = args.num_envs, envs.n_agents, envs.n_actions
    # Groups of agents (by name prefix or --agent-groups), which of them learn, which start from other runs.
    teams = policy_map(args, envs, ALGO, device, turn_based=True)  # bad names and unusable runs fail here
    groups = teams.members  # {group name: agent indices}, for per-group returns
    agents = build_networks(args, envs, device)
    teams.load_weights({"q_net": agents})  # --load-group from an IQL run: copy its agents' weights
    target_agents = copy.deepcopy(agents)
    params = list(agents.parameters())
    optimizer = torch.optim.Adam(params, lr=args.learning_rate, fused=True)  # one kernel for every tensor
    # Running scale of the rewards (only it is used), one per group where there are several: rivals' never pool
    reward_norm = ValueNorm(groups=teams.group_of_agent if len(teams.names) > 1 else None).to(device)
    # One stored "episode" holds E copies, so the replay keeps buffer_size // E of them.
    buffer = MultiAgentRolloutBuffer(N, capacity=max(1, args.buffer_size // E))
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((agents, "q_net"), (target_agents, "target_agents"), (optimizer, "optimizer"),
                            (reward_norm, "reward_norm")):
            module.load_state_dict(ckpt[key])
        buffer.load_state_dict(ckpt["replay"])
        buffer.capacity = max(1, args.buffer_size // E)
        global_step, start_iteration, updates = ckpt["global_step"], ckpt["iteration"] + 1, ckpt["updates"]
        sample_gen.set_state(ckpt["sample_rng"])

    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(agents,))
    obs, state, mask, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    # fresh: every copy stands at an episode's start (just reset, or all ended at once): no reset is due
    stats, iteration, fresh = {}, start_iteration - 1, ckpt["fresh"] if restored else True
    while global_step < args.total_timesteps:
        iteration += 1

# ============================================================================ 5. ROLLOUT
        # One whole episode in every copy. Copies that finish early keep stepping (the adapter
        # auto-resets them) but those steps are marked invalid and never trained on.
        t_rollout = time.time()
        if not fresh:
            obs, state, mask = envs.reset()
        obs, state = torch.as_tensor(obs, device=device), torch.as_tensor(state, device=device)
        mask = None if mask is None else torch.as_tensor(mask, device=device)
        epsilon = max(args.eps_finish, args.eps_start - (args.eps_start - args.eps_finish)
                      * global_step / args.eps_anneal_steps)
        agent_state = agents.initial_state(E, device)
        starts = torch.ones(1, E, N, device=device)
        running = torch.ones(E, dtype=torch.bool, device=device)  # (E,) still in this iteration's episode
        buffer.reset_current_episode()
        # (E, N) whose move it is, in a turn-based game (common/turns.py); None in every other env
        acting = whose_move(envs, device) if is_turn_based(envs) else None
        while running.any():
            with torch.no_grad():
                greedy, agent_state = agents(obs[None], agent_state, starts, None if mask is None else mask[None])
                action = epsilon_greedy(greedy.q[0], mask, epsilon)  # (E, N)
                action = teams.override(action, obs, starts[0], mask)  # groups loaded from other algorithms' runs
                agent_state = agents.remember(agent_state, action)
            result = envs.step(action)
            final_obs = torch.as_tensor(result.final_obs, device=device)
            final_mask = result.final_action_mask if result.final_action_mask is not None else result.action_mask
            valid = running[:, None].expand(E, N).float()  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action, rewards=torch.as_tensor(result.reward, device=device),
                next_obs=final_obs, terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(), valid=valid,
                alive=torch.as_tensor(result.alive, device=device).float(),  # (E, N) the agent acted
                **({} if acting is None else {"acting": acting.float()}),  # the agent moved (a turn-based game)
                **({} if mask is None else {"action_masks": mask,
                                            "next_action_masks": torch.as_tensor(final_mask, device=device)}))
            global_step += int(running.sum())
            done = torch.as_tensor(result.done, device=device)
            finished = done & running
            if finished.any():
                returns = torch.as_tensor(result.episode_return)[finished.cpu()]  # (episodes, N)
                train_returns.extend(returns.sum(-1).tolist())
                agent_returns.extend(returns.tolist())  # per agent: per-team returns in the logs
                train_lengths.extend(torch.as_tensor(result.episode_length)[finished.cpu()].tolist())
            running = running & ~done
            fresh = bool(done.all())  # every copy has just auto-reset: the next episode starts here
            obs, state = torch.as_tensor(result.obs, device=device), torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            acting = None if acting is None else whose_move(result, device)
            starts = torch.zeros(1, E, N, device=device)
        episode = buffer.end_episode()
        if args.standardise_rewards:  # running scale of the rewards, from every real step a live agent played
            played = episode["extras"]["valid"].stack() * episode["extras"]["alive"].stack()
            played = played * teams.trained  # (T, E, N); fixed groups' rewards are not learned from
            rewards = learned_rewards(episode["rewards"].stack(), args.team_reward, teams.onehot)
            reward_norm.update(rewards[played.bool()] if reward_norm.group_onehot is None else rewards, played)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        # (inside the update loop: every gradient step draws its own batch of stored episodes)
        t_update = time.time()
        stored = buffer.stored_sequences
        for _ in range(args.updates_per_iteration if stored >= args.batch_size else 0):
            b = buffer.sample_episodes(args.batch_size, sample_gen, device)
            b = {k: v.transpose(0, 1) for k, v in b.items()}  # time first: (T, B, N, ...)
            step_mask = b["filled"] * b["valid"][..., 0]  # (T, B) 1 on real steps of real episodes
            lengths = step_mask.sum(0).long()  # (B,)
            T, B = step_mask.shape
            ended = step_mask * (1.0 - torch.cat([step_mask[1:], torch.zeros_like(step_mask[:1])]))  # last real step
            terminated = b["terminated"] * step_mask[..., None]  # (T, B, N): each agent's own termination
            # Agents that left early (MAgent2 deaths) have no loss after they are gone: their zero
            # observation says nothing and their action was never played. The step an agent dies in
            # is its last alive one, terminated there, so no target bootstraps across the death (a unit that
            # dies while its episode goes on, as in SMAX, is handled by after_death below).
            alive = b["alive"] if "alive" in b else torch.ones_like(b["rewards"])  # (T, B, N); older replays lack it
            # (T, B, N) real steps of live agents of learning groups (fixed groups' rows get no gradient)
            agent_mask = step_mask[..., None] * alive * teams.trained
            rewards = learned_rewards(b["rewards"], args.team_reward, teams.onehot)  # (T, B, N)
            if args.standardise_rewards:
                rewards = rewards / reward_norm.stats()[1].sqrt()
            # Inputs for steps 0..T: the observed history plus each episode's final observation.
            obs_all = with_final_step(b["obs"], b["next_obs"], lengths)  # (T+1, B, N, obs_dim)
            mask_all = (with_final_step(b["action_masks"], b["next_action_masks"], lengths).bool()
                        if "action_masks" in b else None)  # (T+1, B, N, A)
            actions = b["actions"].long()  # (T, B, N)
            last_all = torch.cat([torch.zeros(1, B, N, A, device=device), F.one_hot(actions, A).float()])

            # Online utilities over the whole history; Q_i of the actions taken.
            starts_all = torch.zeros(T + 1, B, N, device=device)
            starts_all[0] = 1.0  # every sequence starts an episode
            q_all, _ = agents.q_values(obs_all, last_all, agents.net.initial_state(B, device), starts_all)  # (T+1, B, N, A)
            q_taken = q_all[:-1].gather(-1, actions[..., None]).squeeze(-1)  # (T, B, N)
            with torch.no_grad():
                tq_all, _ = target_agents.q_values(obs_all, last_all, target_agents.net.initial_state(B, device),
                                                   starts_all)  # (T+1, B, N, A)
                chooser = q_all if args.double_q else tq_all  # double Q: the online net picks a*
                if mask_all is not None:
                    chooser = chooser.masked_fill(~mask_all, float("-inf"))
                best_next = chooser[1:].argmax(-1, keepdim=True)  # (T, B, N, 1)
                tq_next = tq_all[1:].gather(-1, best_next).squeeze(-1)  # (T, B, N)
                if "acting" in b:  # a turn-based game: each agent learns from its own moves, the rewards that
                    # arrive on the others' moves credited to its last one, bootstrapping from its next move
                    turn_targets = negamax_targets if args.zero_sum_targets else turn_td_targets
                    targets, keep = turn_targets(rewards, tq_next, b["acting"], ended, terminated, args.gamma,
                                                 args.td_lambda)
                    agent_mask = agent_mask * b["acting"]
                else:  # one TD(lambda) recursion per agent: (T, B, N); an agent's own termination ends it.
                    # A death inside a running episode (SMAX): the rewards after it, not Q_i of a zero view
                    death, tail, keep = after_death(rewards, alive, step_mask, ended, terminated, args.gamma)
                    tq_next = torch.where(death > 0, tail, tq_next)
                    targets = td_lambda_targets(rewards, tq_next, terminated,
                                                torch.maximum(torch.maximum(ended[..., None], terminated), death),
                                                args.gamma, args.td_lambda)
            agent_mask = agent_mask * keep  # a death (or a move) whose episode the clock cut has no known return
            td_error = q_taken - targets
            per_step = td_error ** 2 if args.loss == "mse" else F.smooth_l1_loss(q_taken, targets, reduction="none")
            loss = masked_mean(per_step, agent_mask)

# ============================================================================ 7. UPDATE
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            optimizer.step()
            updates += 1
            if updates % args.target_update_interval == 0:
                soft_update(target_agents, agents, args.tau)
            stats = dict(td_loss=loss.item(), q_taken_mean=masked_mean(q_taken.detach(), agent_mask).item(),
                         target_mean=masked_mean(targets, agent_mask).item(), grad_norm=grad_norm.item())
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(agents), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"epsilon": epsilon},
                               console={"epsilon": epsilon, "td_loss": stats.get("td_loss")}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, agents, target_agents, optimizer, reward_norm, buffer, sample_gen, global_step, iteration,
                updates, fresh))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(agents), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, agents, target_agents, optimizer, reward_norm, buffer, sample_gen, global_step, iteration, updates,
        fresh))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
