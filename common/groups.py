"""Teams of agents and the policy each one uses (MARLlib's `team_prefix`, RLlib's policy mapping).

A *group* is a set of agents that learn one policy and whose returns are counted together.
By default an agent's group is its name without the `_<index>` suffix (`adversary_0` and
`adversary_1` -> `adversary`, `agent_0` -> `agent`, `predator_3` -> `predator`), so the
competitive mpe2 scenarios split into their two sides and the cooperative ones form one team;
where the prefixes are roles within one team (speaker and listener) `TEAMS` says so.
`--agent-groups NAME=GROUP ...` overrides this for single agents or whole prefix groups. A group
is also a team: its agents' rewards are summed into its team reward, and value decomposition
gives it its own mixer.

Nothing here is RL maths: it names groups, checks the names a user gives, copies a group's
weights out of another run's checkpoint (`torch.load(..., weights_only=True)`), and lets a group
act as another algorithm's run. What an algorithm file asks of it (docs/how-to.md shows it):

    teams = policy_map(args, envs, "qmix", device)   # groups, who learns, loaded runs; bad names fail here
    teams.load_weights({"q_net": agents})            # --load-group from a run of this algorithm: copy weights
    action = teams.override(action, obs, starts, mask)   # groups loaded from other algorithms act
    loss = masked_mean(td_error**2, alive * teams.trained)   # fixed groups take no part in any loss
    recorder.maybe_evaluate(eval_envs, teams.policy(agents), global_step, teams.members)
"""
import importlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Literal, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from common.cli import ConfigError, saved_args
from common.run_utils import greedy_eval, load_checkpoint
from common.turns import check_turns
from common.scripted import SCRIPTED, scripted_player


# Scenarios whose name prefixes are roles within one team, not sides: their prefixes' default groups
# (then --agent-groups). Elsewhere the prefixes are the teams: simple_tag's adversary and agent.
TEAMS = {
    "simple_speaker_listener": {"speaker": "team", "listener": "team"},  # one shared reward
    "simple_world_comm": {"leadadversary": "adversary"},  # the leader talks to its adversaries
    "simple_crypto": {"alice": "team", "bob": "team"},  # alice and bob against eve
    "knights_archers_zombies": {"archer": "team", "knight": "team"},  # together against the zombies
}


RANDOM = "random"  # what `--load-group GROUP=random` and a cross-play's random member play: uniform random actions


def is_fixed_player(member: str) -> bool:
    """A member that is not a run: `random` or a scripted player (`scripted:NAME`, common/scripted.py)."""
    return member == RANDOM or member.startswith(SCRIPTED)


# Families whose agents are seats of a game (player_0 against player_1): each agent is a side of its own,
# except in the cooperative games, where the players are one team (Hanabi: one shared reward).
SEATED = ("classic:", "torch:connect_four")
COOPERATIVE_GAMES = ("classic:hanabi",)


def env_teams(env: str) -> Dict[str, str]:
    """{prefix: group} of an env whose prefixes are roles of one team (TEAMS), else {}."""
    return TEAMS.get(env.split(":")[-1], {})


def prefix_group(agent: str) -> str:
    """'adversary_0' -> 'adversary'; a name without an `_<index>` suffix is its own group."""
    return re.sub(r"_\d+$", "", agent)


def agent_names(env) -> List[str]:
    """The env's agent names in agent-axis order (`agent_<i>` for an env that names none)."""
    return list(getattr(env, "agents", None) or [f"agent_{i}" for i in range(env.n_agents)])


def parse_pairs(pairs: Sequence[str], flag: str, example: str) -> Dict[str, str]:
    """['a=b', ...] -> {'a': 'b'}; anything else fails and says what the flag takes."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{flag} takes KEY=VALUE pairs (e.g. {example}), got {pair!r}")
        out[key] = value
    return out


def assign_groups(agents: Sequence[str], mapping: Sequence[str] = (), env: str = "") -> Tuple[List[str], List[int]]:
    """(group names in order of first appearance, the group index of every agent).

    An agent's group is its name prefix, or the team `env` gives that prefix (TEAMS), or in a
    turn-based game (SEATED, not COOPERATIVE_GAMES) the agent itself: each seat is a side. `mapping`
    holds `--agent-groups` pairs NAME=GROUP; NAME is an agent name or a prefix, and an agent named
    exactly wins over its prefix. A NAME that matches nothing fails with the agent names and the
    prefix groups.
    """
    chosen = parse_pairs(mapping, "--agent-groups", "leadadversary_0=adversary agent=prey")
    chosen = {**{p: g for p, g in env_teams(env).items() if p not in chosen}, **chosen}
    seated = env.startswith(SEATED) and env not in COOPERATIVE_GAMES
    prefixes = [a if seated else prefix_group(a) for a in agents]
    unknown = [k for k in chosen if k not in agents and k not in prefixes and k not in env_teams(env)]
    if unknown:
        raise ConfigError(f"--agent-groups names {unknown}, which match no agent; agents: {', '.join(agents)}; "
                          f"prefix groups: {', '.join(dict.fromkeys(prefixes))}")
    per_agent = [chosen.get(a, chosen.get(p, p)) for a, p in zip(agents, prefixes)]
    names = list(dict.fromkeys(per_agent))
    return names, [names.index(g) for g in per_agent]


def select_groups(requested: Sequence[str], flag: str, names: Sequence[str], agents: Sequence[str],
                  group_of_agent: Sequence[int]) -> List[int]:
    """Indices of the requested group names; an unknown one fails with the groups and their agents."""
    unknown = [g for g in requested if g not in names]
    if unknown:
        listing = "; ".join(f"{g}: {', '.join(a for a, i in zip(agents, group_of_agent) if names[i] == g)}"
                            for g in names)
        raise ConfigError(f"{flag} names group(s) {unknown}, which match no agent; groups (agents): {listing}")
    return [names.index(g) for g in requested]


def check_share_params(share_params) -> None:
    """--share-params is all, group or none (a preset or checkpoint may still hold the old boolean)."""
    if share_params not in ("all", "group", "none"):
        raise ConfigError(f"--share-params must be all, group or none, got {share_params!r} "
                          "(the old true is all, false is none)")


@dataclass
class GroupArgs:
    """The policy-mapping options every algorithm file's `Args` has; `check_group_args` checks their
    form before anything starts, `policy_map` their names against the env's agents."""

    share_params: Literal["all", "group", "none"] = "all"
    """all: one network (of each kind) for every agent; group: one per group (--agent-groups), shared by its agents;
    none: one per agent. A network serving several agents also reads an agent-id one-hot. On an env with one group,
    group is the same as all"""
    agent_groups: Tuple[str, ...] = ()
    """NAME=GROUP pairs putting an agent or a whole prefix group in a group; by default an agent's group is its name
    without the _<index> suffix (adversary_0 -> adversary, agent_0 -> agent), so competitive envs split into sides"""
    train_groups: Tuple[str, ...] = ()
    """groups that learn (default: every group not loaded from another algorithm's run); the others act with fixed
    weights (with --share-params group or none)"""
    load_group: Tuple[str, ...] = ()
    """GROUP=RUN pairs (a run folder or its checkpoint.pt; the run must be on this env and these agents): from a run
    of this algorithm GROUP's weights are copied and it may go on learning; from another algorithm's run GROUP acts as
    that run's policy (greedy, or as that run evaluates), built by that algorithm's own code, and stays fixed.
    RUN may be `random` (uniform random actions), `scripted:NAME` (a scripted player of the game: scripted:win_or_block
    on connect four wins when it can, blocks when it must, else moves at random; scripted:perfect on tic-tac-toe
    never loses), or several,
    GROUP=RUN,RUN,random: a fixed pool, env copy e played by member e mod M, each sampling its policy as in
    training"""


def check_group_args(args) -> None:
    """--share-params and the form of --load-group, before anything starts; names are checked
    against the env's agents later, by `policy_map`."""
    check_share_params(args.share_params)
    parse_pairs(args.load_group, "--load-group", "adversary=runs/<run_name>")


def param_layout(args, env) -> Union[bool, List[int]]:
    """What nets' `share_params` takes for `--share-params`: True (all), False (none), or every
    agent's group index (group: the agents of a group share one set)."""
    check_share_params(args.share_params)
    if args.share_params == "group":
        return assign_groups(agent_names(env), args.agent_groups, args.env)[1]
    return args.share_params == "all"


def agent_rows(module: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
    """For every parameter of `module`: the row of its first axis that agent n uses, (N,), or None
    where one tensor serves every agent (shared weights, a mixer). Modules of `nets` that hold
    per-agent sets say it themselves (`agent_rows()`); anything else is searched for them."""
    if hasattr(module, "agent_rows"):
        return module.agent_rows()
    rows = {name: None for name, _ in module.named_parameters(recurse=False)}
    for prefix, child in module.named_children():
        rows.update({f"{prefix}.{k}": v for k, v in agent_rows(child).items()})
    return rows


def check_share_all(share_params: str, fixed: bool, copied: bool) -> None:
    """Fixed groups and copied weights need each group's weights apart from the others'."""
    if share_params == "all" and (fixed or copied):
        raise ConfigError("--train-groups (some groups fixed) and --load-group from a run of this algorithm need each "
                          "group to have its own weights: add --share-params group (or none)")


@dataclass
class Teams:
    """The groups of one run, worked out once from the env's agents and the group flags.

    Built by `policy_map` (with tensors on the run's device and the loaded runs) or, names only,
    by `make_teams`. What derives from the fields (members, masks, one-hots) is computed on first
    use and kept: update loops read it without rebuilding a tensor or copying it to the device."""

    agents: List[str]  # agent names, in agent-axis order
    names: List[str]  # group names, in order of first appearance
    group_of_agent: List[int]  # (N,) index into names
    trained_list: List[bool]  # (N,) the agent's group learns (--train-groups)
    load: Dict[str, str]  # group -> checkpoint to start it from, `random`, or a pool "RUN,RUN" (--load-group)
    device: Optional[torch.device] = None
    foreign: Dict[str, "_GroupActor"] = field(default_factory=dict)  # groups acting as another algorithm's run
    _states: Dict[Tuple[str, int], object] = field(default_factory=dict)  # (group, batch) -> their recurrent states

    @cached_property
    def members(self) -> Dict[str, List[int]]:
        """{group name: its agents' indices}, what the run recorder logs per group."""
        return {g: [n for n, i in enumerate(self.group_of_agent) if i == k] for k, g in enumerate(self.names)}

    @cached_property
    def agent_groups(self) -> List[str]:
        """Every agent's group name, as checkpoints record it."""
        return [self.names[i] for i in self.group_of_agent]

    @cached_property
    def trained(self) -> torch.Tensor:
        """(N,) 1.0 where the agent's group learns: multiply a loss mask by it and fixed groups'
        weights get no gradient (and, in separate parameter sets, stay exactly as they were)."""
        return torch.as_tensor(self.trained_list, dtype=torch.float32, device=self.device)

    @cached_property
    def onehot(self) -> torch.Tensor:
        """(N, G) agent n's row is the one-hot of its group."""
        return nn.functional.one_hot(torch.as_tensor(self.group_of_agent), len(self.names)).float().to(self.device)

    @cached_property
    def learning(self) -> List[List[int]]:
        """The agents of every group that learns, one list per group: each gets its own mixer or
        joint critic and its own team reward in value decomposition and COMA."""
        return [m for g, m in self.members.items() if self.trained_list[m[0]]]

    @cached_property
    def team_of_agent(self) -> torch.Tensor:
        """(N,) every agent's learning team, its index in `learning` (0 for fixed groups' agents,
        whose losses are masked anyway): what gathers a team's value or reward for its agents."""
        learning = self.learning
        return torch.as_tensor([next((k for k, m in enumerate(learning) if n in m), 0)
                                for n in range(len(self.agents))], device=self.device)

    def team_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """(..., N) -> (..., K): the reward summed over each learning group's agents (its team
        reward). One group of every agent is the plain sum, as cooperative runs always had it."""
        teams = self.learning
        if len(teams) == 1 and len(teams[0]) == rewards.shape[-1]:
            return rewards.sum(-1, keepdim=True)
        return torch.stack([rewards[..., m].sum(-1) for m in teams], dim=-1)

    def payload(self, **nets: nn.Module) -> dict:
        """The checkpoint entries that let `--load-group` take one group out of this run: the
        agents, their groups, the groups this run trained (what it can play in a cross-play) and,
        for each network saved under that key, its per-agent rows."""
        trained = [g for g, members in self.members.items() if self.trained_list[members[0]]]
        return {"agents": self.agents, "agent_groups": self.agent_groups, "trained_groups": trained,
                "agent_rows": {key: agent_rows(net) for key, net in nets.items()}}

    def load_weights(self, nets: Dict[str, nn.Module], value_norm: Optional[nn.Module] = None) -> None:
        """Copy the groups loaded from runs of this algorithm into `nets` ({checkpoint key: module});
        call it after building the networks and before copying them into target networks."""
        for group, path in self.load.items():
            if group not in self.foreign:
                load_group(path, group, self.agents, self.names, self.group_of_agent, nets, value_norm)

    @torch.no_grad()
    def override(self, action: torch.Tensor, obs: torch.Tensor, starts: torch.Tensor,
                 mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The rollout's actions (E, N) or (E, N, D) with the agents of groups loaded from another
        algorithm's run acting as that run does (one-hot where the file acts in one-hots, as the
        DDPG family does with discrete actions). The file's own choice for them is discarded."""
        for group, policy in self.foreign.items():
            key = (group, starts.shape[0])  # a state per batch size: the rollout's copies keep theirs
            state = self._states[key] if key in self._states else policy.initial_state(starts.shape[0], obs.device)
            theirs, self._states[key] = policy.act(obs, state, starts, mask)
            if action.dim() > theirs.dim():  # discrete actions as one-hots
                theirs = nn.functional.one_hot(theirs.long(), action.shape[-1]).to(action.dtype)
            action = torch.where(policy.rows(action), theirs.to(action.dtype), action)
        return action

    def policy(self, actor: nn.Module) -> nn.Module:
        """What evaluation runs: `actor` for the file's own groups and, where groups come from
        another algorithm's run, that run's policy for them (`actor` itself when none does)."""
        return TeamPolicy(actor, list(self.foreign.values())) if self.foreign else actor


def make_teams(agents: Sequence[str], share_params: str, agent_groups: Sequence[str] = (),
               train_groups: Sequence[str] = (), load_groups: Sequence[str] = ()) -> Teams:
    """Check `--share-params`, `--agent-groups`, `--train-groups` and `--load-group` against the
    env's agents, names only (every load taken as a copy); a name that matches nothing fails with
    the groups and agents there are."""
    check_share_params(share_params)
    names, group_of_agent = assign_groups(agents, agent_groups)
    trained_ids = select_groups(train_groups, "--train-groups", names, agents, group_of_agent) if train_groups \
        else list(range(len(names)))
    load = parse_pairs(load_groups, "--load-group", "adversary=runs/<run_name>")
    select_groups(list(load), "--load-group", names, agents, group_of_agent)
    check_share_all(share_params, len(trained_ids) < len(names), bool(load))
    return Teams(list(agents), names, group_of_agent, [g in trained_ids for g in group_of_agent], load)


def policy_map(args, envs, algo: str, device: Optional[torch.device] = None, copy: bool = True,
               by_prefix: bool = False, turn_based: bool = False) -> Teams:
    """The run's groups from `args` (`GroupArgs`) and the env's agents: which learn, which start
    from another run. Every name is checked and every loaded run opened here, before a run folder
    is written: a run on other agents, or whose algorithm cannot act in this env, fails at once.
    copy=False: a run of this algorithm acts as that run too (a file whose networks are not laid
    out per agent, ppo_iql), instead of having its group's weights copied. by_prefix: groups are the
    name prefixes even where `TEAMS` joins roles into one team (ppo_iql learns roles apart).
    turn_based: the file learns from each agent's own moves (`common.turns`), so turn-based envs are
    accepted; it is the file's word, so a copy under another name keeps it."""
    agents = agent_names(envs)
    check_turns(envs, algo, args.env, turn_based)  # a turn-based game needs a file that learns from each agent's moves
    check_share_params(args.share_params)
    names, group_of_agent = assign_groups(agents, args.agent_groups, "" if by_prefix else args.env)
    load = parse_pairs(args.load_group, "--load-group", "adversary=runs/<run_name>")
    select_groups(list(load), "--load-group", names, agents, group_of_agent)
    foreign = {}
    for group, path in load.items():
        members = path.split(",")
        pool = len(members) > 1  # every member of a pool acts (fixed), sampling its policy as in training
        players = []
        for member in members:
            if member == RANDOM:
                players.append(RandomPolicy(group, envs, group_of_agent, names, device))
                continue
            if member.startswith(SCRIPTED):
                players.append(ScriptedPolicy(member, group, args.env, envs, group_of_agent, names, device))
                continue
            ckpt = loaded_run(member, group, args.env, agents, names, group_of_agent)
            if ckpt["algo"] != algo or not copy or pool:
                players.append(LoadedPolicy(group, member, ckpt, envs, group_of_agent, names, device, args.env_kwargs,
                                            sampled=pool))
        if players:
            foreign[group] = players[0] if len(players) == 1 else PoolPolicy(group, players)
    if args.train_groups:
        trained_ids = select_groups(args.train_groups, "--train-groups", names, agents, group_of_agent)
        acting = [names[g] for g in trained_ids if names[g] in foreign]
        if acting:
            raise ConfigError(f"--train-groups names {acting}, loaded from {foreign[acting[0]].algo} run "
                              f"{load[acting[0]]}: a group that acts as a loaded run stays fixed ({algo} cannot train "
                              f"that run's network); leave it out of --train-groups"
                              + (f", or load it from a {algo} run" if copy else ""))
    else:
        trained_ids = [g for g, name in enumerate(names) if name not in foreign]
    if not trained_ids:
        raise ConfigError(f"no group learns: every group ({', '.join(names)}) is loaded from another algorithm's run; "
                          "load fewer of them")
    fixed_own = any(g not in trained_ids and names[g] not in foreign for g in range(len(names)))
    check_share_all(args.share_params, fixed_own, len(load) > len(foreign))
    trained = [g in trained_ids for g in group_of_agent]
    return Teams(list(agents), names, group_of_agent, trained, load, device, foreign)


def loaded_run(path: str, group: str, env: str, agents: Sequence[str], groups: Sequence[str],
               group_of_agent: Sequence[int]) -> dict:
    """The checkpoint of `--load-group group=path`, checked: a run of this project on this env
    (a `torch:` port and its mpe2 original count as one) with the same agents and a group of
    that name holding the same agents."""
    ckpt = load_checkpoint(path)
    flag = f"--load-group {group}={path}"
    if "agents" not in ckpt or "agent_groups" not in ckpt:
        raise ConfigError(f"{flag}: the checkpoint records no agents or groups (written before groups existed "
                          f"in algos/{ckpt.get('algo', '?')}.py); train that run again")
    their_env = str(ckpt["args"].get("env", "?"))
    if their_env.removeprefix("torch:") != env.removeprefix("torch:"):
        raise ConfigError(f"{flag}: that run played {their_env}, this one plays {env}")
    src_agents, src_groups = list(ckpt["agents"]), list(ckpt["agent_groups"])
    if src_agents != list(agents):
        only_there = [a for a in src_agents if a not in agents]
        only_here = [a for a in agents if a not in src_agents]
        raise ConfigError(f"{flag}: the agents differ: only in that run {only_there or 'none'}, only here "
                          f"{only_here or 'none (same names, other order)'} (check --env-kwargs)")
    members = [a for a, g in zip(agents, group_of_agent) if groups[g] == group]
    src_members = [a for a, g in zip(src_agents, src_groups) if g == group]
    if sorted(members) != sorted(src_members):
        raise ConfigError(f"{flag}: the group is {members} here but {src_members or 'absent'} in that run (its "
                          f"groups: {', '.join(dict.fromkeys(src_groups))}); match them with --agent-groups")
    return ckpt


class _GroupActor:
    """What every fixed player of a group has: the group's agents (`agent_mask`, (N,))."""

    agent_mask: torch.Tensor

    def rows(self, action: torch.Tensor) -> torch.Tensor:
        """The group's agents as a mask broadcastable to `action` (E, N[, ...])."""
        return self.agent_mask.view(-1, *([1] * (action.dim() - 2)))


def group_mask(group: str, group_of_agent: Sequence[int], names: Sequence[str], device) -> torch.Tensor:
    return torch.as_tensor([names[g] == group for g in group_of_agent], device=device)


class LoadedPolicy(_GroupActor):
    """A group acting as another algorithm's run: that algorithm's own acting network
    (`acting_policy` of algos/<algo>.py), built from the run's saved args on this env and loaded
    from its checkpoint, acting as that run's evaluation does (greedy unless it sampled) or, with
    sampled=True, as it acted in training (sampling its policy; a value-based run stays greedy)."""

    def __init__(self, group: str, path: str, ckpt: dict, envs, group_of_agent: Sequence[int],
                 names: Sequence[str], device, env_kwargs: Sequence[str] = (), sampled: bool = False):
        self.algo = ckpt["algo"]
        try:
            module = importlib.import_module(f"algos.{self.algo}")
        except ImportError:
            raise ConfigError(f"--load-group {group}={path}: the run is by {self.algo!r}, which no file in algos/ "
                              "implements") from None
        saved = module.Args(**saved_args(module.Args, ckpt["args"]))
        try:
            self.net = module.acting_policy(saved, envs, ckpt, device or torch.device("cpu"))
        except (ConfigError, RuntimeError, ValueError, TypeError, KeyError) as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [repr(err)]
            detail = next((line for line in lines if "size mismatch" in line), lines[0])[:300]
            raise ConfigError(f"--load-group {group}={path}: that {self.algo} run cannot act in this env as it is here "
                              f"({detail}); it was trained with --env-kwargs {' '.join(saved.env_kwargs) or '(none)'}, "
                              f"this run has {' '.join(env_kwargs) or '(none)'}: its observations or actions differ "
                              "(continuous_actions, N, ...)") from None
        self.net.requires_grad_(False)
        self.greedy = greedy_eval(saved) and not sampled
        self.agent_mask = group_mask(group, group_of_agent, names, device)

    def initial_state(self, batch: int, device=None):
        return self.net.initial_state(batch, device)

    def act(self, obs, state, starts, mask=None):
        """obs (E, N, ...), starts (E, N) -> (actions (E, N[, d]) in the env's format, new state)."""
        dist, state = self.net(obs[None], state, starts[None], None if mask is None else mask[None])
        action = dist.mode() if self.greedy else dist.sample()
        if hasattr(self.net, "remember"):  # networks that see their previous action (nets.QPolicy)
            state = self.net.remember(state, action[0])
        return action[0], state


class RandomPolicy(_GroupActor):
    """A group acting uniformly at random (`--load-group GROUP=random`): a legal action of the mask
    (discrete), or a point of the normalised box [-1, 1] (continuous), as the env's own
    `sample_actions` and the cross-play's `random` member do."""

    algo = RANDOM

    def __init__(self, group: str, envs, group_of_agent: Sequence[int], names: Sequence[str], device):
        self.discrete = bool(envs.discrete)
        self.width = envs.n_actions if self.discrete else envs.action_dim
        self.agent_mask = group_mask(group, group_of_agent, names, device)

    def initial_state(self, batch: int, device=None):
        return None

    def act(self, obs, state, starts, mask=None):
        u = torch.rand(*starts.shape, self.width, device=starts.device)  # (E, N, width)
        if not self.discrete:
            return 2.0 * u - 1.0, None
        return (u if mask is None else u.masked_fill(~mask.bool(), -1.0)).argmax(-1), None


class ScriptedPolicy(_GroupActor):
    """A group played by a scripted player of the game (`--load-group GROUP=scripted:NAME`): every
    agent's move computed for all copies at once from what the agent sees and its legal actions
    (only the group's agents' moves are used)."""

    def __init__(self, spec: str, group: str, env_name: str, envs, group_of_agent: Sequence[int],
                 names: Sequence[str], device):
        self.algo, self.move, self.width = spec, scripted_player(spec, env_name), envs.n_actions
        self.agent_mask = group_mask(group, group_of_agent, names, device)

    def initial_state(self, batch: int, device=None):
        return None

    def act(self, obs, state, starts, mask=None):
        E, N = starts.shape
        legal = torch.ones(E * N, self.width, dtype=torch.bool, device=obs.device) if mask is None \
            else mask.reshape(E * N, -1)
        return self.move(obs.reshape(E * N, *obs.shape[2:]), legal, None).reshape(E, N), None


class PoolPolicy(_GroupActor):
    """A group played by several fixed players at once (`--load-group GROUP=RUN,RUN,random`): env
    copy e by member e mod M, each member keeping its own recurrent state for its copies and acting
    as it did in training (sampling its policy), so that the learner meets a mixture of varied
    opponents in every rollout, not M fixed lines of play. A replayed batch (the off-policy files
    ask the group's next action at sampled steps) is split among the members the same way."""

    def __init__(self, group: str, members: Sequence[_GroupActor]):
        self.members = list(members)
        self.algo = "+".join(dict.fromkeys(m.algo for m in self.members))
        self.agent_mask = self.members[0].agent_mask

    def initial_state(self, batch: int, device=None):
        M = len(self.members)
        return [m.initial_state(len(range(k, batch, M)), device) for k, m in enumerate(self.members)]

    def act(self, obs, state, starts, mask=None):
        E, M = starts.shape[0], len(self.members)
        state = self.initial_state(E, starts.device) if state is None else state  # TeamPolicy starts with None
        out, states = None, list(state)
        for k, member in enumerate(self.members[:E]):
            rows = slice(k, None, M)
            theirs, states[k] = member.act(obs[rows], state[k], starts[rows], None if mask is None else mask[rows])
            out = theirs.new_zeros((E, *theirs.shape[1:])) if out is None else out
            out[rows] = theirs.to(out.dtype)
        return out, states


class TeamPolicy(nn.Module):
    """The `nets.Actor` interface over a file's own actor and the groups acting as other runs,
    for evaluation: `forward` returns a distribution whose `mode()` and `sample()` give the
    actor's actions with those groups' agents' replaced by their runs' choices."""

    def __init__(self, actor: nn.Module, foreign: Sequence[_GroupActor]):
        super().__init__()
        self.actor, self.foreign = actor, list(foreign)

    def initial_state(self, batch: int, device=None):
        return self.actor.initial_state(batch, device), [p.initial_state(batch, device) for p in self.foreign]

    def forward(self, obs, state=None, starts=None, action_mask=None):
        own, theirs = state if state is not None else (None, [None] * len(self.foreign))
        dist, own = self.actor(obs, own, starts, action_mask)
        acted = [p.act(obs[0], s, starts[0], None if action_mask is None else action_mask[0])
                 for p, s in zip(self.foreign, theirs)]
        return _Merged(dist, self.foreign, [a for a, _ in acted]), (own, [s for _, s in acted])

    def remember(self, state, action):
        own, theirs = state
        return (self.actor.remember(own, action) if hasattr(self.actor, "remember") else own), theirs


class _Merged:
    """The own actor's distribution with some agents' actions fixed by loaded runs."""

    def __init__(self, dist, foreign: Sequence[_GroupActor], actions: Sequence[torch.Tensor]):
        self.dist, self.foreign, self.actions = dist, foreign, actions

    def _merge(self, action: torch.Tensor) -> torch.Tensor:  # action (1, E, N[, d])
        for policy, theirs in zip(self.foreign, self.actions):
            action = torch.where(policy.rows(action[0]), theirs.to(action.dtype), action[0])[None]
        return action

    def mode(self) -> torch.Tensor:
        return self._merge(self.dist.mode())

    def sample(self) -> torch.Tensor:
        return self._merge(self.dist.sample())


@torch.no_grad()
def load_group(path: str, group: str, agents: Sequence[str], groups: Sequence[str], group_of_agent: Sequence[int],
               nets: Dict[str, nn.Module], value_norm: Optional[nn.Module] = None) -> List[str]:
    """Copy group `group`'s weights from the checkpoint at `path` (a run of the same algorithm)
    into `nets` ({checkpoint key: module}, e.g. {"actor": actor, "critic": critic}); return the
    keys copied.

    The checkpoint must come from a run on the same agents with a group of that name (its
    `agents` and `agent_groups` entries) and networks of the same sizes. Rows are matched per
    agent through both runs' per-agent rows (`agent_rows`), so the group may sit at another
    index there; parameters that serve every agent (a mixer, a shared critic) cannot be split
    and are refused, except in modules whose key is absent from `nets`.
    """
    ckpt = load_checkpoint(path)
    if "agent_groups" not in ckpt:
        raise ConfigError(f"--load-group {group}={path}: the checkpoint records no groups (written before "
                          "--share-params group existed, or by an algorithm without groups)")
    src_agents, src_groups = list(ckpt["agents"]), list(ckpt["agent_groups"])
    members = [a for a, g in zip(agents, group_of_agent) if groups[g] == group]
    src_members = [a for a, g in zip(src_agents, src_groups) if g == group]
    if sorted(members) != sorted(src_members):
        raise ConfigError(f"--load-group {group}={path}: the group is {members} here but {src_members or 'absent'} "
                          f"in that run (its groups: {', '.join(dict.fromkeys(src_groups))})")
    for key, net in nets.items():
        state, src_rows, here = ckpt[key], ckpt["agent_rows"][key], agent_rows(net)
        for name, param in net.named_parameters():
            rows, rows_src = here[name], src_rows.get(name)
            if rows is None or rows_src is None:
                raise ConfigError(f"--load-group {group}={path}: {key} parameter {name} is shared by every agent "
                                  f"{'here' if rows is None else 'in that run'} (--share-params all, or MAPPO's "
                                  "--share-critic for the critic), so no group's part can be copied; groups need "
                                  "--share-params group or none in both (with --share-critic here, only the actor "
                                  "loads)")
            # A set's part of a tensor: its row, or its block of rows (a grouped convolution's filters).
            sets, sets_src = int(rows.max()) + 1, int(rows_src.max()) + 1
            src, param = state[name].view(sets_src, -1, *state[name].shape[1:]), param.view(sets, -1, *param.shape[1:])
            if src.shape[1:] != param.shape[1:]:
                raise ConfigError(f"--load-group {group}={path}: {key} parameter {name} is {tuple(src.shape[2:])} "
                                  f"there and {tuple(param.shape[2:])} here; build both alike: --hidden-sizes, "
                                  "--recurrent, critic input, and --share-params (a set serving several agents also "
                                  "reads the agent-id one-hot)")
            copied = {}
            for agent in members:
                row, row_src = int(rows[agents.index(agent)]), int(rows_src[src_agents.index(agent)])
                if copied.setdefault(row, row_src) != row_src and not torch.equal(src[row_src], src[copied[row]]):
                    raise ConfigError(f"--load-group {group}={path}: that run gave the group's agents different "
                                      "weights, which share one set here (use --share-params none)")
                param[row] = src[row_src].to(param.device)
    keys = list(nets)
    if value_norm is not None and getattr(value_norm, "group_onehot", None) is not None and "value_norm" in ckpt:
        src_index = list(dict.fromkeys(src_groups)).index(group)
        for name, buf in value_norm.named_buffers():
            if name in ckpt["value_norm"]:
                buf[list(groups).index(group)] = ckpt["value_norm"][name][src_index]
        keys.append("value_norm")
    return keys
