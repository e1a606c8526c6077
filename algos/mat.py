"""MAT: the Multi-Agent Transformer (Wen et al. 2022, "Multi-Agent Reinforcement Learning is a Sequence
Modeling Problem", NeurIPS, arXiv:2205.14953).

The agents of one step are a sequence. An encoder reads every agent's observation (self-attention
over the agents) and gives each a representation and a value V(o)_i; a decoder picks the agents'
actions one after another, each conditioned on the actions already chosen, so the joint policy is
pi(a_1 | o) pi(a_2 | o, a_1) ... (the multi-agent advantage decomposition the paper builds on).
Trained with PPO's clipped objective, one ratio per agent. `--decoder dec` is MAT-Dec: each agent
acts from its own observation, the encoder is a centralised critic. Run:

    python algos/mat.py --env simple_spread
"""
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Tuple

import numpy as np
import torch

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, check_args, run_cli
from common.groups import GroupArgs, agent_names, assign_groups, check_group_args, parse_pairs, policy_map, select_groups
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import make_env, parse_env_kwargs
from nets import ValueNorm, explained_variance
from nets.transformer import MultiAgentTransformer


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):  # bases last to first: --help lists RunArgs' fields first
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 10_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""
    eval_policy: Literal["greedy", "sampled"] = "greedy"
    """how evaluation acts: "greedy" (every agent's most likely action given the earlier agents' choices, as the
    authors evaluate) or "sampled" (the agents drawn in order)"""

    # --- env
    env: str = "simple_spread"
    """registry name (python -c 'import envs; print(envs.known_envs())')"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. N=5 max_cycles=50 continuous_actions=true"""
    num_envs: int = 256
    """E, env copies stepped together in the rollout"""

    # --- algorithm
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps)"""
    learning_rate: float = 2e-3
    """Adam learning rate of the transformer (encoder and decoder: one optimiser, as the authors'; 2e-3 as MAPPO's
    here: best of 1e-3, 2e-3, 3e-3 on simple_spread within 2M, docs/algorithms/mat.md)"""
    anneal_lr: bool = True
    """decay the learning rate: linearly to zero over total_timesteps, or as set by --lr-decay-steps"""
    lr_decay_steps: int = 0
    """0: the linear decay over the run; D > 0: lr / (1 + env_steps / D), the same at every step whatever the run's length"""
    gamma: float = 0.95
    """discount factor (0.95: a horizon near MPE's 25-step episodes, as MAPPO's default here)"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    update_epochs: int = 3
    """passes over each rollout in the update"""
    num_minibatches: int = 8
    """minibatches per epoch; a minibatch holds whole env steps (every agent of a step: the sequence)"""
    clip_coef: float = 0.2
    """PPO ratio clip (each agent's ratio pi(a_i | o, a_1..a_{i-1}) / pi_old)"""
    clip_vloss: bool = True
    """clip the value prediction around the rollout's prediction (same coefficient)"""
    ent_coef: float = 0.04
    """entropy bonus coefficient (each agent's conditional entropy, mean over agents; 0.04: at MAPPO's 0.01 the
    decoder's entropy falls faster than MAPPO's and simple_spread stalls near -30 at 2M, docs/algorithms/mat.md)"""
    ent_coef_final: Optional[float] = None
    """None: --ent-coef throughout the run; a number: the bonus goes linearly from --ent-coef to this over
    --total-timesteps (explore early, sharpen late)"""
    vf_coef: float = 1.0
    """value-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip"""
    value_norm: bool = True
    """normalise value targets with running statistics (per group), as MAPPO's ValueNorm"""
    decoder: Literal["mat", "dec"] = "mat"
    """"mat": the auto-regressive decoder (agent i conditioned on agents 0..i-1's actions); "dec": MAT-Dec, each
    agent's action from its own observation alone (decentralised actor, one MLP for all agents), values from the
    encoder as in MAT"""
    n_block: int = 1
    """transformer blocks in the encoder and in the decoder (the authors' MPE setting: 1)"""
    n_embd: int = 64
    """embedding width of every token (the authors' MPE setting: 64)"""
    n_head: int = 1
    """attention heads (must divide --n-embd; the authors' setting: 1)"""
    obs_layernorm: bool = False
    """a LayerNorm over each agent's raw observation features before the embedding (the authors'); off: it divides
    away the observation's scale (how far the landmarks are), and on simple_spread the values explained 0.65 of the
    returns' variance with it against 0.81 without, docs/algorithms/mat.md"""
    recurrent: Literal["none", "gru", "lstm"] = "none"
    """only "none": MAT is feed-forward in time (the sequence is the agents of one step); listed so that the
    on-policy files' common flag gets a reason, not an unknown-flag error"""
    # --- also the policy mapping: --share-params, --agent-groups, --train-groups, --load-group (common.groups)

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
    for name in ("n_block", "n_embd", "n_head"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.n_embd % args.n_head:
        raise ConfigError(f"--n-head {args.n_head} must divide --n-embd {args.n_embd} (each head reads a slice)")
    if args.recurrent != "none":
        raise ConfigError(f"--recurrent {args.recurrent}: MAT has no recurrent core (its sequence is the agents of "
                          "one step, and it keeps nothing from step to step); accepted: none. A recurrent "
                          "policy: algos/mappo.py --recurrent gru")
    if args.ent_coef_final is not None and args.ent_coef_final < 0:
        raise ConfigError(f"--ent-coef-final must be at least 0 (or None for a constant --ent-coef), got "
                          f"{args.ent_coef_final}")
    if not 1 <= args.num_minibatches <= args.batch_size:
        raise ConfigError(f"--num-minibatches must be between 1 and {args.batch_size} (the env steps per rollout)")
    check_group_args(args)  # --share-params, --load-group (common/groups.py)
    if args.share_params == "none":
        raise ConfigError("--share-params none: MAT's one transformer serves every agent by design (the encoder "
                          "attends over all agents, the decoder orders them in one sequence), so agents cannot "
                          "have their own weights; accepted: all, or group where the agents this run trains form "
                          "one group. Separate networks per agent: algos/mappo.py --share-params none")


def check_groups(args: Args, envs) -> None:
    """What the shared transformer can hold, before a run folder is made. Loaded groups act as their runs
    (from any algorithm, MAT too); every other group is MAT's own and must learn, in one group under
    --share-params group."""
    if len(envs.obs_shape) > 1:
        raise ConfigError(f"{args.env} has image observations {envs.obs_shape}; MAT embeds flat observation "
                          "vectors: use algos/mappo.py (a CNN encoder) for image observations")
    agents = agent_names(envs)
    names, group_of_agent = assign_groups(agents, args.agent_groups, args.env)
    loaded = list(parse_pairs(args.load_group, "--load-group", "adversary=runs/<run_name>"))
    select_groups(loaded, "--load-group", names, agents, group_of_agent)  # unknown names fail, listing the groups
    select_groups(args.train_groups, "--train-groups", names, agents, group_of_agent)
    own = [g for g in names if g not in loaded]
    fixed = [g for g in own if args.train_groups and g not in args.train_groups]
    if fixed:
        raise ConfigError(f"--train-groups leaves {fixed} fixed, but MAT's one transformer acts for every agent "
                          "that is not loaded from a run, so its weights cannot stay fixed for some agents while "
                          "they learn for others; a fixed group must act as a run: --load-group GROUP=RUN (a run "
                          "of any algorithm, MAT included)")
    if args.share_params == "group" and len(own) > 1:
        raise ConfigError(f"--share-params group with groups {own} all trained here: MAT has one transformer for "
                          "all the agents it acts for (one per group would be separate MATs); use --share-params all "
                          "(each group's values and advantages stay apart), or load all groups but one from runs "
                          "(--load-group)")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, device) -> MultiAgentTransformer:
    """One transformer for all agents: encoder (values) and decoder (actions). Agents with fewer
    actions or observations than the largest are padded by the env; their padded actions are masked."""
    action_size = env.n_actions if env.discrete else env.action_dim
    return MultiAgentTransformer(env.obs_dim, env.n_agents, env.discrete, action_size,
                                 torch.as_tensor(env.action_dim_mask), args.n_block, args.n_embd, args.n_head,
                                 args.decoder, args.obs_layernorm).to(device)


# ============================================================================ 3. ALGORITHM FUNCTIONS
def learning_rate_at(args: Args, iteration: int, global_step: int) -> float:
    """The learning rate of this iteration: a linear decay over the run (CleanRL's) depends on
    --total-timesteps, so a 2M-step point of a 10M-step run differs from a 2M-step run; the
    inverse-time decay lr / (1 + t / D) gives every run the same rate at env step t."""
    if args.lr_decay_steps > 0:
        return args.learning_rate / (1.0 + global_step / args.lr_decay_steps)
    return args.learning_rate * (1.0 - (iteration - 1) / args.num_iterations)


def entropy_coef_at(args: Args, global_step: int) -> float:
    """The entropy bonus at this env step: --ent-coef, or its linear path to --ent-coef-final over the run."""
    if args.ent_coef_final is None:
        return args.ent_coef
    done = min(global_step / args.total_timesteps, 1.0)
    return args.ent_coef + (args.ent_coef_final - args.ent_coef) * done


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


def checkpoint_payload(args, teams, mat, value_norm, optimizer, shuffle_gen, global_step, iteration, starts):
    """Everything a resumed run needs, in types that torch.load(weights_only=True) accepts. MAT keeps
    nothing between steps; the rollout carries only the episode starts into the next iteration (what
    groups loaded from recurrent runs reset on)."""
    return {"algo": ALGO, "args": args_dict(args), "transformer": mat.state_dict(),
            "value_norm": value_norm.state_dict(), "optimizer": optimizer.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(),
            "rollout": starts, **teams.payload(transformer=mat)}


def acting_policy(saved: Args, env, ckpt: dict, device) -> MultiAgentTransformer:
    """A saved run's transformer (for --evaluate-checkpoint, and --load-group in any algorithm): its
    forward gives the `nets.Actor` interface, decoding the agents in order."""
    mat = build_networks(saved, env, device)
    mat.load_state_dict(ckpt["transformer"])
    return mat


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
    check_groups(args, envs)
    # Groups of agents, which learn, which act as other runs. copy=False: a group loaded from a MAT run acts as
    # that run too (one transformer holds every agent's policy, so no group's part of it can be copied out).
    teams = policy_map(args, envs, ALGO, device, copy=False)
    groups, group_onehot, trained = teams.members, teams.onehot, teams.trained  # {name: agents}, (N, G), (N,)
    # The agents MAT does not train are exactly the loaded groups' (check_groups): their actions are given.
    loaded = (trained == 0).tolist()  # (N,) bools
    mat = build_networks(args, envs, device)
    # Statistics per group: rival returns (a predator's +10 is the prey's -10) never mix.
    value_norm = ValueNorm(groups=teams.group_of_agent).to(device)
    optimizer = torch.optim.Adam(mat.parameters(), lr=args.learning_rate, eps=1e-5)
    buffer = MultiAgentRolloutBuffer(N)  # this iteration's rollout: batched, never replayed
    # Minibatch shuffles draw from their own seeded generator (same seed, same losses).
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        mat.load_state_dict(ckpt["transformer"])
        value_norm.load_state_dict(ckpt["value_norm"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])

    obs_np, _, mask_np, restored = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, n_actions)
    starts = torch.ones(E, N, device=device)  # 1 where an episode starts (what loaded recurrent runs reset on)
    if restored:  # the resumed rollout goes on mid-episode where it stopped
        starts = ckpt["rollout"]
    blank = torch.zeros((E, N) if envs.discrete else (E, N, envs.action_dim), device=device,
                        dtype=torch.long if envs.discrete else torch.float32)  # what teams.override fills in
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=(mat,))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = learning_rate_at(args, iteration, global_step)

# ============================================================================ 5. ROLLOUT
        t_rollout = time.time()
        buffer.reset_current_episode()
        for step in range(T):
            global_step += E
            extras = {} if mask is None else {"action_masks": mask}
            with torch.no_grad():
                # Groups loaded from another run act first, as that run does; the decoder then conditions the
                # agents after them on those actions, so the stored log-probs are the ones training recomputes.
                given = (teams.override(blank, obs, starts, mask), loaded) if teams.foreign else None
                action, logprob, value = mat.act(obs, mask, given=given)  # (E, N[, act_dim]), (E, N), (E, N)
            result = envs.step(action)  # a torch env keeps it on the device
            next_obs = torch.as_tensor(result.obs, device=device)
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final obs) where an episode ended: what a truncation bootstraps from
                with torch.no_grad():
                    final_value = mat.encode(final_obs)[0]  # (E, N)
            ended = torch.as_tensor(result.done, device=device).float()[:, None].expand(E, N)  # (E, N)
            buffer.add_transition(
                obs=obs, actions=action, log_probs=logprob, values=value,
                rewards=torch.as_tensor(result.reward, device=device), next_obs=final_obs,
                terminated=torch.as_tensor(result.terminated, device=device).float(),
                truncated=torch.as_tensor(result.truncated, device=device).float(),
                alive=torch.as_tensor(result.alive, device=device).float(), episode_ends=ended,
                final_values=final_value, **extras)
            obs = next_obs
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended
            train_returns.extend(result.episode_return[result.done].sum(-1).tolist())
            agent_returns.extend(result.episode_return[result.done].tolist())  # per agent: (episodes, N)
            train_lengths.extend(result.episode_length[result.done].tolist())
        with torch.no_grad():  # V(o_T): bootstraps the last step wherever its episode goes on
            last_value = mat.encode(obs)[0]  # (E, N)
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, N, ...)
        with torch.no_grad():
            # V(o_{t+1}) is the next step's value while the episode goes on, and the value of the
            # final observation where it ended (the next step's value belongs to a new episode).
            next_values = torch.cat([b["values"][1:], last_value[None]], dim=0)  # (T, E, N)
            next_values = torch.where(b["episode_ends"].bool(), b["final_values"], next_values)
            values = value_norm.denormalize(b["values"]) if args.value_norm else b["values"]
            next_values = value_norm.denormalize(next_values) if args.value_norm else next_values
            advantages, returns = compute_gae(b["rewards"], values, next_values, b["terminated"], b["truncated"],
                                              args.gamma, args.gae_lambda)  # (T, E, N): one per agent, as MAT's
            # Loaded groups act but take no part in any loss or statistic.
            learn = b["alive"] * trained  # (T, E, N) live steps of the agents MAT trains
            adv_mean = group_mean(advantages, learn, group_onehot)  # (N,) each group's mean over the rollout
            adv_std = group_mean((advantages - adv_mean) ** 2, learn, group_onehot).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8) * trained  # normalised within each group
            if args.value_norm:
                value_norm.update(returns, learn)
            targets = value_norm.normalize(returns) if args.value_norm else returns
        # A minibatch holds whole env steps: the transformer needs every agent of a step (its sequence).
        data = {k: v.flatten(0, 1) for k, v in b.items()}  # (T * E, N, ...)
        data.update(advantages=advantages.flatten(0, 1), targets=targets.flatten(0, 1))
        S = T * E

# ============================================================================ 7. UPDATE
        clipfracs = []
        ent_coef = entropy_coef_at(args, global_step)
        for epoch in range(args.update_epochs):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v[mb] for k, v in data.items()}  # (B, N, ...)
                # One parallel pass: agent i's log-prob from the stored actions of agents 0..i-1 (shifted input,
                # causal masks), the same distribution it was drawn from in the rollout.
                new_value, dist = mat.evaluate(d["obs"], d["actions"], d.get("action_masks"))  # (B, N)
                new_logprob, entropy = dist.log_prob(d["actions"]), dist.entropy()  # (B, N)
                logratio = new_logprob - d["log_probs"]
                ratio = logratio.exp()  # one ratio per agent, pi(a_i | o, a_1..a_{i-1}) / pi_old(...)
                alive_mb = d["alive"] * trained  # dead agents and loaded groups out of every loss
                with torch.no_grad():
                    approx_kl = masked_mean((ratio - 1) - logratio, alive_mb)  # Schulman's k3 estimator
                    clipfracs.append(masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), alive_mb).item())

                # Clipped surrogate objective (Schulman et al. 2017, eq. 7), per agent with its own advantage
                adv = d["advantages"]
                clipped_ratio = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = masked_mean(torch.max(-adv * ratio, -adv * clipped_ratio), alive_mb)
                # Value loss on the encoder's per-agent values, clipped around the rollout's (normalised units)
                v_loss_unclipped = (new_value - d["targets"]) ** 2
                if args.clip_vloss:
                    old_value = d["values"]
                    v_clipped = old_value + (new_value - old_value).clamp(-args.clip_coef, args.clip_coef)
                    v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - d["targets"]) ** 2), alive_mb)
                else:
                    v_loss = 0.5 * masked_mean(v_loss_unclipped, alive_mb)
                entropy_loss = masked_mean(entropy, alive_mb)
                loss = pg_loss - ent_coef * entropy_loss + args.vf_coef * v_loss

                optimizer.zero_grad()
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(mat.parameters(), args.max_grad_norm)
                optimizer.step()
        stats = dict(policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_loss.item(),
                     approx_kl=approx_kl.item(), clipfrac=float(np.mean(clipfracs)), grad_norm=grad_norm.item(),
                     explained_variance=explained_variance(values[learn.bool()], returns[learn.bool()]))
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, teams.policy(mat), global_step, groups)  # greedy, every --eval-every env steps
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"learning_rate": optimizer.param_groups[0]["lr"]},
                               console={"value_loss": stats["value_loss"], "entropy": stats["entropy"]}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, mat, value_norm, optimizer, shuffle_gen, global_step, iteration, starts))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, teams.policy(mat), global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, mat, value_norm, optimizer, shuffle_gen, global_step, args.num_iterations, starts))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
