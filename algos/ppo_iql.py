"""PPO and IQL in one environment: one group of agents learned by PPO, another by independent
Q-learning, both acting in the same env copies (the "independent algorithms per policy" case of
multi-agent frameworks: RLlib's two-trainers example, MARLlib's policy mapping).

Agents are put in groups by their name prefix (common/groups.py; on simple_tag `adversary` are
the predators, `agent` the prey). One sampling loop steps every copy with every agent's action:
the PPO group samples from its actor, the IQL group acts epsilon-greedily on a copy of its
Q-network that the IQL learner pushes its weights into every `--push-every` iterations (the
seed's `ppo.update_weight('dqn_policy', dqn.get_weight('dqn_policy'))`). Each group's data is
then postprocessed by its own rule (GAE for PPO, one-step double-Q targets from a replay for
IQL) and updated by its own algorithm only; `--train-groups` (policies_to_train) picks which
learn. `--shared-encoder trained|frozen` gives both policies one observation encoder, the same
object under the names `encoder` (PPO) and `embedder` (IQL): nets/shared.py. Run:

    python algos/ppo_iql.py --env torch:simple_tag --ppo-group adversary --iql-group agent
"""
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Tuple

import numpy as np
import torch
from torch import nn

from buffers import MultiAgentRolloutBuffer
from common.cli import ConfigError, RunArgs, run_cli
from common.groups import GroupArgs, agent_names, check_group_args, make_teams, policy_map
from common.run_utils import (RunRecorder, args_dict, evaluate_checkpoint, pick_device, resume_envs, rng_state,
                              seed_everything, start_or_resume)
from envs import discrete_hint, make_env, parse_env_kwargs
from nets import (MLP, Actor, Critic, EncodedPolicy, QPolicy, ValueNorm, check_policy_output, explained_variance,
                  shared_between, trainable_parameters)


ALGO = Path(__file__).stem  # runs, checkpoints and summary.json carry the file's name: a copy is a new method


# ============================================================================ 1. ARGS
@dataclass
class Args(GroupArgs, RunArgs):
    # --- experiment (seed, device, run folder, evaluation, checkpoints, resume, preset: common.cli.RunArgs)
    total_timesteps: int = 1_000_000
    """training length in env steps, summed over env copies (one env step = all agents act once)"""

    # --- env
    env: str = "torch:simple_tag"
    """registry name; discrete actions (the IQL group picks argmax actions)"""
    env_kwargs: Tuple[str, ...] = ()
    """scenario arguments as KEY=VALUE, e.g. num_good=2 max_cycles=25"""
    num_envs: int = 64
    """E, env copies stepped together in the rollout"""
    num_steps: int = 25
    """T, steps per env copy in each rollout (one iteration = T * E env steps)"""

    # --- policies: which group each algorithm learns
    ppo_group: Optional[str] = None
    """the group (agent-name prefix, or a name given by --agent-groups) whose policy PPO learns (default: the env's
    first group, e.g. simple_tag's adversary)"""
    iql_group: Optional[str] = None
    """the group whose policy IQL learns (default: the env's second group); every agent must be in one of the two"""
    share_params: Literal["all", "group", "none"] = "group"
    """group only: each learner has one network for its group (PPO's actor and critic, IQL's Q-network). Also
    --agent-groups, --train-groups (policies_to_train; default: both) and --load-group: a loaded group acts as that
    run (of any algorithm, this one included) and stays fixed (common.groups.GroupArgs)"""
    push_every: int = 1
    """every this many iterations the IQL learner's Q-network is copied into the copy that acts in the rollout (1:
    every iteration, the two-trainers loop; 0: never, the group keeps acting with its initial weights)"""
    shared_encoder: Literal["none", "trained", "frozen"] = "none"
    """one observation encoder held by both policies (PPO's `encoder`, IQL's `embedder`): trained by both losses,
    frozen (its initial random features), or none (each policy reads the observation itself)"""
    encoder_dim: int = 64
    """width of the shared encoder's output (one linear layer and a ReLU)"""
    hidden_dim: int = 64
    """width of the hidden layers of PPO's actor and critic (two) and of the Q-network (one)"""

    # --- PPO (its group)
    learning_rate: float = 1e-3
    """Adam learning rate of PPO's actor and critic"""
    gamma: float = 0.95
    """discount factor of both algorithms"""
    gae_lambda: float = 0.95
    """lambda of generalised advantage estimation"""
    update_epochs: int = 4
    """passes over each rollout in PPO's update"""
    num_minibatches: int = 4
    """PPO minibatches per epoch (split over the T * E env steps of the rollout)"""
    clip_coef: float = 0.2
    """PPO ratio clip"""
    ent_coef: float = 0.01
    """entropy bonus coefficient"""
    vf_coef: float = 1.0
    """value-loss coefficient"""
    max_grad_norm: float = 10.0
    """global gradient-norm clip of both learners"""
    ppo_critic: Literal["state", "local"] = "state"
    """PPO's critic input: the global state (a centralised critic, MAPPO's) or each agent's own observation (IPPO's)"""

    # --- IQL (its group)
    q_learning_rate: float = 5e-4
    """Adam learning rate of the Q-network"""
    buffer_size: int = 200_000
    """replay capacity in env steps of the IQL group's transitions (stored T * E at a time; oldest dropped)"""
    batch_size: int = 32
    """rollout sequences of T steps drawn per Q-learning step (32 x 25 transitions)"""
    updates_per_iteration: int = 8
    """Q-learning gradient steps after every rollout"""
    tau: float = 0.01
    """the target network moves tau of the way to the online one after every Q-learning step"""
    eps_start: float = 1.0
    """exploration of the IQL group: probability of a uniform random action at the start"""
    eps_finish: float = 0.05
    """... at the end of the anneal"""
    eps_anneal_steps: int = 200_000
    """env steps over which epsilon falls linearly from eps_start to eps_finish"""
    standardise_rewards: bool = True
    """divide the IQL group's rewards by their running standard deviation"""

    @property
    def batch_steps(self) -> int:
        """env steps per iteration"""
        return self.num_steps * self.num_envs

    @property
    def num_iterations(self) -> int:
        return -(-self.total_timesteps // self.batch_steps)  # rounded up: at least total_timesteps


def validate(args: Args, env=None) -> None:
    """Reject option combinations that cannot work, saying what is accepted."""
    for name in ("num_envs", "num_steps", "update_epochs", "batch_size", "buffer_size", "updates_per_iteration",
                 "eval_episodes", "eval_num_envs", "total_timesteps", "encoder_dim", "hidden_dim"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not 1 <= args.num_minibatches <= args.batch_steps:
        raise ConfigError(f"--num-minibatches must be between 1 and {args.batch_steps} (env steps per rollout)")
    if args.push_every < 0:
        raise ConfigError(f"--push-every must be 0 (never) or positive, got {args.push_every}")
    if not 0.0 < args.tau <= 1.0:
        raise ConfigError(f"--tau must be in (0, 1], got {args.tau}")
    check_group_args(args)
    if args.share_params != "group":
        raise ConfigError(f"{ALGO} learns one network per group (PPO's for one, IQL's for the other): --share-params "
                          f"group only, got {args.share_params}")
    if args.ppo_group is not None and args.ppo_group == args.iql_group:
        raise ConfigError(f"--ppo-group and --iql-group must differ, both are {args.ppo_group!r}")
    if args.shared_encoder == "trained" and args.train_groups and len(set(args.train_groups)) < 2:
        raise ConfigError("--shared-encoder trained moves with the learning group's loss, so the other group would "
                          "not stay fixed: use --shared-encoder frozen (or none) with --train-groups")
    if env is not None:
        if not env.discrete:
            raise ConfigError(f"{ALGO} needs discrete actions (the IQL group picks argmax actions); {args.env} has "
                              f"continuous ones ({discrete_hint(args.env)})")
        if args.shared_encoder != "none" and len(env.obs_shape) != 1:
            raise ConfigError(f"--shared-encoder takes flat observations; {args.env} gives {env.obs_shape}")


# ============================================================================ 2. NETWORKS
def build_networks(args: Args, env, n_ppo: int, n_iql: int, ppo_mask, iql_mask, device):
    """PPO's actor and critic for its n_ppo agents, the Q-network for the n_iql IQL agents (each
    group one set of weights, with an agent-id one-hot), and the optional shared encoder.

    With --shared-encoder, one MLP layer obs -> encoder_dim is put into both policies under two
    names, PPO's `encoder` and IQL's `embedder` (nets.shared_between), so both hold the same
    parameter objects. Each policy's output is checked against its loss at once: PPO needs an
    action distribution, IQL Q-values (a mismatch fails here, naming the output expected).
    """
    obs_shape, A = env.obs_shape, env.n_actions
    in_shape = (args.encoder_dim,) if args.shared_encoder != "none" else obs_shape
    actor = Actor(in_shape, n_ppo, True, A, ppo_mask, True, (args.hidden_dim, args.hidden_dim))
    q_net = QPolicy(in_shape, A, n_iql, True, args.hidden_dim, recurrent="none", last_action_input=False)
    critic_in = env.state_shape if args.ppo_critic == "state" else obs_shape
    critic = Critic(critic_in, n_ppo, True, (args.hidden_dim, args.hidden_dim))
    if args.shared_encoder != "none":
        actor, q_net = EncodedPolicy(actor, "encoder"), EncodedPolicy(q_net, "embedder")
        encoder = MLP(obs_shape[0], (args.encoder_dim,), activation="relu")  # (..., N, obs_dim) -> (..., N, enc)
        shared_between(encoder, [(actor, "encoder"), (q_net, "embedder")], train=args.shared_encoder == "trained")
    actor, q_net, critic = actor.to(device), q_net.to(device), critic.to(device)
    try:
        check_policy_output(actor, obs_shape, n_ppo, "distribution", "PPO")
        check_policy_output(q_net, obs_shape, n_iql, "q_values", "IQL")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return actor, critic, q_net


def pick_agents(x: Optional[torch.Tensor], idx: torch.Tensor) -> Optional[torch.Tensor]:
    """(L, B, N, ...) -> (L, B, len(idx), ...): one group's agents (None stays None)."""
    return None if x is None else x.index_select(2, idx)


class JointAction:
    """Every agent's action (L, B, N) from its group's policy: the PPO group's sample or mode, the
    IQL group's argmax; the agents in `random_idx` act uniformly at random instead."""

    def __init__(self, dist, greedy, ppo_idx, iql_idx, random_idx, mask: Optional[torch.Tensor]):
        self.dist, self.greedy, self.mask = dist, greedy, mask
        self.ppo_idx, self.iql_idx, self.random_idx = ppo_idx, iql_idx, random_idx

    def _join(self, ppo_action: torch.Tensor) -> torch.Tensor:
        q = self.greedy.q  # (L, B, Nq, A)
        shape = q.shape[:2] + (len(self.ppo_idx) + len(self.iql_idx),)
        action = torch.zeros(shape, dtype=torch.long, device=q.device)  # (L, B, N)
        action[..., self.ppo_idx] = ppo_action.long()
        action[..., self.iql_idx] = self.greedy.mode()
        if len(self.random_idx):  # a uniformly random opponent: every available action equally likely
            random = epsilon_greedy(torch.zeros(*shape, q.shape[-1], device=q.device), self.mask, 1.0)  # (L, B, N)
            action[..., self.random_idx] = random[..., self.random_idx]
        return action

    def mode(self) -> torch.Tensor:
        return self._join(self.dist.mode())

    def sample(self) -> torch.Tensor:
        return self._join(self.dist.sample())


class JointPolicy(nn.Module):
    """Both groups' policies as one `nets.Actor`-like module over all N agents: what evaluation
    (`common.run_utils.evaluate`) plays. random_groups: "ppo" and/or "iql", the sides replaced
    by uniformly random actions (how each side is measured against a random opponent)."""

    def __init__(self, actor, q_net, ppo_idx, iql_idx, n_actions: int, random_groups: Tuple[str, ...] = ()):
        super().__init__()
        self.actor, self.q_net, self.n_actions = actor, q_net, n_actions
        random_idx = (list(ppo_idx) if "ppo" in random_groups else []) + (list(iql_idx) if "iql" in random_groups else [])
        self.register_buffer("ppo_idx", torch.as_tensor(list(ppo_idx)), persistent=False)
        self.register_buffer("iql_idx", torch.as_tensor(list(iql_idx)), persistent=False)
        self.register_buffer("random_idx", torch.as_tensor(random_idx, dtype=torch.long), persistent=False)

    def initial_state(self, batch: int, device=None):
        return None

    def forward(self, obs, state=None, starts=None, action_mask=None):
        dist, _ = self.actor(pick_agents(obs, self.ppo_idx), None, None, pick_agents(action_mask, self.ppo_idx))
        greedy, _ = self.q_net(pick_agents(obs, self.iql_idx), None, None, pick_agents(action_mask, self.iql_idx))
        return JointAction(dist, greedy, self.ppo_idx, self.iql_idx, self.random_idx, action_mask), None


# ============================================================================ 3. ALGORITHM FUNCTIONS
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


def epsilon_greedy(q: torch.Tensor, mask: Optional[torch.Tensor], epsilon: float) -> torch.Tensor:
    """q (..., A) -> actions (...), e.g. (E, N, A) -> (E, N): with probability epsilon a uniform random available
    action, otherwise the best available one. Unavailable actions are never chosen either way."""
    available = torch.ones_like(q, dtype=torch.bool) if mask is None else mask.bool()
    greedy = q.masked_fill(~available, float("-inf")).argmax(-1)
    random = torch.rand(q.shape, device=q.device).masked_fill(~available, -1.0).argmax(-1)  # uniform over available
    explore = torch.rand(q.shape[:-1], device=q.device) < epsilon
    return torch.where(explore, random, greedy)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the entries where mask is 1: dead agents' and padded steps (or unavailable actions) do not count."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau online (tau = 1: hard copy)."""
    pairs = list(zip(target.parameters(), online.parameters()))
    if pairs:  # (VDN's sum has none)
        with torch.no_grad():  # one multi-tensor call, not a Python loop over the tensors
            torch._foreach_lerp_([t for t, _ in pairs], [o for _, o in pairs], tau)


def group_indices(args: Args, teams) -> Tuple[list, list]:
    """The agent indices of the PPO and the IQL group (by default the env's first and second group);
    every agent must be in one of them."""
    members = teams.members
    listing = "; ".join(f"{g}: {', '.join(teams.agents[i] for i in idx)}" for g, idx in members.items())
    names = list(members)
    ppo_group = args.ppo_group or (names[0] if args.iql_group != names[0] else names[-1])
    iql_group = args.iql_group or next((g for g in names if g != ppo_group), ppo_group)
    if ppo_group == iql_group:
        raise ConfigError(f"{args.env} has one group of agents ({listing}); {ALGO} needs two: split them with "
                          f"--agent-groups (e.g. {teams.agents[0]}=lead)")
    for flag, group in (("--ppo-group", ppo_group), ("--iql-group", iql_group)):
        if group not in members:
            raise ConfigError(f"{flag} {group!r} matches no agent of {args.env}; groups (agents): {listing}")
    others = [g for g in names if g not in (ppo_group, iql_group)]
    if others:
        raise ConfigError(f"group(s) {others} are learned by neither algorithm: put them into --ppo-group or "
                          f"--iql-group with --agent-groups (e.g. {others[0]}={ppo_group}); groups: {listing}")
    return members[ppo_group], members[iql_group]


def checkpoint_payload(args, teams, nets, optimizers, value_norm, reward_norm, replay, shuffle_gen, global_step,
                       iteration):
    """Everything a resumed run needs (the replay included), in types weights_only=True accepts."""
    return {"algo": ALGO, "args": args_dict(args), **{k: v.state_dict() for k, v in nets.items()},
            **{k: v.state_dict() for k, v in optimizers.items()}, "value_norm": value_norm.state_dict(),
            "reward_norm": reward_norm.state_dict(), "replay": replay.state_dict(), "global_step": global_step,
            "iteration": iteration, "rng": rng_state(), "shuffle_rng": shuffle_gen.get_state(),
            **teams.payload()}


def load_joint_policy(ckpt, saved: Args, env, device, random_groups: Tuple[str, ...] = ()) -> JointPolicy:
    """The JointPolicy of a checkpoint (both learners' networks), for evaluation and for --load-group in
    another algorithm's run (`acting_policy`)."""
    teams = make_teams(agent_names(env), "group", saved.agent_groups)
    ppo_idx, iql_idx = group_indices(saved, teams)
    mask = torch.as_tensor(env.action_dim_mask)
    actor, _, q_net = build_networks(saved, env, len(ppo_idx), len(iql_idx), mask[ppo_idx], mask[iql_idx], device)
    actor.load_state_dict(ckpt["actor"])
    q_net.load_state_dict(ckpt["q_net"])
    return JointPolicy(actor, q_net, ppo_idx, iql_idx, env.n_actions, random_groups).to(device)


def acting_policy(saved: Args, env, ckpt: dict, device) -> JointPolicy:
    """A saved run's two policies as one (for --evaluate-checkpoint, and --load-group in any algorithm)."""
    return load_joint_policy(ckpt, saved, env, device)


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
    E, N, T = args.num_envs, envs.n_agents, args.num_steps
    # Policy mapping: agent -> group -> the algorithm that learns it; --train-groups picks the learners, and a group
    # loaded from a run (--load-group) acts as that run instead and learns nothing.
    teams = policy_map(args, envs, ALGO, device, copy=False, by_prefix=True)
    ppo_list, iql_list = group_indices(args, teams)
    ppo_idx, iql_idx = torch.as_tensor(ppo_list, device=device), torch.as_tensor(iql_list, device=device)
    Np, Nq = len(ppo_list), len(iql_list)
    ppo_trains, iql_trains = teams.trained_list[ppo_list[0]], teams.trained_list[iql_list[0]]
    groups = teams.members  # {group: agent indices}: per-group returns, charts/team_<group>/...
    dim_mask = torch.as_tensor(envs.action_dim_mask)
    actor, critic, q_net = build_networks(args, envs, Np, Nq, dim_mask[ppo_list], dim_mask[iql_list], device)
    target_q = copy.deepcopy(q_net)  # TD targets (a shared encoder is copied too: the target lags as a whole)
    acting_q = copy.deepcopy(q_net)  # the copy that acts in the rollout; the IQL learner pushes into it
    joint = teams.policy(JointPolicy(actor, q_net, ppo_list, iql_list, envs.n_actions).to(device))  # evaluation
    # Each learner's optimiser holds its own policy's trainable parameters (each once): a trained shared
    # encoder is in both and moves with both losses; a frozen one is in neither.
    ppo_params, iql_params = trainable_parameters(actor, critic), trainable_parameters(q_net)
    ppo_optimizer = torch.optim.Adam(ppo_params, lr=args.learning_rate, eps=1e-5)
    iql_optimizer = torch.optim.Adam(iql_params, lr=args.q_learning_rate)
    value_norm = ValueNorm().to(device)  # PPO's value targets, normalised (MAPPO's ValueNorm)
    reward_norm = ValueNorm().to(device)  # running scale of the IQL group's rewards
    buffer = MultiAgentRolloutBuffer(Np)  # PPO: this iteration's rollout of its agents, never replayed
    replay = MultiAgentRolloutBuffer(Nq, capacity=max(1, args.buffer_size // args.batch_steps))  # IQL: T * E a time
    shuffle_gen = torch.Generator().manual_seed(args.seed)  # minibatch shuffles and replay draws
    nets = {"actor": actor, "critic": critic, "q_net": q_net, "target_q": target_q, "acting_q": acting_q}
    optimizers = {"ppo_optimizer": ppo_optimizer, "iql_optimizer": iql_optimizer}
    global_step, start_iteration = 0, 1
    ckpt, run_path = start_or_resume(args, ALGO, device)  # a resumed run gets its RNG states back
    if ckpt is not None:
        for key, module in {**nets, **optimizers, "value_norm": value_norm, "reward_norm": reward_norm}.items():
            module.load_state_dict(ckpt[key])
        replay.load_state_dict(ckpt["replay"])
        replay.capacity = max(1, args.buffer_size // args.batch_steps)
        global_step, start_iteration = ckpt["global_step"], ckpt["iteration"] + 1
        shuffle_gen.set_state(ckpt["shuffle_rng"])

    obs_np, state_np, mask_np, _ = resume_envs(ckpt, envs, eval_envs)  # envs.reset(), or where they were
    obs = torch.as_tensor(obs_np, device=device)  # (E, N, obs_dim)
    state = torch.as_tensor(state_np, device=device)  # (E, state_dim)
    mask = None if mask_np is None else torch.as_tensor(mask_np, device=device)  # (E, N, A)
    starts = torch.ones(E, N, device=device)  # episode starts, for a loaded run's recurrent state
    train_returns, train_lengths, agent_returns = [], [], []  # training episodes ended since the last log
    # TensorBoard, args.json, console, the evaluation and checkpoint schedules; starts the SPS clock.
    recorder = RunRecorder(args, ALGO, run_path, ckpt, device, envs=(envs, eval_envs), watch=tuple(nets.values()))

    stats = {}
    for iteration in range(start_iteration, args.num_iterations + 1):
        epsilon = max(args.eps_finish, args.eps_start - (args.eps_start - args.eps_finish)
                      * global_step / args.eps_anneal_steps)

# ============================================================================ 5. ROLLOUT
        # One loop steps every copy with both groups' actions. Each group's transitions go to its
        # own learner's storage: the PPO agents' to this iteration's rollout, the IQL agents' to the replay.
        t_rollout = time.time()
        buffer.reset_current_episode()
        replay.reset_current_episode()
        for step in range(T):
            global_step += E
            obs_p, obs_q = obs.index_select(1, ppo_idx), obs.index_select(1, iql_idx)  # (E, Np, d), (E, Nq, d)
            mask_p = None if mask is None else mask.index_select(1, ppo_idx)  # (E, Np, A)
            mask_q = None if mask is None else mask.index_select(1, iql_idx)  # (E, Nq, A)
            critic_in = state[:, None].expand(E, Np, -1) if args.ppo_critic == "state" else obs_p  # (E, Np, in)
            with torch.no_grad():
                dist, _ = actor(obs_p[None], None, None, None if mask_p is None else mask_p[None])
                action_p = dist.sample()  # (1, E, Np)
                logprob = dist.log_prob(action_p)  # (1, E, Np)
                value, _ = critic(critic_in[None])  # (1, E, Np)
                greedy, _ = acting_q(obs_q[None])  # the pushed copy acts, epsilon-greedily
                action_q = epsilon_greedy(greedy.q[0], mask_q, epsilon)  # (E, Nq)
            action = torch.zeros(E, N, dtype=torch.long, device=device)  # (E, N) every agent's action
            action[:, ppo_idx], action[:, iql_idx] = action_p[0], action_q
            action = teams.override(action, obs, starts, mask)  # a loaded group acts as its run (and learns nothing)
            result = envs.step(action)  # a torch env keeps it on the device
            final_obs = torch.as_tensor(result.final_obs, device=device)  # true s_{t+1}, before auto-reset
            reward = torch.as_tensor(result.reward, device=device)  # (E, N)
            terminated = torch.as_tensor(result.terminated, device=device).float()  # (E, N)
            truncated = torch.as_tensor(result.truncated, device=device).float()  # (E, N)
            alive = torch.as_tensor(result.alive, device=device).float()  # (E, N)
            final_value = torch.zeros_like(value)
            if result.done.any():  # V(final obs) where an episode ended: what a truncation bootstraps from
                final_state = torch.as_tensor(result.final_state, device=device)
                final_in = (final_state[:, None].expand(E, Np, -1) if args.ppo_critic == "state"
                            else final_obs.index_select(1, ppo_idx))
                with torch.no_grad():
                    final_value, _ = critic(final_in[None])  # (1, E, Np)
            ended = torch.as_tensor(result.done, device=device).float()[:, None]  # (E, 1)
            buffer.add_transition(
                obs=obs_p, actions=action_p[0], log_probs=logprob[0], values=value[0],
                rewards=reward[:, ppo_idx], next_obs=final_obs.index_select(1, ppo_idx),
                terminated=terminated[:, ppo_idx], truncated=truncated[:, ppo_idx], alive=alive[:, ppo_idx],
                episode_ends=ended.expand(E, Np), final_values=final_value[0], critic_inputs=critic_in,
                **({} if mask_p is None else {"action_masks": mask_p}))
            final_mask = result.final_action_mask if result.final_action_mask is not None else result.action_mask
            replay.add_transition(
                obs=obs_q, actions=action_q, rewards=reward[:, iql_idx],
                next_obs=final_obs.index_select(1, iql_idx), terminated=terminated[:, iql_idx],
                truncated=truncated[:, iql_idx], alive=alive[:, iql_idx],
                **({} if mask is None else {"next_action_masks": torch.as_tensor(
                    final_mask, device=device).index_select(1, iql_idx)}))
            obs, state = torch.as_tensor(result.obs, device=device), torch.as_tensor(result.state, device=device)
            mask = None if result.action_mask is None else torch.as_tensor(result.action_mask, device=device)
            starts = ended.expand(E, N)
            done = torch.as_tensor(result.done).cpu().bool()
            train_returns.extend(torch.as_tensor(result.episode_return).cpu()[done].sum(-1).tolist())
            agent_returns.extend(torch.as_tensor(result.episode_return).cpu()[done].tolist())  # (episodes, N)
            train_lengths.extend(torch.as_tensor(result.episode_length).cpu()[done].tolist())
        with torch.no_grad():  # V(s_T): bootstraps the last step wherever its episode goes on
            last_in = state[:, None].expand(E, Np, -1) if args.ppo_critic == "state" else obs.index_select(1, ppo_idx)
            last_value, _ = critic(last_in[None])  # (1, E, Np)
        stored = replay.end_episode()
        if args.standardise_rewards:  # running scale of the IQL group's rewards, live agents only
            played = stored["extras"]["alive"].stack().bool()  # (T, E, Nq)
            reward_norm.update(stored["rewards"].stack()[played])
        rollout_s = time.time() - t_rollout

# ============================================================================ 6. POSTPROCESS
        # PPO's rule: GAE on its own rollout. (IQL's rule, one-step targets, runs inside its update loop.)
        t_update = time.time()
        b = buffer.batch(device)  # every tensor (T, E, Np, ...)
        with torch.no_grad():
            next_values = torch.cat([b["values"][1:], last_value], dim=0)  # (T, E, Np)
            next_values = torch.where(b["episode_ends"].bool(), b["final_values"], next_values)
            values = value_norm.denormalize(b["values"])
            advantages, returns = compute_gae(b["rewards"], values, value_norm.denormalize(next_values),
                                              b["terminated"], b["truncated"], args.gamma,
                                              args.gae_lambda)  # (T, E, Np)
            live = b["alive"]
            adv_mean = masked_mean(advantages, live)
            adv_std = masked_mean((advantages - adv_mean) ** 2, live).sqrt()
            advantages = (advantages - adv_mean) / (adv_std + 1e-8)
            if ppo_trains:
                value_norm.update(returns[live.bool()])
            targets = value_norm.normalize(returns)
        data = {k: v.flatten(0, 1) for k, v in b.items()}  # (S, Np, ...), S = T * E env steps
        data.update(advantages=advantages.flatten(0, 1), targets=targets.flatten(0, 1))
        S = T * E

# ============================================================================ 7. UPDATE
        # Each learner updates only its own policy: PPO's loss reaches the actor and critic of its group,
        # IQL's the Q-network of its group; a group outside --train-groups is skipped altogether.
        clipfracs = []
        for epoch in range(args.update_epochs if ppo_trains else 0):
            order = torch.randperm(S, generator=shuffle_gen).to(device)
            for mb in order.tensor_split(args.num_minibatches):
                d = {k: v[mb][None] for k, v in data.items()}  # (1, B, Np, ...)
                dist, _ = actor(d["obs"], None, None, d.get("action_masks"))
                new_logprob, entropy = dist.log_prob(d["actions"]), dist.entropy()  # (1, B, Np)
                new_value, _ = critic(d["critic_inputs"])  # (1, B, Np)
                logratio = new_logprob - d["log_probs"]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = masked_mean((ratio - 1) - logratio, d["alive"])  # Schulman's k3 estimator
                    clipfracs.append(masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), d["alive"]).item())
                # Clipped surrogate objective (Schulman et al. 2017, eq. 7)
                adv = d["advantages"]
                pg_loss = masked_mean(torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)),
                                      d["alive"])
                v_loss = 0.5 * masked_mean((new_value - d["targets"]) ** 2, d["alive"])
                entropy_loss = masked_mean(entropy, d["alive"])
                loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss
                ppo_optimizer.zero_grad()
                loss.backward()
                ppo_grad_norm = nn.utils.clip_grad_norm_(ppo_params, args.max_grad_norm)
                ppo_optimizer.step()
        stats = {}
        if ppo_trains:
            stats = dict(stats, policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_loss.item(),
                         approx_kl=approx_kl.item(), clipfrac=float(np.mean(clipfracs)),
                         ppo_grad_norm=ppo_grad_norm.item(),
                         explained_variance=explained_variance(values[live.bool()], returns[live.bool()]))

        for _ in range(args.updates_per_iteration if iql_trains and len(replay.episodes) * E >= args.batch_size else 0):
            r = replay.sample_episodes(args.batch_size, shuffle_gen, device)  # (B_seq, T, Nq, ...)
            r = {k: v.flatten(0, 1) for k, v in r.items() if k != "filled"}  # (B, Nq, ...) transitions
            rewards = r["rewards"] / reward_norm.stats()[1].sqrt() if args.standardise_rewards else r["rewards"]
            q, _ = q_net.q_values(r["obs"][None], None, None, None)  # (1, B, Nq, A)
            q_taken = q[0].gather(-1, r["actions"].long()[..., None]).squeeze(-1)  # (B, Nq)
            with torch.no_grad():
                # Double Q-learning (van Hasselt et al. 2016): the online net picks a*, the target net values it,
                # at the true next observation (the final one where an episode ended). A truncation keeps
                # this bootstrap (the task was not over), a termination removes it.
                next_online, _ = q_net.q_values(r["next_obs"][None], None, None, None)  # (1, B, Nq, A)
                next_target, _ = target_q.q_values(r["next_obs"][None], None, None, None)
                chooser = next_online[0]
                if "next_action_masks" in r:
                    chooser = chooser.masked_fill(~r["next_action_masks"].bool(), float("-inf"))
                next_q = next_target[0].gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)  # (B, Nq)
                q_targets = rewards + args.gamma * (1.0 - r["terminated"]) * next_q  # (B, Nq)
            td_loss = masked_mean((q_taken - q_targets) ** 2, r["alive"])
            iql_optimizer.zero_grad()
            td_loss.backward()
            iql_grad_norm = nn.utils.clip_grad_norm_(iql_params, args.max_grad_norm)
            iql_optimizer.step()
            soft_update(target_q, q_net, args.tau)
            stats = dict(stats, td_loss=td_loss.item(), q_taken_mean=masked_mean(q_taken.detach(), r["alive"]).item(),
                         target_mean=masked_mean(q_targets, r["alive"]).item(), iql_grad_norm=iql_grad_norm.item())
        # The two-trainers loop: the IQL learner's weights go into the copy that acts in the next rollouts.
        if args.push_every and iteration % args.push_every == 0:
            acting_q.load_state_dict(q_net.state_dict())
        update_s = time.time() - t_update

# ============================================================================ 8. LOGGING
        recorder.maybe_evaluate(eval_envs, joint, global_step, groups)  # greedy, every --eval-every env steps
        recorder.log_iteration(global_step, stats, rollout_s, update_s, train_returns, train_lengths, agent_returns,
                               charts={"epsilon": epsilon},
                               console={"epsilon": epsilon, "td_loss": stats.get("td_loss")}, groups=groups)
        train_returns, train_lengths, agent_returns = [], [], []
        if recorder.checkpoint_due(global_step):  # every --checkpoint-every steps, and on Ctrl-C
            recorder.save_checkpoint(checkpoint_payload(
                args, teams, nets, optimizers, value_norm, reward_norm, replay, shuffle_gen, global_step, iteration))

    # Final greedy evaluation (unless one just ran) and the run's files.
    recorder.final_evaluation(eval_envs, joint, global_step, groups)
    recorder.save_checkpoint(checkpoint_payload(
        args, teams, nets, optimizers, value_norm, reward_norm, replay, shuffle_gen, global_step, args.num_iterations))
    summary = recorder.finish(global_step, stats, close=(envs, eval_envs))  # writes summary.json, closes the envs
    return summary


if __name__ == "__main__":
    run_cli(Args, main, __doc__)
