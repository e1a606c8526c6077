"""Teams of agents and the policy each one uses (MARLlib's `team_prefix`, RLlib's policy mapping).

A *group* is a set of agents that learn one policy and whose returns are counted together.
By default an agent's group is its name without the `_<index>` suffix (`adversary_0` and
`adversary_1` -> `adversary`, `agent_0` -> `agent`, `predator_3` -> `predator`), so the
competitive mpe2 scenarios split into their two sides and the cooperative ones form one team.
`--agent-groups NAME=GROUP ...` overrides this for single agents or whole prefix groups.

Nothing here is RL maths: it names groups, checks the names a user gives, and copies a group's
weights out of another run's checkpoint (`torch.load(..., weights_only=True)`).
"""
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from common.cli import ConfigError
from common.run_utils import load_checkpoint


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


def assign_groups(agents: Sequence[str], mapping: Sequence[str] = ()) -> Tuple[List[str], List[int]]:
    """(group names in order of first appearance, the group index of every agent).

    `mapping` holds `--agent-groups` pairs NAME=GROUP; NAME is an agent name or a prefix group,
    and an agent named exactly wins over its prefix. A NAME that matches nothing fails with
    the agent names and the prefix groups.
    """
    chosen = parse_pairs(mapping, "--agent-groups", "leadadversary_0=adversary agent=prey")
    prefixes = [prefix_group(a) for a in agents]
    unknown = [k for k in chosen if k not in agents and k not in prefixes]
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
    """The team options of an algorithm file's `Args` (its `share_params` stays in the file, next to
    the networks it shapes); `check_group_args` checks them before anything starts."""

    agent_groups: Tuple[str, ...] = ()
    """NAME=GROUP pairs putting an agent or a whole prefix group in a group; by default an agent's group is its name
    without the _<index> suffix (adversary_0 -> adversary, agent_0 -> agent)"""
    train_groups: Tuple[str, ...] = ()
    """groups that learn (default: every group); the others act with fixed weights (needs --share-params group or
    none)"""
    load_group: Tuple[str, ...] = ()
    """GROUP=CHECKPOINT pairs: start GROUP's actor (and, from a run of this algorithm, its critic, unless one critic
    serves every group: MAPPO's --share-critic) from another run's checkpoint or run folder, e.g. a trained opponent
    kept fixed with --train-groups"""


def check_group_args(args) -> None:
    """--share-params (a field of the file's own Args) and the form of --load-group, before anything
    starts; names are checked against the env's agents later, by `make_teams`."""
    check_share_params(args.share_params)
    parse_pairs(args.load_group, "--load-group", "adversary=runs/<run_name>")


def parameter_sets(share_params: str, group_of_agent: Sequence[int]) -> Optional[List[int]]:
    """The `param_groups` argument of nets' actors and critics for `--share-params`: None for
    `all` and `none` (the networks' own shared / per-agent layouts), the group of every agent
    for `group`."""
    check_share_params(share_params)
    return list(group_of_agent) if share_params == "group" else None


@dataclass
class Teams:
    """The groups of one run, worked out once from the env's agents and the group flags."""

    agents: List[str]  # agent names, in agent-axis order
    names: List[str]  # group names, in order of first appearance
    group_of_agent: List[int]  # (N,) index into names
    trained: List[bool]  # (N,) the agent's group learns (--train-groups)
    load: Dict[str, str]  # group -> checkpoint to start it from (--load-group)

    @property
    def members(self) -> Dict[str, List[int]]:
        """{group name: its agents' indices}, what the run recorder logs per group."""
        return {g: [n for n, i in enumerate(self.group_of_agent) if i == k] for k, g in enumerate(self.names)}

    @property
    def agent_groups(self) -> List[str]:
        """Every agent's group name, as checkpoints record it."""
        return [self.names[i] for i in self.group_of_agent]


def make_teams(agents: Sequence[str], share_params: str, agent_groups: Sequence[str] = (),
               train_groups: Sequence[str] = (), load_groups: Sequence[str] = ()) -> Teams:
    """Check `--share-params`, `--agent-groups`, `--train-groups` and `--load-group` against the
    env's agents; a name that matches nothing fails with the groups and agents there are."""
    check_share_params(share_params)
    names, group_of_agent = assign_groups(agents, agent_groups)
    trained_ids = select_groups(train_groups, "--train-groups", names, agents, group_of_agent) if train_groups \
        else list(range(len(names)))
    load = parse_pairs(load_groups, "--load-group", "adversary=runs/<run_name>")
    select_groups(list(load), "--load-group", names, agents, group_of_agent)
    if share_params == "all" and (len(trained_ids) < len(names) or load):
        raise ConfigError("--train-groups (some groups fixed) and --load-group need each group to have its own "
                          "weights: add --share-params group (or none)")
    trained = [g in trained_ids for g in group_of_agent]
    return Teams(list(agents), names, group_of_agent, trained, load)


@torch.no_grad()
def load_group(path: str, group: str, algo: str, agents: Sequence[str], groups: Sequence[str],
               group_of_agent: Sequence[int], nets: Dict[str, nn.Module],
               value_norm: Optional[nn.Module] = None) -> List[str]:
    """Copy group `group`'s weights from the checkpoint at `path` into `nets` (e.g. {"actor":
    actor, "critic": critic}, the checkpoint's keys); return the keys copied.

    The checkpoint must come from a run on the same agents with a group of that name (its
    `agents` and `agent_groups` entries) and networks of the same sizes. Rows are matched per
    agent through both runs' `agent_rows()`, so the group may sit at another index there; the
    actor always loads, the critic and value statistics only from a run of the same algorithm
    (another algorithm's critic sees other inputs).
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
    keys = [k for k in nets if k == "actor" or ckpt["algo"] == algo]
    for key in keys:
        net, state, src_rows = nets[key], ckpt[key], ckpt["agent_rows"][key]
        for name, param in net.named_parameters():
            rows, rows_src = net.agent_rows()[name], src_rows.get(name)
            if rows is None or rows_src is None:
                raise ConfigError(f"--load-group {group}={path}: {key} parameter {name} is shared by every agent "
                                  f"{'here' if rows is None else 'in that run'} (--share-params all, or MAPPO's "
                                  "--share-critic for the critic), so no group's part can be copied; groups need "
                                  "--share-params group or none in both (with --share-critic here, only the actor loads)")
            src = state[name]
            if src.shape[1:] != param.shape[1:]:
                raise ConfigError(f"--load-group {group}={path}: {key} parameter {name} is {tuple(src.shape[1:])} "
                                  f"there and {tuple(param.shape[1:])} here; build both alike: --hidden-sizes, "
                                  "--recurrent, critic input, and --share-params (a set serving several agents also "
                                  "reads the agent-id one-hot)")
            copied = {}
            for agent in members:
                row, row_src = int(rows[agents.index(agent)]), int(rows_src[src_agents.index(agent)])
                if copied.setdefault(row, row_src) != row_src and not torch.equal(src[row_src], src[copied[row]]):
                    raise ConfigError(f"--load-group {group}={path}: that run gave the group's agents different "
                                      "weights, which share one set here (use --share-params none)")
                param[row] = src[row_src].to(param.device)
    if value_norm is not None and ckpt["algo"] == algo and getattr(value_norm, "group_onehot", None) is not None:
        src_index = list(dict.fromkeys(src_groups)).index(group)
        for name, buf in value_norm.named_buffers():
            if name in ckpt["value_norm"]:
                buf[list(groups).index(group)] = ckpt["value_norm"][name][src_index]
        keys.append("value_norm")
    return keys
