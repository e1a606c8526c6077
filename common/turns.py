"""Turn-based games (envs/aec_vec.py) in the on-policy files and IQL: only the mover's steps count.

In a turn-based game one agent moves per step, and the reward of a move can arrive on a later
step, when another agent moves (tic-tac-toe's loser gets its -1 on the winner's move). An
agent's experience is then the sequence of its own moves: the rewards it receives from one of
its moves up to its next are that move's reward, and the move's successor is its next move (or
the end of the game). `turn_gae` computes GAE over exactly that, and says which steps are moves
whose outcome the rollout holds; the files use that as their loss mask in place of `alive`:

    acting = whose_move(envs, device)  # before the rollout; whose_move(result, device) after each step
    ...                                # the rollout stores it as "acting"
    if acting is not None:  # after the rollout: who moves next
        advantages, returns, b["alive"] = turn_gae(b, values, next_values, acting, args.gamma, args.gae_lambda)

SMAX (`torch:smax_`, `jaxmarl:smax_`) gives `acting` too: the units alive to act in the coming
step. A dead unit stays in the battle and keeps receiving the team's reward until it ends. The
files whose critic sees only the unit's own view (IPPO, IA2C, ITRPO) take it, and the same sum
credits what a unit receives after its death to its last live action, whose return runs on to
the battle's end, rather than bootstrapping from the value of a dead unit's zero view, which no
loss trains (IPPO's critic drifted there and its policy collapsed: BENCHMARKS.md, SMAX). The
files whose critic values the team's state (MAPPO, MAA2C, MATRPO) take `acting` from turn-based
games only: a dead unit bootstraps from the team's state, with plain GAE (crediting the rewards
instead slowed MAPPO's learning on SMAX: same page).

IQL, whose replay holds whole episodes, learns from moves the same way with `turn_td_targets`: a move's
target is the rewards up to the agent's next move plus gamma times that move's value.

Files that do not (yet) do this refuse turn-based envs (`check_turns`, called from
`common.groups.policy_map` before a run folder is written).
"""
from typing import Dict, Optional, Tuple

import torch

from common.cli import ConfigError

# The files that store whose move it is and learn from each agent's own moves.
TURN_BASED_ALGOS = ("ia2c", "ippo", "iql", "itrpo", "maa2c", "mappo", "matrpo")


def is_turn_based(env) -> bool:
    return bool(getattr(env, "turn_based", False))


def whose_move(source, device) -> Optional[torch.Tensor]:
    """(E, N) True for the agent to move next, from a turn-based env (after reset) or its last
    VecStep; None for every other env."""
    acting = getattr(source, "acting", None)
    return None if acting is None else torch.as_tensor(acting, device=device)


def check_turns(env, algo: str, env_name: str, turn_based: Optional[bool] = None) -> None:
    """A turn-based env given to a file that cannot learn from moves fails, naming those that can.
    `turn_based`: what the file says of itself (`policy_map(..., turn_based=True)`); without it, whether
    `algo` is one of `TURN_BASED_ALGOS` (the league asks by name)."""
    if turn_based is None:
        turn_based = algo in TURN_BASED_ALGOS
    if is_turn_based(env) and not turn_based:
        raise ConfigError(f"{env_name} is turn-based (one agent moves per step; its rewards arrive on other "
                          f"agents' moves) and {algo} does not learn from each agent's own moves yet; files that "
                          f"do: {', '.join(f'algos/{a}.py' for a in TURN_BASED_ALGOS)}")


def turn_gae(b: Dict[str, torch.Tensor], values: torch.Tensor, next_values: torch.Tensor, acting_next: torch.Tensor,
             gamma: float, lam: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GAE over each agent's own moves. All tensors (T, E, N); from the rollout `b`: "rewards",
    "terminated" (terminated), "truncated", "acting" (the agent moved in step t), "alive".

    values[t]: V of step t's input. next_values[t]: V of the true next input where an episode
    ended at step t (what a truncation bootstraps from), and at t = T - 1 the value after the
    rollout; other entries are not read. acting_next (E, N): who moves right after the rollout.

    Backwards through the rollout, per agent: the rewards of every step are added up until the
    agent's previous move, which gets them (an episode's end starts a new sum: rewards never
    cross it), undiscounted over steps where the agent waits for its turn and discounted by
    gamma per step over steps after its death (SMAX: `alive` 0, no move); a move bootstraps
    from the agent's next move, or from the end of its episode (0 if terminated, V of the
    final input if truncated), or, for its last move in the rollout, from
    V after the rollout when the agent moves right then. A last move whose successor lies beyond
    the rollout has no defined advantage: it is left out (the returned mask is 0 there), and the
    agent's earlier moves bootstrap from its value without a lambda tail. So is the last move of
    an agent that was not alive when its episode was truncated (a dead SMAX unit at the time
    limit: the value of what the team would still have won is not the value of its zero view).
    Returns (advantages, returns, moves): moves is 1 on the moves to learn from (times alive).
    """
    rewards, terminated, truncated, acting = b["rewards"], b["terminated"], b["truncated"], b["acting"].bool()
    alive = b["alive"]
    advantages, moves = torch.zeros_like(rewards), torch.zeros_like(rewards)
    tail = torch.zeros_like(rewards[0])  # the lambda-return tail from the agent's next move
    credit = torch.zeros_like(rewards[0])  # rewards received since the step considered, until the next move
    successor = torch.where(acting_next.bool(), next_values[-1], torch.zeros_like(tail))  # V of the next move
    known = acting_next.float()  # 1 where the successor of the move being looked for is known
    terminal = torch.zeros_like(tail)
    # discounts in the agent's own time: a step it waits for its turn in costs nothing (gamma once per
    # move), a step after its death costs gamma (the team's rewards then arrive over real time)
    reach = torch.full_like(tail, gamma)  # from the step considered to its successor's value
    after = torch.ones_like(tail)  # the discount from the step considered to the one after it (from alive)
    for t in reversed(range(rewards.shape[0])):
        end = torch.maximum(terminated[t], truncated[t]).bool()
        credit = torch.where(end, rewards[t], rewards[t] + after * credit)
        reach = torch.where(end, torch.full_like(reach, gamma), reach * after)
        successor = torch.where(end, next_values[t], successor)
        terminal = torch.where(end, terminated[t], terminal)
        tail = torch.where(end, torch.zeros_like(tail), tail)
        # a cut episode's last value is unknown for an agent that was not there at the cut (a dead SMAX unit)
        known = torch.where(end, 1.0 - truncated[t] * (1.0 - alive[t]), known)
        advantage = (credit + reach * successor * (1.0 - terminal) - values[t] + gamma * lam * tail) * known
        advantages[t] = torch.where(acting[t], advantage, advantages[t])
        moves[t] = torch.where(acting[t], known, moves[t])
        # after a move, the agent's earlier moves look forward to this one
        tail = torch.where(acting[t], advantage, tail)
        successor = torch.where(acting[t], values[t], successor)
        for x in (credit, terminal):
            x.masked_fill_(acting[t], 0.0)
        reach = torch.where(acting[t], torch.full_like(reach, gamma), reach)
        known = torch.where(acting[t], torch.ones_like(known), known)
        after = gamma + (1.0 - gamma) * alive[t]  # 1 past a step the agent was alive in, gamma past one after its death
    return advantages, advantages + values, moves * alive


def turn_td_targets(rewards: torch.Tensor, next_q: torch.Tensor, acting: torch.Tensor, ended: torch.Tensor,
                    terminated: torch.Tensor, gamma: float, lam: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """TD(lambda) targets over each agent's own moves, for the replay files that store whole episodes
    (IQL). All tensors (T, B, N) time first, but ended (T, B): 1 on each episode's last real step.

    next_q[t]: the target network's value of the input after step t (row t + 1 of the episode: the
    best available action there, as the file picks it); only read where the agent moves at t + 1.
    A move at step t gets the rewards of step t and of every step until the agent's next move
    (those that arrive on the other agents' moves: tic-tac-toe's loser gets its -1 on the winner's
    move), undiscounted while it waits, then gamma times that next move's value, lambda-mixed with
    its target: y_t = r_t + ... + r_{t'-1} + gamma [(1 - lambda) Q'(t') + lambda y_{t'}]. A move whose
    episode ends before the agent moves again bootstraps from nothing if it terminated; if the clock
    cut it, its target is unknown, and `keep` (returned beside the targets) is 0 there.
    """
    targets, keep = torch.zeros_like(rewards), torch.ones_like(rewards)
    carry = torch.zeros_like(rewards[0])  # what a move before step t + 1 receives from step t + 1 onwards
    unknown = torch.zeros_like(rewards[0])  # 1 where that depends on a cut episode's unknown future
    moving = acting.bool()
    for t in reversed(range(rewards.shape[0])):
        end = ended[t, :, None].bool()
        if t + 1 < rewards.shape[0]:  # the agent moves at t + 1: its earlier moves look forward to that move
            step_value = gamma * ((1.0 - lam) * next_q[t] + lam * targets[t + 1])
            carry = torch.where(moving[t + 1], step_value, carry)
            unknown = torch.where(moving[t + 1], torch.zeros_like(unknown), unknown)
        follow = torch.where(end, torch.zeros_like(carry), carry)
        unknown = torch.where(end, 1.0 - terminated[t], unknown)
        targets[t] = rewards[t] + follow
        keep[t] = 1.0 - unknown
        carry = targets[t]  # a move before t gets step t's rewards and what follows, unless the agent moves at t
    return targets, keep


def negamax_targets(rewards: torch.Tensor, next_q: torch.Tensor, acting: torch.Tensor, ended: torch.Tensor,
                    terminated: torch.Tensor, gamma: float, lam: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """TD(lambda) targets for two-player zero-sum turn-based games, where what one player will still
    receive is minus what the other will: a move at step t is worth its own reward minus the value, to the
    player who moves next, of the position it leaves (negamax, one discount per ply):
    y_t = r_t - gamma [(1 - lambda) Q'_next(t + 1) + lambda y_{t+1}], y_{t+1} being the reply's target.

    Tensors as in `turn_td_targets` ((T, B, N) time first, ended (T, B)). Unlike the independent targets, the
    reply is valued by the replier's best move rather than the move it happened to play, and one player's
    overestimate enters the other's target with a minus sign, so the two do not both drift upwards. A
    game's last move bootstraps from nothing if it terminated; if the clock cut it, its target is unknown
    (`keep` 0 there) and the move before it bootstraps from its value alone.
    """
    targets, keep = torch.zeros_like(rewards), torch.ones_like(rewards)
    reply = torch.zeros_like(rewards[0, :, 0])  # (B,) the next move's target, to its mover
    reply_known = torch.ones_like(reply, dtype=torch.bool)
    for t in reversed(range(rewards.shape[0])):
        end = ended[t].bool()  # (B,)
        if t + 1 < rewards.shape[0]:
            next_value = (next_q[t] * acting[t + 1]).sum(-1)  # the next mover's value of the position after step t
            follow = gamma * torch.where(reply_known, (1.0 - lam) * next_value + lam * reply, next_value)
        else:
            follow = torch.zeros_like(reply)
        follow = torch.where(end, torch.zeros_like(follow), follow)
        targets[t] = rewards[t] - follow[:, None]
        keep[t] = torch.where(end[:, None], terminated[t], torch.ones_like(keep[t]))
        reply = (targets[t] * acting[t]).sum(-1)  # this move's target, for the move before it
        reply_known = (keep[t] * acting[t]).sum(-1) > 0
    return targets, keep
