"""IPG: independent policy gradient, REINFORCE with returns-to-go for every agent (Williams 1992,
"Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement Learning";
the baseline as in Sutton and Barto 2018, section 13.4), optionally with a learned baseline.

Each agent weights the log-probability of its actions by its own Monte Carlo return from that
step to the end of the episode, minus a baseline learned from its own observation (and the time).
Rollouts hold whole episodes, so no return depends on a learned value. Run:

    python algos/ipg.py --env simple_spread
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Tuple

import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, factored_actions, run_cli
from common.groups import GroupArgs, check_group_args, param_layout, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import Actor, Critic, ValueNorm, explained_variance


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):  # bases last to first: --help lists RunArgs' fields first
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 5_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once); the learning-rate
    schedule anneals over it"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50 continuous_actions=true"""
    num_envs: int = 32
    """E, env copies stepped together in the rollout (E whole episodes per rollout with the default T)"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps and one gradient step). The
    returns are Monte Carlo, so every rollout must end where every copy's episode ends: T a multiple of
    the episode length (mpe2: max_cycles, 25 by default); a rollout that cuts an episode stops the run
    with an error unless --bootstrap-cut"""
    learning_rate: float = 3e-3
    """Adam learning rate of the policy and the baseline"""
    anneal_lr: bool = True
    """decay the learning rate linearly over total_timesteps (the last iteration uses lr / num_iterations)"""
    gamma: float = 0.99
    """discount factor of the returns-to-go"""
    baseline: bool = True
    """subtract a learned baseline V(o^i_t, tau_t) (own observation, time feature) from the return-to-go;
    --no-baseline: plain REINFORCE, weighting log-probs by the return-to-go itself"""
    bootstrap_cut: bool = False
    """where a rollout ends inside an episode, complete that episode's returns-to-go with the baseline's
    V(o_T) (needs --baseline; those returns are then no longer pure Monte Carlo). Off: such a rollout is
    an error"""
    time_feature: bool = True
    """the baseline also sees how far its episode has run (steps since the start, divided by T): a
    return-to-go shrinks as the episode runs out, which the observation does not show"""
    norm_adv: bool = True
    """normalise the weights (return-to-go minus baseline) to zero mean and unit std over the rollout, per group"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """baseline-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    value_norm: bool = True
    """the baseline predicts returns normalised with running statistics (MAPPO's ValueNorm)"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """recurrent core in policy and baseline (trained on each copy's whole rollout of T steps)"""
    hidden_sizes: Tuple[int, ...] = (64, 64)
    """hidden layer widths of policy and baseline"""
    activation: Literal["tanh", "relu"] = "tanh"
    """hidden activation"""
    factored_actions: bool = False
    """where each action is a tuple of choices (simple_reference's move and word, env.action_factors), one
    categorical per choice, their logits summed into the joint action's (nets.Actor); off: one logit per action"""
    # --- policy mapping: --share-params, --agent-groups, --train-groups, --load-group (common.groups.GroupArgs)

    @property
    def batch_size(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_size)  # rounded up: at least total_timesteps


def validate(args: Args) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "eval_episodes", "eval_num_envs", "total_timesteps"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.bootstrap_cut and not args.baseline:
        raise ConfigError("--bootstrap-cut completes cut episodes with the learned baseline, so it needs "
                          "--baseline; without one, make --num-steps a multiple of the episode length")
    check_group_args(args)  # --share-params, --load-group (common/groups.py)


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device):
    """Decentralised policy on local obs (an image, obs_shape (H, W, C), through a small CNN:
    nets.encoder_for); with --baseline, a decentralised baseline V(o^i) (else None)."""
    action_size = env.n_actions if env.discrete else env.action_dim
    sets = param_layout(args, env)  # True (all), False (none) or every agent's group (group)
    actor = Actor(env.obs_shape, env.n_agents, env.discrete, action_size, torch.as_tensor(env.action_dim_mask),
                  sets, args.hidden_sizes, args.recurrent, args.activation, obs_sizes=env.obs_dims,
                  action_factors=factored_actions(args, env)).to(device)
    # own observation [and the time feature, a second input: see baseline_inputs]
    baseline_shape = (env.obs_shape, (1,)) if args.time_feature else env.obs_shape
    baseline_sizes = (env.obs_dims, None) if args.time_feature else env.obs_dims
    critic = Critic(baseline_shape, env.n_agents, sets, args.hidden_sizes, args.recurrent,
                    args.activation, in_sizes=baseline_sizes).to(device) if args.baseline else None
    return actor, critic


# ============================================================================ 3. ALGORITHM FUNCTIONS
def returns_to_go(rewards, terminated, truncated, last_values, gamma: float):
    """Discounted Monte Carlo return from each step to its episode's end, all tensors (T, E, N).

    G_t = r_t + gamma * (1 - end_t) * G_{t+1} with G_T = last_values (E, N), where end_t is 1
    if the agent's episode ended at step t by termination *or* by the time limit: REINFORCE
    follows the gradient of the return of the episode as it is played, so the return stops
    at a time limit too, and nothing is bootstrapped from a learned value. last_values only
    continue episodes that the rollout itself cut (V(o_T) with --bootstrap-cut, else zeros).
    """
    episode_ends = torch.maximum(terminated, truncated)
    returns = torch.zeros_like(rewards)
    running = last_values
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * (1.0 - episode_ends[t]) * running
        returns[t] = running
    return returns


def time_fraction(elapsed: torch.Tensor, T: int, N: int) -> torch.Tensor:
    """(E,) steps since each copy's episode started -> (E, N, 1), that count as a fraction of T."""
    return (elapsed / T)[:, None, None].expand(elapsed.shape[0], N, 1)


def baseline_inputs(obs: torch.Tensor, fraction: torch.Tensor, time_feature: bool):
    """The baseline's input: each agent's own observation, obs (..., N, *obs_shape), and with the
    time feature the fraction of T steps its episode has run, fraction (..., N, 1), as a second
    input (the network concatenates it after encoding the observation: an image goes through its
    CNN first, nets.MultiEncoder). Any function of the state and of time is a valid baseline (it
    does not depend on the action), so the policy gradient stays unbiased; only its variance
    changes (time-aware values: Pardo et al. 2018)."""
    return (obs, fraction) if time_feature else obs


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def group_mean(x: torch.Tensor, mask: torch.Tensor, group_onehot: torch.Tensor) -> torch.Tensor:
    """Masked mean of x (T, E, N) over each group's agents (group_onehot (N, G)), given to every agent: (N,).
    Rival teams (a predator's catch is the prey's loss) never share a mean and scale."""
    return sum(masked_mean(x, mask * g) * g for g in group_onehot.T)  # g (N,): 1 on the group's agents


def parameters(actor, critic) -> list:
    """The trained parameters: the policy's, and the baseline's when there is one."""
    return list(actor.parameters()) + (list(critic.parameters()) if critic is not None else [])


def learned(actor, critic) -> dict:
    """The networks by checkpoint key, as --load-group copies them: the policy, and the baseline if any."""
    return {"actor": actor} if critic is None else {"actor": actor, "critic": critic}


def checkpoint_payload(args, teams, actor, critic, value_norm, optimizer, global_step, iteration, rollout):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts; `rollout`
    is what the rollout carries into the next iteration (episode starts, recurrent states, steps into
    each episode); the agents' groups and parameter rows let --load-group take one group's weights out of it."""
    return {"algo": ALGO, "args": args_dict(args), "actor": actor.state_dict(),
            "critic": critic.state_dict() if critic is not None else {}, "value_norm": value_norm.state_dict(),
            "optimizer": optimizer.state_dict(), "global_step": global_step, "iteration": iteration,
            "rng": rng_state(), "rollout": rollout, **teams.payload(**learned(actor, critic))}


def acting_policy(saved: Args, env, ckpt: dict, device):
    """A saved run's policy (for --evaluate-checkpoint, and --load-group in any algorithm)."""
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
    teams = policy_map(args, envs, ALGO, device)  # bad names and unusable runs fail here
    groups, trained = teams.members, teams.trained  # {name: agents}, (N,) 1 where the agent's group learns
    actor, critic = build_networks(args, envs, device)
    value_norm = ValueNorm(groups=teams.group_of_agent).to(device)  # statistics per group: rival returns never mix
    teams.load_weights(learned(actor, critic), value_norm)  # --load-group from an IPG run: copy it
    optimizer = torch.optim.Adam(parameters(actor, critic), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        actor.load_state_dict(ckpt["actor"])
        if critic is not None:
            critic.load_state_dict(ckpt["critic"])
        value_norm.load_state_dict(ckpt["value_norm"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1

    obs_np, _, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were (state unused)
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, n_actions)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts: recurrent states reset there
    actor_state = actor.initial_state(E, device)  # tuple of (E, N, H), or None
    critic_state = critic.initial_state(E, device) if critic is not None else None
    elapsed = torch.zeros(E, device=device)  # (E,) steps since each copy's episode started
    if restored:  # the resumed rollout goes on mid-episode where it stopped
        starts, actor_state, critic_state, elapsed = ckpt["rollout"]
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
        # The update replays each copy's whole rollout as one sequence from these states; the
        # networks do not change in between, so it rebuilds exactly the rollout's states.
        first_actor_state, first_critic_state = actor_state, critic_state
        for step in range(T):
            global_step += E
            extras = {"episode_starts": starts, "time_fraction": time_fraction(elapsed, T, N)}  # (E, N, 1)
            if mask is not None:
                extras["action_masks"] = mask
            with torch.no_grad():
                dist, actor_state = actor(obs[None], actor_state, starts[None], None if mask is None else mask[None])
                action = teams.override(dist.sample()[0], obs, starts, mask)[None]  # (1, E, N[, act_dim]); groups
                # loaded from another algorithm's run act as that run does
                logprob = dist.log_prob(action)  # (1, E, N)
                value = None  # the baseline V(o_t, tau_t), (1, E, N)
                if critic is not None:
                    inputs = baseline_inputs(obs[None], extras["time_fraction"][None], args.time_feature)
                    value, critic_state = critic(inputs, critic_state, starts[None])
            result = envs.step(action[0])  # a torch env keeps it on the device
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action[0], log_probs=logprob[0], values=None if value is None else value[0],
                rewards=torch.as_tensor(result.reward, device=device),
                next_obs=torch.as_tensor(result.final_obs, device=device),
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended, **extras)
            obs = torch.as_tensor(result.obs, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended
            elapsed = (elapsed + 1.0) * (1.0 - ended[:, 0])
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        # Rollouts must hold whole episodes (Monte Carlo returns), unless --bootstrap-cut says how to finish them.
        cut = 1.0 - starts  # (E, N): 1 where the last step did not end the copy's episode
        if cut.any() and not args.bootstrap_cut:
            raise ConfigError(f"rollout {iteration} ended inside an episode in {int(cut[:, 0].sum())} of {E} env "
                              f"copies: IPG's returns are Monte Carlo, so --num-steps ({T}) must be a multiple of "
                              "the episode length (mpe2: max_cycles, 25 by default) and every episode must have "
                              "that length; or pass --bootstrap-cut to finish cut episodes with the baseline")
        last_value = torch.zeros(1, E, N, device=device)
        if args.bootstrap_cut:
            with torch.no_grad():  # V(o_T): continues the return of an episode that the rollout cut
                inputs = baseline_inputs(obs[None], time_fraction(elapsed, T, N)[None], args.time_feature)
                last_value, _ = critic(inputs, critic_state, starts[None])  # (1, E, N)
                last_value = value_norm.denormalize(last_value) if args.value_norm else last_value
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        # Fixed groups (not in --train-groups) act but take no part in any loss or statistic: their zero loss
        # leaves their weights exactly as they were.
        learn = b["alive"] * trained  # (T, E, N) live steps of agents whose group learns
        with torch.no_grad():
            returns = returns_to_go(b["rewards"], b["terminated"], b["truncated"], last_value[0],
                                    args.gamma)  # (T, E, N)
            weights = returns  # what multiplies grad log pi: G_t, or G_t - V(o_t) with a baseline
            if critic is not None:
                values = value_norm.denormalize(b["values"]) if args.value_norm else b["values"]
                weights = returns - values  # lower variance, same expected gradient (V ignores the action)
                if args.value_norm:
                    value_norm.update(returns, learn)
                targets = value_norm.normalize(returns) if args.value_norm else returns
            if args.norm_adv:
                w_mean = group_mean(weights, learn, teams.onehot)  # (N,) each group's mean over the rollout
                w_std = group_mean((weights - w_mean) ** 2, learn, teams.onehot).sqrt()
                weights = (weights - w_mean) / (w_std + 1e-8)  # normalised within each group

# ============================================================================ 7. UPDATE
        # One gradient step on the whole rollout: every copy's T steps as one sequence, (T, E, N, ...).
        dist, _ = actor(b["obs"], first_actor_state, b["episode_starts"], b.get("action_masks"))
        new_logprob, entropy = dist.log_prob(b["actions"]), dist.entropy()  # (T, E, N)

        # REINFORCE with returns-to-go (Williams 1992; Sutton and Barto 2018, eq. 13.11)
        pg_loss = -masked_mean(weights * new_logprob, learn)
        entropy_loss = masked_mean(entropy, learn)
        loss = pg_loss - args.ent_coef * entropy_loss
        if critic is not None:  # the baseline regresses on the returns-to-go
            inputs = baseline_inputs(b["obs"], b["time_fraction"], args.time_feature)
            new_value, _ = critic(inputs, first_critic_state, b["episode_starts"])  # (T, E, N)
            v_loss = 0.5 * masked_mean((new_value - targets) ** 2, learn)
            loss = loss + args.vf_coef * v_loss

        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters(actor, critic), args.max_grad_norm)
        optimizer.step()
        stats = dict(policy_loss=pg_loss.item(), entropy=entropy_loss.item(), grad_norm=grad_norm.item())
        if critic is not None:
            stats = dict(stats, value_loss=v_loss.item(),
                         explained_variance=explained_variance(values[learn.bool()], returns[learn.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(actor), global_step, groups)  # greedy, every --eval-every
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]}, groups=groups,
                               console={"value_loss": stats.get("value_loss"), "entropy": stats["entropy"]})
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, actor, critic, value_norm, optimizer, global_step, iteration,
                (starts, actor_state, critic_state, elapsed)))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(actor), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, actor, critic, value_norm, optimizer, global_step, args.num_iterations,
        (starts, actor_state, critic_state, elapsed)))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
