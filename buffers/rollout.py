"""MultiAgentRolloutBuffer: stores multi-agent transitions per agent and batches them.

The interface follows the design note `seeds/rollout_buffer.md`: the buffer is built with the
number of agents; `current_episode` keeps, for every key, a list per agent with one entry per
step, so a trajectory can be traced back to one agent; `end_episode` closes it and appends it to
`episodes`; `extras` holds controller and env state with the same per-agent layout (for example
`prev_hidden_states`, `alive`, `action_masks`).

Where the names differ from the note's, they say what the entries hold:
    obs, next_obs       the note's states, next_states: each agent's own observation
    values              the note's state_values: the critic's value of the step
    terminated          the note's dones: the task ended the episode (no bootstrap); `truncated`
                        marks time limits (bootstrap from the final observation, whose value the
                        files that need it store as the extra `final_values`)
    team                entries of the whole team, one per env copy (global state, team reward):
                        stored once, not copied for every agent
The note's episode statistics (per-agent length and reward) are not kept: the buffer often holds
a T-step rollout that cuts episodes, and the returns and lengths the console and TensorBoard show
are counted over whole episodes by `common.run_utils.RunRecorder` from the env's episode ends.

With E env copies stepped together, one entry is a step of all copies: the element at
`current_episode["rewards"][n][t]` is a tensor of shape (E,), `["obs"][n][t]` is (E, obs_dim),
`["team"]["global_states"][t]` is (E, state_dim). A rollout of T steps may cross episode
boundaries; `terminated` and `truncated` say where episodes end. The buffer does no RL maths.

`batch()` turns the stored steps into whole `(T, E, N, ...)` tensors (team entries `(T, E, ...)`) on
the training device, for on-policy updates; `sample_episodes()` draws stored episodes for replay,
through the padded store of `buffers/replay_store.py`.
"""
from collections import deque
from collections.abc import Sequence
from typing import Dict, List, Optional

import torch

from buffers.replay_store import PaddedEpisodeStore

CORE_KEYS = ("obs", "values", "actions", "log_probs", "rewards", "next_obs", "terminated", "truncated")
RENAMED = {"states": "obs", "next_states": "next_obs", "state_values": "values", "dones": "terminated"}  # the note's


class Steps(Sequence):
    """One key's steps, `x[t]`: a list of per-step tensors. Storing a step is one list append and
    batching one `torch.stack`."""

    def __init__(self):
        self.steps: List[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, t):
        return self.steps[t]

    def stack(self) -> torch.Tensor:
        return torch.stack(self.steps)  # (T, E, ...)


class PerAgentSteps(Steps):
    """The design note's per-agent nested list, read as `x[n][t]` (outer length N, inner T),
    kept underneath as one (E, N, ...) tensor per step, whatever the number of agents. `x[n][t]`
    is a view, not a copy; `stack()` gives (T, E, N, ...)."""

    def __init__(self, n_agents: int):
        super().__init__()
        self.n_agents = n_agents

    def __len__(self) -> int:
        return self.n_agents

    def __getitem__(self, n):
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(self.n_agents))]
        if not -self.n_agents <= n < self.n_agents:
            raise IndexError(f"agent index {n} out of range for {self.n_agents} agents")
        return _AgentSteps(self.steps, n % self.n_agents)


class _AgentSteps(Sequence):
    """One agent's steps: `[t]` is its (E, ...) slice of step t."""

    def __init__(self, steps: List[torch.Tensor], n: int):
        self.steps, self.n = steps, n

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [step[:, self.n] for step in self.steps[t]]
        return self.steps[t][:, self.n]


class MultiAgentRolloutBuffer:
    """Per-agent transition storage with batching to (T, E, N, ...) tensors.

    Args:
        n_agents: N, the number of agents (agent order is the env's).
        capacity: how many completed episodes `episodes` keeps (oldest dropped); None keeps all.
    """

    def __init__(self, n_agents: int, capacity: Optional[int] = None):
        self.capacity = capacity
        self.reset(n_agents)

    def reset(self, n_agents: int) -> None:
        """Forget everything and start over with `n_agents` agents."""
        self.n_agents = n_agents
        self.episodes: deque = deque(maxlen=self.capacity)
        self.store = PaddedEpisodeStore(self.capacity)
        self.unfit = 0  # stored episodes that have no slot in the store
        self.pending = 0  # newest episodes not yet written to the store (on-policy users never sample)
        self.reset_current_episode()

    def reset_current_episode(self) -> None:
        """Drop the steps of the current episode and start an empty one."""
        self.current_episode = self._new_episode()

    def _new_episode(self) -> Dict:
        episode: Dict = {key: PerAgentSteps(self.n_agents) for key in CORE_KEYS}
        episode.update(extras={}, team={})
        return episode

    def __len__(self) -> int:
        """Steps stored in the current episode."""
        return len(self.current_episode["rewards"].steps)

    @property
    def stored_sequences(self) -> int:
        """(episode, env copy) sequences held in `episodes`: what `sample_episodes` draws from."""
        return sum(episode["rewards"].steps[0].shape[0] for episode in self.episodes if episode["rewards"].steps)

    def add_transition(self, obs, actions, rewards, next_obs, terminated, log_probs=None, values=None,
                       truncated=None, team=None, **extras) -> None:
        """Store one step. Every argument has the agent axis second: (E, N, ...); `team` maps names
        to entries of the whole team, (E, ...), e.g. global_states=(E, S).

        `extras` are controller or environment extras with the per-agent layout, e.g.
        prev_hidden_states=(E, N, H), alive=(E, N), action_masks=(E, N, A).
        """
        given = dict(obs=obs, actions=actions, rewards=rewards, next_obs=next_obs, terminated=terminated,
                     log_probs=log_probs, values=values, truncated=truncated)
        episode = self.current_episode
        steps_before = len(self)
        for key, value in given.items():
            if value is not None:
                self._append(episode[key], value, key)
        for group, entries, make in (("extras", extras, lambda: PerAgentSteps(self.n_agents)),
                                     ("team", team or {}, Steps)):
            for key, value in entries.items():
                if key not in episode[group]:
                    if steps_before > 0:
                        raise ValueError(f"{group} entry {key!r} appeared in the middle of an episode")
                    episode[group][key] = make()
                self._append(episode[group][key], value, key)

    def _append(self, steps: Steps, value: torch.Tensor, key: str) -> None:
        if isinstance(steps, PerAgentSteps) and (value.dim() < 2 or value.shape[1] != self.n_agents):
            raise ValueError(f"{key} has shape {tuple(value.shape)}; expected (E, N={self.n_agents}, ...) "
                             "(an entry of the whole team, without the agent axis, goes in team=)")
        steps.steps.append(value)

    def entries(self, episode: Dict) -> Dict[str, Steps]:
        """Every stored key of an episode: the core keys given, its extras and its team entries."""
        found = {k: episode[k] for k in CORE_KEYS if episode[k].steps}
        for group in ("extras", "team"):
            for key, steps in episode[group].items():
                if key in found:
                    raise ValueError(f"{group} entry {key!r} has the name of another entry")
                found[key] = steps
        return found

    def end_episode(self) -> Dict:
        """Close the current episode: append it to `episodes` (dropping the oldest at capacity) and
        start an empty one, so later writes cannot change the episode handed back."""
        episode = self.current_episode
        if self.capacity is not None and len(self.episodes) == self.capacity:  # the deque drops the oldest
            self._forget(self.episodes[0])
        self.episodes.append(episode)
        self.pending = min(self.pending + 1, len(self.episodes))
        self.reset_current_episode()
        return episode

    def _forget(self, episode: Dict) -> None:
        if "_slot" in episode:
            self.store.release(episode["_slot"])
        self.unfit -= bool(episode.get("_unfit"))

    def batch(self, device: Optional[torch.device] = None, keys=None) -> Dict[str, torch.Tensor]:
        """The current episode as (T, E, N, ...) tensors on `device` (team entries (T, E, ...));
        every key stored, or those named in `keys`."""
        T = len(self)
        out = {}
        for key, steps in self.entries(self.current_episode).items():
            if len(steps.steps) != T:
                raise ValueError(f"{key!r} holds {len(steps.steps)} steps but rewards hold {T}: "
                                 "every step must give the same keys")
            if keys is None or key in keys:
                out[key] = steps.stack().to(device, non_blocking=True)
        return out

    def sample_episodes(self, batch_size: int, generator: Optional[torch.Generator] = None,
                        device: Optional[torch.device] = None, keys=None) -> Dict[str, torch.Tensor]:
        """Draw `batch_size` stored (episode, env copy) sequences, padded to the longest.

        Returns (B, T_max, N, ...) tensors (team entries (B, T_max, ...)) plus `filled` (B, T_max), 1
        where a step is real. Each stored episode contributes its E env copies as separate sequences,
        gathered from the padded store (episodes that have no slot there are stacked and padded one by one).
        """
        if not self.episodes:
            raise ValueError("no completed episodes stored; call end_episode() first")
        self._flush_pending()
        if self.store.tensors and self.unfit == 0:  # every stored episode has the store's E copies
            E = self.store.copies
            picks = torch.randint(len(self.episodes) * E, (batch_size,), generator=generator)
            episode_idx, copy_idx = (picks // E).tolist(), (picks % E).tolist()
        else:
            copies = [episode["rewards"].steps[0].shape[0] for episode in self.episodes]  # E of each
            offsets = torch.tensor([0] + copies).cumsum(0)
            picks = torch.randint(int(offsets[-1]), (batch_size,), generator=generator)
            episode_idx = torch.searchsorted(offsets[1:], picks, right=True).tolist()
            copy_idx = (picks - offsets[episode_idx]).tolist()
        slots = [self.episodes[i].get("_slot") for i in episode_idx]
        if self.store.tensors and None not in slots:  # fast path: gather from the padded store
            return self.store.gather(slots, copy_idx, keys, device)
        stacked = [self._stacked(self.episodes[i], keys) for i in episode_idx]
        T_max = max(next(iter(st.values())).shape[0] for st in stacked)
        out: Dict[str, List[torch.Tensor]] = {}
        filled = torch.zeros(batch_size, T_max)
        for b, (st, e) in enumerate(zip(stacked, copy_idx)):
            for key, full in st.items():
                seq = full[:, e]  # (T, N, ...)
                T = seq.shape[0]
                if T < T_max:
                    seq = torch.cat([seq, seq.new_zeros((T_max - T,) + seq.shape[1:])])
                out.setdefault(key, []).append(seq)
            filled[b, :T] = 1.0
        batch = {k: torch.stack(v).to(device) for k, v in out.items()}
        batch["filled"] = filled.to(device)
        return batch

    def _flush_pending(self) -> None:
        """Write the newest, not yet stored episodes into the store (done when replay first needs them)."""
        for i in range(len(self.episodes) - self.pending, len(self.episodes)):
            episode = self.episodes[i]
            stacked = self._stacked(episode)
            slot = self.store.put(stacked)  # stacked's tensors become views of the slot
            if slot is None:
                episode["_unfit"] = True
                self.unfit += 1
                continue
            episode["_slot"] = slot
            episode["_stacked"].update(stacked)
            for key, steps in self.entries(episode).items():
                steps.steps = list(stacked[key].unbind(0))
        self.pending = 0

    def _stacked(self, episode: Dict, keys=None) -> Dict[str, torch.Tensor]:
        """An episode's keys as (T, E, ...) tensors. The per-step lists are replaced by views of the
        stacked tensor, so the cache costs no extra memory and `x[n][t]` still works."""
        cache = episode.setdefault("_stacked", {})
        for key, steps in self.entries(episode).items():
            if key not in cache and (keys is None or key in keys):
                cache[key] = steps.stack()
                steps.steps = list(cache[key].unbind(0))
        return {k: v for k, v in cache.items() if keys is None or k in keys}

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> Dict:
        """Completed episodes as plain tensors (loadable with weights_only=True)."""
        episodes = []
        for episode in self.episodes:
            st = self._stacked(episode)
            # clone(): the cached tensors may be views of the padded store, and saving a view saves its whole storage
            episodes.append({group: {k: st[k].clone() for k in names}
                             for group, names in (("core", [k for k in CORE_KEYS if episode[k].steps]),
                                                  ("extras", episode["extras"]), ("team", episode["team"]))})
        return {"n_agents": self.n_agents, "capacity": self.capacity, "episodes": episodes}

    def load_state_dict(self, state: Dict) -> None:
        """Restore what `state_dict()` saved (the current episode starts empty). Checkpoints written
        before the keys were renamed (the note's `states`, `dones`, ...) load under the new names."""
        self.capacity = state["capacity"]
        self.reset(state["n_agents"])
        for saved in state["episodes"]:
            episode = self._new_episode()
            for key, full in saved["core"].items():
                episode[RENAMED.get(key, key)].steps = list(full.unbind(0))
            for group in ("extras", "team"):
                for key, full in saved.get(group, {}).items():
                    episode[group][key] = PerAgentSteps(self.n_agents) if group == "extras" else Steps()
                    episode[group][key].steps = list(full.unbind(0))
            self.current_episode = episode
            self.end_episode()
