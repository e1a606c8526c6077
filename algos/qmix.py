"""QMIX: monotonic value-function factorisation (Rashid et al. 2018, "QMIX: Monotonic Value
Function Factorisation for Deep Multi-Agent Reinforcement Learning", ICML, arXiv:1803.11485).

Every agent has a utility Q_i(tau_i, a_i) over its own action-observation history (a GRU);
a mixing network, whose weights are produced from the global state by hypernetworks and kept
non-negative, combines the chosen utilities into Q_tot(s, a). Because Q_tot is monotone in
every Q_i, each agent acting greedily on its own Q_i picks the joint action that maximises
Q_tot, so execution stays decentralised. Trained by TD(lambda) on the team reward from a
replay of whole episodes. Run:

    python algos/qmix.py --env simple_spread
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
from envs import discrete_hint, make_env, parse_env_kwargs
from nets import PerGroup, QMixer, QPolicy, RunningNorm, ValueNorm


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
    updates_per_iteration: int = 8
    """gradient steps after every iteration (num_envs episodes): 8 / 8 = one step per episode played"""
    learning_rate: float = 5e-4
    """Adam learning rate of agents and mixer"""
    gamma: float = 0.95
    """discount factor (0.95 suits MPE's 25-step, clock-cut episodes: VDN on simple_spread reached -38.7 at
    700k env steps with it and stayed near -58 with 0.99; see docs/benchmarks-history.md)"""
    td_lambda: float = 0.6
    """lambda of the TD(lambda) targets (0: one-step targets)"""
    bootstrap_time_limit: bool = False
    """bootstrap from Q'_tot(s_T) where the clock (mpe2's max_cycles), not the task, ended an episode.
    Off (default, as in EPyMARL on MPE): every episode's last step is a target without a bootstrap. With
    it on, the max-overestimation that the mixer amplifies compounds over 1/(1-gamma) steps and Q_tot
    climbs away from the returns (docs/algorithms/qmix.md, "Where an episode ends")"""
    double_q: bool = True
    """double Q-learning: the online agents pick the next action, the target agents value it"""
    tau: float = 0.01
    """target networks move tau of the way to the online ones every target update (1.0: hard copy)"""
    target_update_interval: int = 1
    """gradient steps between target updates (hard copies: --tau 1 --target-update-interval 200)"""
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
    """standardise the team reward with its running mean and std, as EPyMARL does (with fixed-length
    episodes the same optimal policy; where episodes can end early the shift changes that incentive)"""
    state_norm: bool = False
    """feed the mixer the global state standardised per feature with running statistics of the states
    played. SMAX's state holds raw map coordinates (0-32): fed as they are, the mixer's hypernetworks
    start at a Q_tot of about 40 where returns are at most 6, and QMIX's Q values diverge there"""
    last_action_input: bool = True
    """append the one-hot of the agent's previous action to its input"""
    recurrent: Literal["gru", "none"] = "gru"
    """recurrent core of the agent network"""
    hidden_dim: int = 64
    """width of the agent network (linear layer and GRU)"""
    mixer_embed_dim: int = 32
    """width of the mixing network"""
    hypernet_hidden: int = 64
    """hidden width of the hypernetworks that produce the mixing weights"""


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    check_group_args(args)
    for name in ("num_envs", "batch_size", "buffer_size", "updates_per_iteration", "target_update_interval",
                 "eval_episodes", "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.td_lambda <= 1.0:
        raise ConfigError(f"--td-lambda must be in [0, 1], got {args.td_lambda}")
    if env is not None and not env.discrete:
        raise ConfigError(f"{ALGO} picks argmax actions and needs discrete actions; {args.env} has continuous ones. "
                          "For continuous actions use algos/mappo.py or algos/ippo.py "
                          f"(or {discrete_hint(args.env)})")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device, teams=None):
    """Agent utilities Q_i on local histories (image observations, obs_shape (H, W, C), through a
    small CNN: nets.encoder_for); a QMIX mixer on the global state (flat, whatever its shape) for
    every team in `teams` (lists of agent indices, teams.learning; default one team of every agent)."""
    agents = QPolicy(env.obs_shape, env.n_actions, env.n_agents, param_layout(args, env), args.hidden_dim,
                     args.recurrent, args.last_action_input,
                     obs_sizes=env.obs_dims, action_sizes=env.action_dims).to(device)
    teams = teams or [list(range(env.n_agents))]
    mixer = PerGroup([QMixer(len(m), env.state_dim, args.mixer_embed_dim, args.hypernet_hidden) for m in teams],
                     teams).to(device)  # (..., N) -> (..., K): rivals are never mixed into one Q_tot
    return agents, mixer


# ============================================================================ 3. ALGORITHM FUNCTIONS
def epsilon_greedy(q: torch.Tensor, mask: Optional[torch.Tensor], epsilon: float) -> torch.Tensor:
    """q (..., A) -> actions (...), e.g. (E, N, A) -> (E, N): with probability epsilon a uniform random available
    action, otherwise the best available one. Unavailable actions are never chosen either way."""
    available = torch.ones_like(q, dtype=torch.bool) if mask is None else mask.bool()
    greedy = q.masked_fill(~available, float("-inf")).argmax(-1)
    random = torch.rand(q.shape, device=q.device).masked_fill(~available, -1.0).argmax(-1)  # uniform over available
    explore = torch.rand(q.shape[:-1], device=q.device) < epsilon
    return torch.where(explore, random, greedy)


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


def episode_ends(step_mask: torch.Tensor, dones: torch.Tensor, bootstrap_time_limit: bool):
    """step_mask (T, B) 1 on real steps, dones (T, B) 1 where the task terminated -> (ended, terminated),
    both (T, B): `ended` marks each sequence's last real step; `terminated` the ended steps whose target
    has no bootstrap: all of them, or with bootstrap_time_limit only those the task ended (a clock
    truncation then bootstraps from Q'(s_T))."""
    ended = step_mask * (1.0 - torch.cat([step_mask[1:], torch.zeros_like(step_mask[:1])]))
    return ended, (ended * dones if bootstrap_time_limit else ended)


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


def checkpoint_payload(args, teams, agents, mixer, target_agents, target_mixer, optimizer, reward_norm, state_norm,
                       buffer, sample_gen, global_step, iteration, updates, fresh):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts;
    `fresh`: every env copy stands at an episode's start, so the next iteration does not reset. The agent
    network is saved as "q_net": "agents" holds the agent names (teams.payload, for --load-group)."""
    return {"algo": ALGO, "args": args_dict(args), "q_net": agents.state_dict(), "mixer": mixer.state_dict(),
            "target_agents": target_agents.state_dict(), "target_mixer": target_mixer.state_dict(),
            "optimizer": optimizer.state_dict(), "reward_norm": reward_norm.state_dict(),
            "state_norm": state_norm.state_dict(), "replay": buffer.state_dict(), "global_step": global_step,
            "iteration": iteration, "updates": updates,
            "rng": rng_state(), "sample_rng": sample_gen.get_state(), "fresh": fresh, **teams.payload(q_net=agents)}


def acting_policy(saved: Args, env, ckpt: dict, device):
    """A saved run's agents (for --evaluate-checkpoint, and --load-group in any algorithm)."""
    agents, _ = build_networks(saved, env, device)
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
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    groups = teams.members  # {group name: agent indices}, for per-group returns
    K = len(teams.learning)  # learning teams: each has its own mixer, team reward and TD targets
    agents, mixer = build_networks(args, envs, device, teams.learning)
    teams.load_weights({"q_net": agents})  # --load-group from a QMIX run: copy its agents' weights
    target_agents, target_mixer = copy.deepcopy(agents), copy.deepcopy(mixer)
    params = list(agents.parameters()) + list(mixer.parameters())
    optimizer = torch.optim.Adam(params, lr=args.learning_rate, fused=True)  # one kernel for every tensor
    # Running statistics of each team's reward (rivals' rewards are never pooled); one team: scalar, as always
    reward_norm = ValueNorm(groups=list(range(K)) if K > 1 else None).to(device)
    state_norm = RunningNorm(envs.state_dim).to(device)  # per feature, of the states played (--state-norm)
    # One stored "episode" holds E copies, so the replay keeps buffer_size // E of them.
    buffer = MultiAgentRolloutBuffer(N, capacity=max(1, args.buffer_size // E))
    sample_gen = torch.Generator().manual_seed(args.seed)  # replay draws: same seed, same batches
    global_step, start_iteration, updates = 0, 1, 0
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for module, key in ((agents, "q_net"), (mixer, "mixer"), (target_agents, "target_agents"),
                            (target_mixer, "target_mixer"), (optimizer, "optimizer"), (reward_norm, "reward_norm")):
            module.load_state_dict(ckpt[key])
        if "state_norm" in ckpt:  # checkpoints written before --state-norm existed have none
            state_norm.load_state_dict(ckpt["state_norm"])
        buffer.load_state_dict(ckpt["replay"])
        buffer.capacity = max(1, args.buffer_size // E)
        global_step, start_iteration, updates = ckpt["global_step"], ckpt["iteration"] + 1, ckpt["updates"]
        sample_gen.set_state(ckpt["sample_rng"])

    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(agents, mixer))
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
        while running.any():
            with torch.no_grad():
                greedy, agent_state = agents(obs[None], agent_state, starts, None if mask is None else mask[None])
                action = epsilon_greedy(greedy.q[0], mask, epsilon)  # (E, N)
                action = teams.override(action, obs, starts[0], mask)  # groups loaded from other algorithms' runs
                agent_state = agents.remember(agent_state, action)
            result = envs.step(action)
            final_obs = torch.as_tensor(result.final_obs, device=device)
            final_state = torch.as_tensor(result.final_state, device=device)
            final_mask = result.final_action_mask if result.final_action_mask is not None else result.action_mask
            valid = running[:, None].expand(E, N).float()  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action, rewards=torch.as_tensor(result.reward, device=device),
                next_obs=final_obs, terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(), valid=valid,
                alive=torch.as_tensor(result.alive, device=device).float(),  # (E, N) the agent acted
                team={"global_states": state, "next_global_states": final_state},  # (E, state_dim) each, once per copy
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
            starts = torch.zeros(1, E, N, device=device)
        episode = buffer.end_episode()
        played = episode["extras"]["valid"].stack()[..., 0].bool()  # (T, E) every real step played
        if args.standardise_rewards:  # running scale of the team rewards
            reward_norm.update(teams.team_rewards(episode["rewards"].stack())[played])  # (steps, K)
        if args.state_norm:  # running statistics of every feature of the states played
            state_norm.update(episode["team"]["global_states"].stack().flatten(2)[played])  # (steps, state_dim)
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
            # (T, B) last real step, and where the target stops: every episode end (or, with
            # --bootstrap-time-limit, only those the task ended, not the clock)
            ended, terminated = episode_ends(step_mask, b["terminated"].amax(-1), args.bootstrap_time_limit)
            team_reward = teams.team_rewards(b["rewards"])  # (T, B, K), R_pz3 units for mpe2
            if args.standardise_rewards:
                mean, var = reward_norm.stats()  # scalars, or (K,) one per team
                team_reward = (team_reward - mean) / var.sqrt()
            # Inputs for steps 0..T: the observed history plus each episode's final observation.
            obs_all = with_final_step(b["obs"], b["next_obs"], lengths)  # (T+1, B, N, obs_dim)
            state_all = with_final_step(b["global_states"], b["next_global_states"], lengths)
            if args.state_norm:  # (T+1, B, state_dim), standardised per feature
                state_all = state_norm(state_all.flatten(2))
            mask_all = (with_final_step(b["action_masks"], b["next_action_masks"], lengths).bool()
                        if "action_masks" in b else None)  # (T+1, B, N, A)
            # Agents that left early (MAgent2 deaths) are out of the mix: a dead agent's utility on its
            # zero observation says nothing, and its action was never played. alive_all[t + 1]: who is
            # present in s_{t+1} (at an episode's end, whoever acted last and did not terminate).
            alive = b["alive"] if "alive" in b else torch.ones_like(b["rewards"])  # (T, B, N); older replays lack it
            alive_all = with_final_step(alive, alive * (1.0 - b["terminated"]), lengths)  # (T+1, B, N)
            actions = b["actions"].long()  # (T, B, N)
            last_all = torch.cat([torch.zeros(1, B, N, A, device=device), F.one_hot(actions, A).float()])

            # Online utilities over the whole history; Q_i of the actions taken, mixed into Q_tot.
            starts_all = torch.zeros(T + 1, B, N, device=device)
            starts_all[0] = 1.0  # every sequence starts an episode
            q_all, _ = agents.q_values(obs_all, last_all, agents.net.initial_state(B, device), starts_all)  # (T+1, B, N, A)
            q_taken = q_all[:-1].gather(-1, actions[..., None]).squeeze(-1) * alive  # (T, B, N), 0 for the dead
            q_tot = mixer(q_taken, state_all[:-1])  # (T, B, K); fixed groups' Q_i are in no mixer: no gradient
            with torch.no_grad():
                tq_all, _ = target_agents.q_values(obs_all, last_all, target_agents.net.initial_state(B, device),
                                                   starts_all)  # (T+1, B, N, A)
                chooser = q_all if args.double_q else tq_all  # double Q: the online net picks a*
                if mask_all is not None:
                    chooser = chooser.masked_fill(~mask_all, float("-inf"))
                best_next = chooser[1:].argmax(-1, keepdim=True)  # (T, B, N, 1)
                tq_next = tq_all[1:].gather(-1, best_next).squeeze(-1) * alive_all[1:]  # (T, B, N)
                next_q_tot = target_mixer(tq_next, state_all[1:])  # (T, B, K)
                targets = td_lambda_targets(team_reward, next_q_tot, terminated[..., None], ended[..., None],
                                            args.gamma, args.td_lambda)  # (T, B, K), one recursion per team
            td_error = q_tot - targets
            per_step = td_error ** 2 if args.loss == "mse" else F.smooth_l1_loss(q_tot, targets, reduction="none")
            team_mask = step_mask[..., None].expand_as(q_tot)  # (T, B, K)
            loss = masked_mean(per_step, team_mask)

# ============================================================================ 7. UPDATE
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            optimizer.step()
            updates += 1
            if updates % args.target_update_interval == 0:
                soft_update(target_agents, agents, args.tau)
                soft_update(target_mixer, mixer, args.tau)
            stats = dict(td_loss=loss.item(), q_taken_mean=masked_mean(q_tot.detach(), team_mask).item(),
                         target_mean=masked_mean(targets, team_mask).item(), grad_norm=grad_norm.item())
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(agents), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"epsilon": epsilon},
                               console={"epsilon": epsilon, "td_loss": stats.get("td_loss")}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, agents, mixer, target_agents, target_mixer, optimizer, reward_norm, state_norm, buffer,
                sample_gen, global_step, iteration, updates, fresh))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(agents), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, agents, mixer, target_agents, target_mixer, optimizer, reward_norm, state_norm, buffer,
        sample_gen, global_step, iteration, updates, fresh))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
