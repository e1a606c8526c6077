"""SMAX in batched torch: StarCraft-style micromanagement, E copies stepped as tensors, step for step JaxMARL.

    from envs import make_env
    env = make_env("torch:smax_3m", num_envs=1024, seed=0)          # or device="cuda"
    env = make_env("torch:smax_2s3z", num_envs=64, seed=0, env_kwargs={"attack_mode": "random"})

SMAX (JaxMARL, Rutherford et al. 2023) is a reimplementation of the StarCraft Multi-Agent Challenge
without StarCraft II: two teams of units (marines, marauders, stalkers, zealots, zerglings,
hydralisks, each with its health, speed, attack, ranges and weapon cooldown) fight on a 32 x 32
map. The learning team ("allies") are the agents; the other team is driven by SMAX's heuristic
(walk towards the middle, chase what it sees, keep shooting the enemy it shot last, else the
closest in range). `MAPS` holds the SMAC maps SMAX ships and its SMACv2-style random scenarios
(`smacv2_<n>_units`: random unit types, units surrounding or facing each other).

One agent step is `world_steps_per_env_step` (8) world ticks of 1/16 s. In each tick every unit
moves by its decoded movement, every valid attack (target alive and in range, weapon cooled
down) lowers its target's health at once, cooldowns tick, units that touch the map's edge die,
and overlapping live units are pushed apart. Actions: 0-3 move (up, right, down, left), 4 stop,
5 + k attack enemy k; `action_mask` allows an attack only on a live enemy in range and only the
stop action to a dead unit, whose `alive` is False from the step after it died. The reward, the
same for every ally, is the enemies' lost health as a fraction of their full health, averaged
over the enemies, plus 1 for a won battle (every enemy dead, an ally alive). An episode ends when
one team is dead (`terminated`) or after `max_steps` + 1 steps (`truncated`; SMAX checks the limit
before counting the step), for every ally, the dead ones included: as in SMAC a dead unit stays in
the team until the battle ends, with `alive` False and the team's reward, so a unit that dies for
a win shares the win (docs/envs.md, agents that leave early). `VecStep.episode_won` and
`take_episode_wins()` report battles won.

Observations and the global state are SMAX's ("unit_list"): each ally sees, for every other unit
within its sight range (allies first, then enemies, in index order), [health fraction, position
relative to its own divided by its sight range, last movement (x, y), last attack action /
largest action index, weapon cooldown fraction, one-hot unit type], then its own [health fraction,
position / map size, cooldown fraction, one-hot type]; zeros for what is dead or out of sight.
The state is every unit's [health fraction, position, cooldown, one-hot type] (zeros when dead),
then every unit's team and type.

Every copy lives in a few tensors with the copies first: positions `(E, U, 2)` and health,
cooldowns, types, last actions `(E, U)` for the U = allies + enemies units (allies first, SMAX's
order), and the heuristic enemy's memory (`(E, K, 2)` target, `(E, K)` last target). A step is a
handful of tensor operations over all copies and units at once, no Python loop over copies or
units. Random draws (initial positions, weapon cooldown jitter, the enemy's choice among the
units it sees) come from one torch generator per env object, so one seed gives other (equally
distributed) battles than JaxMARL's; `tests/test_torch_smax.py` hands both the same draws and
checks observations, states, rewards, ends and masks agree to within 1e-5 on every map.
Not ported: SMAX's continuous actions and "conic" observations (accepted only at their
defaults), self-play with both teams learning, and rendering.
"""
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, Optional, Tuple, Union

import numpy as np
import torch

from envs.errors import EnvError, check_arguments, did_you_mean
from envs.pettingzoo_vec import VecStep
from envs.tensor_state import load_tensors, save_tensors

# Unit statistics, SMAX's values (JaxMARL smax_env.py), one entry per unit type.
UNIT_TYPES = ("marine", "marauder", "stalker", "zealot", "zergling", "hydralisk")
UNIT_SHORTHANDS = ("m", "M", "s", "Z", "z", "h")
VELOCITY = (3.15, 2.25, 4.13, 3.15, 4.13, 3.15)
ATTACK = (9.0, 10.0, 13.0, 8.0, 5.0, 12.0)
ATTACK_RANGE = (5.0, 6.0, 6.0, 2.0, 2.0, 5.0)
SIGHT_RANGE = (9.0, 10.0, 10.0, 9.0, 8.0, 9.0)
RADIUS = (0.375, 0.5625, 0.625, 0.5, 0.375, 0.625)
HEALTH = (45.0, 125.0, 160.0, 150.0, 35.0, 80.0)
WEAPON_COOLDOWN = (0.61, 1.07, 1.87, 0.86, 0.5, 0.59)
N_TYPES = len(UNIT_TYPES)
N_MOVES = 5  # up, right, down, left, stop
UNIT_FEATURES = 7 + N_TYPES  # how one unit looks to another
OWN_FEATURES = 4 + N_TYPES  # how a unit sees itself (and a unit's block of the state)

M, S, Z, H = 0, 2, 3, 5  # marine, stalker, zealot, hydralisk


@dataclass(frozen=True)
class SmaxMap:
    """A scenario: the unit types of each team (type indices), or, for the SMACv2-style maps,
    only the team sizes with random types and the surround-or-reflect random start positions."""
    allies: Tuple[int, ...]
    enemies: Tuple[int, ...]
    random_units: bool = False  # SMACv2: types drawn uniformly, start positions surround or reflect


def _smacv2(n: int) -> SmaxMap:
    return SmaxMap((M,) * n, (M,) * n, random_units=True)


MAPS: Dict[str, SmaxMap] = {
    "3m": SmaxMap((M,) * 3, (M,) * 3),
    "8m": SmaxMap((M,) * 8, (M,) * 8),
    "25m": SmaxMap((M,) * 25, (M,) * 25),
    "2s3z": SmaxMap((S, S, Z, Z, Z), (S, S, Z, Z, Z)),
    "3s5z": SmaxMap((S,) * 3 + (Z,) * 5, (S,) * 3 + (Z,) * 5),
    "5m_vs_6m": SmaxMap((M,) * 5, (M,) * 6),
    "10m_vs_11m": SmaxMap((M,) * 10, (M,) * 11),
    "27m_vs_30m": SmaxMap((M,) * 27, (M,) * 30),
    "3s5z_vs_3s6z": SmaxMap((S,) * 3 + (Z,) * 5, (S,) * 3 + (Z,) * 6),
    "3s_vs_5z": SmaxMap((S,) * 3, (Z,) * 5),
    "6h_vs_8z": SmaxMap((H,) * 6, (Z,) * 8),
    "smacv2_5_units": _smacv2(5),
    "smacv2_10_units": _smacv2(10),
    "smacv2_20_units": _smacv2(20),
}
_SMACV2 = re.compile(r"^smacv2_(-?\d+)_units$")  # any team size: smacv2_7_units

# The scenario arguments (SMAX's names and defaults); `make` checks them.
ARGUMENTS = {
    "max_steps": 100,  # the time limit (SMAX ends the episode after max_steps + 1 agent steps)
    "attack_mode": "closest",  # how the heuristic enemy picks a target in range: "closest" or "random"
    "enemy_shoots": True,  # False: the enemy only walks (an easy warm-up)
    "won_battle_bonus": 1.0,
    "walls_cause_death": True,  # a unit that touches the map's edge dies
    "see_enemy_actions": True,  # whether a unit sees its enemies' last actions
    "map_width": 32,
    "map_height": 32,
    "world_steps_per_env_step": 8,
    "time_per_step": 1.0 / 16,  # seconds of one world tick
    "action_type": "discrete",  # SMAX's continuous actions are not ported
    "observation_type": "unit_list",  # SMAX's "conic" observations are not ported
}
LIMITS = {"max_steps": (1, None), "attack_mode": ["closest", "random"], "map_width": (1, None),
          "map_height": (1, None), "world_steps_per_env_step": (1, None), "time_per_step": (1e-9, None),
          "action_type": ["discrete"], "observation_type": ["unit_list"]}


def scenario(name: str) -> SmaxMap:
    """The SmaxMap of a map name ('3m', 'smacv2_10_units', ...); EnvError names the maps there are."""
    found = _SMACV2.match(name)
    if found:
        n = int(found.group(1))
        if n < 1:
            raise EnvError(f"torch:smax_{name}: a team needs at least one unit, got {n}")
        return _smacv2(n)
    if name not in MAPS:
        raise EnvError(f"unknown SMAX map {name!r}; {did_you_mean(name, MAPS, 'torch:smax_')}maps: "
                       f"{', '.join('torch:smax_' + m for m in MAPS)} (and torch:smax_smacv2_<n>_units for any n)")
    return MAPS[name]


class TorchSMAX:
    """E copies of one SMAX map against the heuristic enemy, in the batched adapter's shape
    (PettingZooVecEnv's attributes and `VecStep`, as torch tensors on `device`)."""

    discrete, continuous_actions, has_action_mask = True, False, True
    dtype = torch.float32

    def __init__(self, map_name: str, num_envs: int, seed: int = 0, device: Union[str, torch.device] = "cpu",
                 max_steps: Optional[int] = 100, attack_mode: str = "closest", enemy_shoots: bool = True,
                 won_battle_bonus: float = 1.0, walls_cause_death: bool = True, see_enemy_actions: bool = True,
                 map_width: int = 32, map_height: int = 32, world_steps_per_env_step: int = 8,
                 time_per_step: float = 1.0 / 16, action_type: str = "discrete", observation_type: str = "unit_list"):
        if num_envs < 1:
            raise EnvError(f"num_envs must be at least 1, got {num_envs}")
        self.map_name, self.map = map_name, scenario(map_name)
        self.num_envs, self.seed, self.device = num_envs, seed, torch.device(device)
        self.max_steps = max_steps if max_steps is not None else np.iinfo(np.int64).max
        self.attack_mode, self.enemy_shoots, self.won_battle_bonus = attack_mode, enemy_shoots, won_battle_bonus
        self.walls_cause_death, self.see_enemy_actions = walls_cause_death, see_enemy_actions
        self.width, self.height = map_width, map_height
        self.substeps, self.dt = world_steps_per_env_step, time_per_step
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

        A, K = len(self.map.allies), len(self.map.enemies)
        U, dev = A + K, self.device
        self.n_allies, self.n_enemies, self.n_units = A, K, U
        f32 = dict(dtype=torch.float32, device=dev)
        table = {name: torch.tensor(values, **f32) for name, values in (
            ("velocity", VELOCITY), ("attack", ATTACK), ("attack_range", ATTACK_RANGE), ("sight", SIGHT_RANGE),
            ("radius", RADIUS), ("health", HEALTH), ("cooldown", WEAPON_COOLDOWN))}
        self.unit_table = table  # per unit type (N_TYPES,)
        self.map_size = torch.tensor([map_width, map_height], **f32)
        self.team = torch.cat([torch.zeros(A), torch.ones(K)]).to(**f32)  # (U,) 0 allies, 1 enemies
        self.is_enemy = self.team.bool()
        # the largest action index of each unit's team (the last attack action is observed divided by it)
        self.max_action = torch.cat([torch.full((A,), K + N_MOVES - 1.0), torch.full((K,), A + N_MOVES - 1.0)]).to(**f32)
        # whom ally i sees in each of its U - 1 slots: the other units in index order, allies first (SMAX's
        # enemies see theirs backwards, their own side first: enemy_actions reads the allies so)
        order = [[j for j in range(U) if j != i] for i in range(A)]
        self.seen = torch.tensor(order, dtype=torch.long, device=dev)  # (N, U - 1)
        self.move_vectors = self._move_vectors()  # (N_MOVES, 2)
        self._eye_eps = torch.eye(U, **f32) + 1e-6
        self._origin = torch.zeros(2, **f32)
        self._unit_index = torch.arange(U, device=dev)[None]  # (1, U)

        # Adapter attributes (PettingZooVecEnv's names and meanings)
        self.agents = [f"ally_{i}" for i in range(A)]
        self.n_agents = A
        self.obs_dim = UNIT_FEATURES * (U - 1) + OWN_FEATURES
        self.obs_dims, self.obs_shape = [self.obs_dim] * A, (self.obs_dim,)
        self.state_dim = (OWN_FEATURES + 2) * U
        self.state_shape = (self.state_dim,)
        self.n_actions, self.action_dim = N_MOVES + K, 1
        self.action_dims = [self.n_actions] * A
        self.action_dim_mask = np.ones((A, self.n_actions), dtype=bool)

        E = num_envs
        self.pos = torch.zeros(E, U, 2, **f32)
        self.health = torch.zeros(E, U, **f32)
        self.alive = torch.ones(E, U, dtype=torch.bool, device=dev)
        self.types = torch.zeros(E, U, dtype=torch.long, device=dev)
        self.cooldown = torch.zeros(E, U, **f32)
        self.last_move = torch.zeros(E, U, 2, **f32)  # decoded movement of the last step
        self.last_attack = torch.zeros(E, U, dtype=torch.long, device=dev)  # last attack action, 0 for none
        self.steps = torch.zeros(E, dtype=torch.long, device=dev)
        self.enemy_target = torch.zeros(E, K, 2, **f32)  # the heuristic's default destination
        self.enemy_last_shot = torch.full((E, K), -1, dtype=torch.long, device=dev)  # whom it shot last, -1 none
        self._ep_return = torch.zeros(E, A, **f32)
        self._ep_length = torch.zeros(E, dtype=torch.long, device=dev)
        self.wins = torch.zeros(2, dtype=torch.long, device=dev)  # won, finished since take_episode_wins()
        self.reset()

    # ------------------------------------------------------------------ constants
    def _move_vectors(self) -> torch.Tensor:
        """SMAX's movement decoding, in float32 as it computes it: the diagonal (+-1, +-1) / sqrt(2)
        for actions 0-3 turned 45 degrees anticlockwise (up, right, down, left), zero for stop."""
        r = torch.tensor(1.0) / torch.tensor(2.0).sqrt()
        rows = []
        for a in range(N_MOVES - 1):
            v = torch.stack([(-1.0) ** (a // 2) * r, (-1.0) ** (a // 2 + a % 2) * r])
            rows.append(torch.stack([r * v[0] + (-r) * v[1], r * v[0] + r * v[1]]))
        rows.append(torch.zeros(2))
        return torch.stack(rows).to(self.device)

    def _read_stats(self) -> None:
        """Every unit's statistics through its type, kept until the types change (a new battle):
        (E, U) per statistic, the negative damage it deals, and (E, U, U) the radii of every pair added."""
        self.stats = {name: values[self.types] for name, values in self.unit_table.items()}
        self.stats["damage"] = -self.stats["attack"]
        self.stats["radius_sum"] = self.stats["radius"][:, :, None] + self.stats["radius"][:, None, :]
        self.stats["one_hot"] = torch.nn.functional.one_hot(self.types, N_TYPES).float()

    # ------------------------------------------------------------------ random draws
    def uniform(self, *shape, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """U(low, high) draws from this env's generator."""
        u = torch.rand(*shape, generator=self.gen, device=self.device)
        return u * (high - low) + low

    def _start_positions(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(n, U, 2) start positions and (n, U) unit types of n new battles, before overlaps are pushed apart."""
        A, K, w, h = self.n_allies, self.n_enemies, self.width, self.height
        if not self.map.random_units:
            centres = torch.tensor([[w / 4, h / 2]] * A + [[w / 4 * 3, h / 2]] * K, device=self.device)
            types = torch.tensor(self.map.allies + self.map.enemies, device=self.device).expand(n, -1)
            return centres + self.uniform(n, A + K, 2, low=-2.0, high=2.0), types
        ally_types = torch.randint(0, N_TYPES, (n, A), generator=self.gen, device=self.device)
        enemy_types = torch.zeros(n, K, dtype=torch.long, device=self.device)
        enemy_types[:, :min(A, K)] = ally_types[:, :min(A, K)]  # the same army on both sides
        surround = self.uniform(n)[:, None, None] < 0.5
        pos = torch.where(surround, self._surround(n), self._reflect(n))
        return pos, torch.cat([ally_types, enemy_types], 1)

    def _surround(self, n: int) -> torch.Tensor:
        """SMACv2's surround start: one team near the centre, the other in up to four groups on
        the lines from the centre to the corners; which team is inside is a coin flip."""
        A, K, w, h = self.n_allies, self.n_enemies, self.width, self.height
        centre = torch.tensor([w / 2, h / 2], device=self.device)
        corners = torch.tensor([[0.0, 0.0], [0.0, h], [w, 0.0], [w, h]], device=self.device)

        def draw(n_inside: int, n_outside: int):
            inside = centre + self.uniform(n, n_inside, 2, low=-2.0, high=2.0)
            group = torch.randint(0, 4, (n, n_outside), generator=self.gen, device=self.device)
            t = self.uniform(n, 4, 1)
            group_pos = t * centre + (1 - t) * corners  # (n, 4, 2)
            outside = group_pos.gather(1, group[..., None].expand(-1, -1, 2))
            return inside, outside + self.uniform(n, n_outside, 2, low=-2.0, high=2.0)

        ally_in, enemy_out = draw(A, K)
        enemy_in, ally_out = draw(K, A)
        allies_inside = torch.randint(0, 2, (n, 1, 1), generator=self.gen, device=self.device).bool()
        return torch.where(allies_inside, torch.cat([ally_in, enemy_out], 1), torch.cat([ally_out, enemy_in], 1))

    def _reflect(self, n: int) -> torch.Tensor:
        """SMACv2's reflect start: allies anywhere in the left half, the enemies their mirror
        image in the right half (extra enemies anywhere in the right half)."""
        A, K, w, h = self.n_allies, self.n_enemies, self.width, self.height
        allies = self.uniform(n, A, 2) * torch.tensor([w / 2, h], device=self.device)
        mirrored = torch.stack([w - allies[..., 0], allies[..., 1]], -1)[:, :min(A, K)]
        extra = self.uniform(n, max(K - A, 0), 2) * torch.tensor([w / 2, h], device=self.device)
        extra = extra + torch.tensor([w / 2, 0.0], device=self.device)
        return torch.cat([allies, mirrored, extra], 1)

    def step_draws(self) -> Dict[str, torch.Tensor]:
        """The random numbers one step uses, all U(0, 1): each unit's weapon cooldown jitter in every
        world tick (E, ticks, U), and each enemy's draws for the unit it walks to and, with
        attack_mode "random", the one it shoots (E, K)."""
        E, K = self.num_envs, self.n_enemies
        return {"cooldown": self.uniform(E, self.substeps, self.n_units), "walk_to": self.uniform(E, K),
                "shoot_at": self.uniform(E, K)}

    # ------------------------------------------------------------------ resets
    def reset_copies(self, idx: torch.Tensor, positions: Optional[torch.Tensor] = None,
                     unit_types: Optional[torch.Tensor] = None) -> None:
        """Start new battles in copies `idx`: full health, cooled weapons, the enemy's memory cleared,
        units placed at `positions` (n, U, 2) (drawn when None; tests hand JaxMARL's) and pushed apart
        where they overlap. `unit_types` (n, U) overrides the types (SMACv2 maps draw them)."""
        n = idx.numel()
        if n == 0:
            return
        pos, types = self._start_positions(n)
        if positions is not None:
            pos = torch.as_tensor(positions, dtype=torch.float32, device=self.device).reshape(n, self.n_units, 2)
        if unit_types is not None:
            types = torch.as_tensor(unit_types, dtype=torch.long, device=self.device).reshape(n, self.n_units)
        self.types[idx] = types
        self.health[idx] = self.unit_table["health"][types]
        self.alive[idx] = True
        self.cooldown[idx] = 0.0
        self.last_move[idx] = 0.0
        self.last_attack[idx] = 0
        self.steps[idx] = 0
        self.enemy_target[idx] = 0.0
        self.enemy_last_shot[idx] = -1
        radius = self.unit_table["radius"][types]
        self.pos[idx] = self._push_apart(pos, self.alive[idx], radius[:, :, None] + radius[:, None, :])
        self._read_stats()

    @property
    def acting(self) -> torch.Tensor:
        """(E, N) bool: the units alive to act in the coming step. The on-policy files whose critic sees a
        unit's own view credit what a unit receives after its death to its last live action (common/turns.py),
        instead of bootstrapping its death from the value of a dead unit's zero view, which no loss trains."""
        return self.alive[:, :self.n_allies].clone()

    def reset(self):
        """Start a new battle in every copy. Returns (obs (E, N, obs_dim), state (E, state_dim), action_mask)."""
        self.reset_copies(torch.arange(self.num_envs, device=self.device))
        self._ep_return.zero_()
        self._ep_length.zero_()
        return self.observe()

    # ------------------------------------------------------------------ the world
    def _push_apart(self, pos: torch.Tensor, alive: torch.Tensor, radius_sum: torch.Tensor) -> torch.Tensor:
        """Live units that overlap move apart: each by half of every overlap it is in, along the line
        between the two centres (SMAX's soft collision, one pass). Dead units stay where they are.
        radius_sum (n, U, U): the two units' radii added."""
        x, y = pos[..., 0], pos[..., 1]
        dx, dy = x[:, :, None] - x[:, None, :], y[:, :, None] - y[:, None, :]  # (n, U, U) from j to i
        dist = (dx * dx + dy * dy).sqrt() + self._eye_eps  # the eye keeps i from dividing by 0 with itself
        overlap = torch.relu(radius_sum / dist - 1.0) * (alive[:, :, None] & alive[:, None, :])
        pushed = pos + torch.stack([(dx * overlap).sum(2), (dy * overlap).sum(2)], -1) / 2
        return torch.where(alive[..., None], pushed, pos)

    def _tick(self, step: torch.Tensor, target: torch.Tensor, not_self: torch.Tensor, restart: torch.Tensor) -> None:
        """One world tick for every copy. step (E, U, 2) how far each unit moves in a tick, target
        (E, U) whom each unit attacks, not_self (E, U) whether that is another unit (an attack),
        restart (E, U) the cooldown a shot starts (the type's plus this tick's jitter)."""
        pos, alive, stat = self.pos, self.alive, self.stats
        # moves from where every unit stood at the start of the tick; no further than the edge
        moved = torch.where(alive[..., None], torch.clamp(pos + step, min=self._origin, max=self.map_size), pos)
        # attacks, all at once: in range, both alive, not itself, weapon ready
        in_range = _norm(pos - pos.gather(1, target[..., None].expand(-1, -1, 2))) < stat["attack_range"]
        valid = in_range & alive & alive.gather(1, target) & not_self & (self.cooldown <= 0.0)
        self.health = torch.clamp(self.health.scatter_add(1, target, stat["damage"] * valid), min=0.0)
        self.cooldown = self.cooldown + torch.where(valid, restart - self.cooldown, -self.dt)
        if self.walls_cause_death:
            # moved is clamped to the map: touching an edge is standing on it
            touching = ((moved == 0.0) | (moved == self.map_size)).any(-1)
            self.health = self.health.masked_fill(touching, 0.0)
        self.alive = self.health > 0
        self.pos = self._push_apart(moved, self.alive, stat["radius_sum"])

    def _decode(self, actions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actions (E, U) of both teams -> movement vectors (E, U, 2), attacked unit (E, U) (the unit
        itself for a non-attack) and the attack action kept as the last one (0 for a non-attack).
        Attack k of an ally hits enemy k; of an enemy, ally A - 1 - k (enemies list allies backwards)."""
        A = self.n_allies
        attack = actions >= N_MOVES
        move = self.move_vectors[torch.where(attack, torch.full_like(actions, N_MOVES - 1), actions)]
        k = actions - N_MOVES
        hit = torch.where(self.is_enemy, A - 1 - k, A + k)
        target = torch.where(attack, hit, self._unit_index.expand_as(actions))
        return move, target, torch.where(attack, actions, torch.zeros_like(actions))

    # ------------------------------------------------------------------ what units see
    def _battles(self, rows: Optional[torch.Tensor] = None) -> SimpleNamespace:
        """The battle tensors (and the units' statistics) of copies `rows`, or of all copies."""
        pick = (lambda t: t) if rows is None else (lambda t: t[rows])
        view = SimpleNamespace(**{name: pick(getattr(self, name)) for name in self._BATTLE})
        view.stats = {name: pick(value) for name, value in self.stats.items()}
        return view

    def unit_observations(self, b: SimpleNamespace) -> torch.Tensor:
        """(n, N, obs_dim): what every ally of battles `b` sees (SMAX's observation of a unit)."""
        n, A = b.pos.shape[0], self.n_allies
        alive, one_hot = b.alive, b.stats["one_hot"]
        health_frac = b.health / b.stats["health"]
        cool_frac = torch.clamp(b.cooldown / b.stats["cooldown"], 0.0, 1.0)
        last_attack = b.last_attack.float() / self.max_action
        # (n, U, F) every unit's features as others see it; its position relative to the viewer goes in 1:3
        seen_as = torch.cat([health_frac[..., None], b.last_move, b.last_move, last_attack[..., None],
                             cool_frac[..., None], one_hot], -1)
        seen = self.seen  # (N, U - 1) whom each ally sees in its slots
        others = seen_as[:, seen]  # (n, N, U - 1, F)
        offset = b.pos[:, seen] - b.pos[:, :A, None]  # (n, N, U - 1, 2)
        sight = b.stats["sight"][:, :A, None]  # (n, N, 1) the viewer's
        others[..., 1:3] = offset / sight[..., None]
        if not self.see_enemy_actions:  # last actions of the other team read as zeros
            others[..., 3:6] *= ~self.is_enemy[seen][None, :, :, None]
        visible = (_norm(offset) < sight) & alive[:, :A, None] & alive[:, seen]
        own = torch.cat([health_frac[..., None], b.pos / self.map_size, cool_frac[..., None], one_hot], -1)[:, :A]
        return torch.cat([(others * visible[..., None]).reshape(n, A, -1), own * alive[:, :A, None]], -1)

    def global_state(self, b: SimpleNamespace) -> torch.Tensor:
        """(n, state_dim): every unit's [health fraction, position, cooldown, one-hot type] (zeros when
        dead), then every unit's team and type."""
        n = b.pos.shape[0]
        units = torch.cat([(b.health / b.stats["health"])[..., None], b.pos, b.cooldown[..., None],
                           b.stats["one_hot"]], -1) * b.alive[..., None]
        return torch.cat([units.reshape(n, -1), self.team.expand(n, -1), b.types.float()], -1)

    def action_mask(self, b: Optional[SimpleNamespace] = None) -> torch.Tensor:
        """(E, N, n_actions) bool: a live ally may move, stop, and attack any live enemy within its
        attack range; a dead one may only stop."""
        b, A = b or self._battles(), self.n_allies
        gap = b.pos[:, A:][:, None] - b.pos[:, :A, None]  # (n, A, K, 2)
        alive = b.alive[:, :A, None]
        shootable = (_norm(gap) < b.stats["attack_range"][:, :A, None]) & b.alive[:, None, A:] & alive
        return torch.cat([alive.expand(-1, -1, N_MOVES - 1), torch.ones_like(alive), shootable], -1)

    def observe(self, rows: Optional[torch.Tensor] = None):
        """(obs, state, action_mask) of the battles as they stand. With `rows`, only those copies are
        looked at again (the others kept from the last call: after an auto-reset of a few copies)."""
        b = self._battles(rows)
        unit_obs, state, mask = self.unit_observations(b), self.global_state(b), self.action_mask(b)
        if rows is not None:  # new tensors: what the last call returned stays as it was (final_obs)
            unit_obs = self._unit_obs.index_copy(0, rows, unit_obs)
            state = self._state.index_copy(0, rows, state)
            mask = self._mask.index_copy(0, rows, mask)
        self._unit_obs, self._state, self._mask = unit_obs, state, mask
        return unit_obs, state, mask

    # ------------------------------------------------------------------ the heuristic enemy
    def enemy_actions(self, walk_to: torch.Tensor, shoot_at: torch.Tensor) -> torch.Tensor:
        """(E, K) SMAX's heuristic enemy, reading what each enemy observes: if an ally is in
        range, shoot (the one shot last while it stays in range, else the closest, or a random one
        with attack_mode "random"); otherwise walk (action 0-3 closest to the direction) towards a
        random visible ally, or, seeing none, towards its start point turned 180 degrees about the
        map's centre. walk_to, shoot_at: (E, K) U(0, 1) draws."""
        A = self.n_allies
        # what each enemy sees of the allies, as its observation holds it (allies listed backwards, so that
        # slot k is attack action 5 + k; positions divided by its sight range and multiplied back)
        alive, enemies = self.alive, slice(A, None)
        kind = torch.where(alive[:, enemies], self.types[:, enemies], 0)  # the heuristic reads a dead unit as type 0
        sight = self.unit_table["sight"][kind][..., None]  # (E, K, 1)
        own_pos = self.pos[:, enemies] / self.map_size * self.map_size * alive[:, enemies, None]
        offset = self.pos[:, None, :A].flip(2) - self.pos[:, enemies, None]  # (E, K, A, 2)
        visible = (_norm(offset) < sight) & alive[:, enemies, None] & alive[:, None, :A].flip(2)
        foe_pos = offset / sight[..., None] * sight[..., None] * visible[..., None]  # relative, map units
        foe_dist = _norm(foe_pos)
        shootable = (foe_dist < self.unit_table["attack_range"][kind][..., None]) & visible
        can_shoot = shootable.any(-1)
        if self.attack_mode == "random":
            pick = _choose(shootable.float(), shoot_at)
        else:
            far = self.map_size.square().sum().sqrt()  # farther than any unit can shoot
            pick = torch.where(shootable, foe_dist, far).argmin(-1)
        last = self.enemy_last_shot
        keep = (last != -1) & shootable.gather(-1, last.clamp(min=0)[..., None])[..., 0]
        aim = torch.where(keep, last, pick)  # keep shooting the same ally while it is in range
        self.enemy_last_shot = torch.where(shootable.gather(-1, aim[..., None])[..., 0], aim, torch.full_like(aim, -1))
        # where to walk: a random visible ally, else the default destination set at the first step
        chosen = _choose(visible.float(), walk_to).clamp(max=A - 1)
        towards_ally = (foe_pos + own_pos[..., None, :]).gather(2, chosen[..., None, None].expand(-1, -1, 1, 2))[:, :, 0]
        fresh = (self.enemy_target == 0).all(-1) & (last == -1)
        centre = self.map_size / 2
        self.enemy_target = torch.where(fresh[..., None], -(own_pos - centre) + centre, self.enemy_target)
        goal = torch.where(visible.any(-1)[..., None], towards_ally, self.enemy_target)
        way = goal - own_pos
        walk = torch.stack([way[..., 1], way[..., 0], -way[..., 1], -way[..., 0]], -1).argmax(-1)  # up right down left
        return torch.where(can_shoot & self.enemy_shoots, aim + N_MOVES, walk)

    # ------------------------------------------------------------------ the adapter API
    def step(self, actions, draws: Optional[Dict[str, torch.Tensor]] = None) -> VecStep:
        """Step every copy. actions: (E, N) ints (tensor or array). `draws` (tests) replaces the
        step's random numbers (`step_draws()`'s keys and shapes)."""
        actions = torch.as_tensor(actions, device=self.device).long().reshape(self.num_envs, self.n_allies)
        draws = draws if draws is not None else self.step_draws()
        A, E = self.n_allies, self.num_envs
        acted = self.alive[:, :A].clone()  # who was alive to act in this step
        enemy = self.enemy_actions(draws["walk_to"], draws["shoot_at"])
        move, target, kept = self._decode(torch.cat([actions, enemy], 1))
        step = move * self.stats["velocity"][..., None] * self.dt  # how far each unit moves in one tick
        # a shot restarts the cooldown at the type's value plus a jitter in [-dt, 2 dt) (SC2's randomness)
        restart = self.stats["cooldown"][:, None] + (draws["cooldown"] * (2 * self.dt - -self.dt) + -self.dt)
        not_self = target != self._unit_index
        health_before = self.health
        for t in range(self.substeps):
            self._tick(step, target, not_self, restart[:, t])
        self.last_move, self.last_attack = move, kept
        allies_dead = ~self.alive[:, :A].any(-1)
        enemies_dead = ~self.alive[:, A:].any(-1)
        battle_over = allies_dead | enemies_dead
        done = battle_over | (self.steps >= self.max_steps)  # SMAX tests the limit before counting the step
        self.steps += 1
        lost_health = ((self.health - health_before) / self.stats["health"])[:, A:].sum(-1)
        won = enemies_dead & ~allies_dead
        reward = lost_health.abs() / self.n_enemies + torch.where(won, self.won_battle_bonus, 0.0)
        reward = reward[:, None].expand(E, A).contiguous()
        final_obs, final_state, final_mask = self.observe()
        self._ep_return += reward
        self._ep_length += 1
        episode_return = torch.where(done[:, None], self._ep_return, torch.zeros_like(self._ep_return))
        episode_length = torch.where(done, self._ep_length, torch.zeros_like(self._ep_length))
        episode_won = done & won
        self.wins += torch.stack([episode_won.sum(), done.sum()])
        # the team's episode: every unit is terminated when the battle is decided and truncated at the time limit,
        # a dead one included (as in SMAC it stays in the team, with alive = 0, and its reward is the team's: a unit
        # that dies for a win shares the win)
        terminated = (battle_over & done)[:, None].expand(E, A)
        obs, state, mask = final_obs, final_state, final_mask
        if bool(done.any()):
            self._ep_return[done] = 0.0
            self._ep_length[done] = 0
            ended = torch.nonzero(done).squeeze(1)
            self.reset_copies(ended)
            obs, state, mask = self.observe(ended)
        return VecStep(obs=obs, state=state, reward=reward, terminated=terminated,
                       truncated=done[:, None] & ~terminated, alive=acted, action_mask=mask,
                       final_obs=final_obs, final_state=final_state, done=done, episode_return=episode_return,
                       episode_length=episode_length, final_action_mask=final_mask, episode_won=episode_won,
                       acting=self.acting)

    def take_episode_wins(self) -> Tuple[int, int]:
        """(won, finished) battles since the last call."""
        won, finished = (int(x) for x in self.wins.tolist())
        self.wins.zero_()
        return won, finished

    def sample_actions(self, rng: Optional[np.random.Generator] = None) -> torch.Tensor:
        """(E, N) uniform random legal actions."""
        weights = self.action_mask().float()
        return torch.multinomial(weights.reshape(-1, self.n_actions), 1, generator=self.gen).reshape(
            self.num_envs, self.n_agents)

    # ------------------------------------------------------------------ exact resume
    _BATTLE = ("pos", "health", "alive", "types", "cooldown", "last_move", "last_attack")
    _STATE = _BATTLE + ("steps", "enemy_target", "enemy_last_shot", "_ep_return", "_ep_length", "wins")

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """Every copy's battle, the episodes' running returns and the generator, as plain tensors."""
        return save_tensors(self, self._STATE)

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        """Put back what `state_dict()` saved (same map and number of copies)."""
        load_tensors(self, state, f"torch:smax_{self.map_name}", "another map or number of copies")
        self._read_stats()
        self.observe()

    def render(self):
        raise NotImplementedError("torch:smax does not render; JaxMARL's SMAX can (jaxmarl:smax_<map>, with its "
                                  "own visualiser)")

    def close(self) -> None:
        pass


def _norm(v: torch.Tensor) -> torch.Tensor:
    """The length of 2-D vectors (..., 2), summed as x * x + y * y (as jnp.linalg.norm does)."""
    return (v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1]).sqrt()


def _choose(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(E, K) one index per row of `weights` (E, K, n) drawn in proportion to them, by inverting the
    cumulative sum with the U(0, 1) draw u, as jax.random.choice does."""
    p = weights / weights.sum(-1, keepdim=True)
    cum = p.cumsum(-1)
    r = cum[..., -1:] * (1 - u[..., None])
    return torch.searchsorted(cum, r)[..., 0].clamp(max=weights.shape[-1] - 1)


def arguments(name: str) -> Dict[str, object]:
    """The scenario arguments with their defaults (SMAX's names)."""
    scenario(name)
    return dict(ARGUMENTS)


def make(name: str, num_envs: int, seed: int = 0, env_kwargs: Optional[Dict[str, object]] = None,
         device=None) -> TorchSMAX:
    """E copies of map `name` ('3m', 'smacv2_5_units', ...); arguments checked first (EnvError)."""
    kwargs = dict(env_kwargs or {})
    check_arguments(f"torch:smax_{name}", kwargs, arguments(name), limits=LIMITS)
    return TorchSMAX(name, num_envs, seed, device or "cpu", **kwargs)


__all__ = ["TorchSMAX", "MAPS", "UNIT_TYPES", "make", "arguments", "scenario"]
