"""The replay files' fast path: completed episodes kept in preallocated, zero-padded tensors.

`MultiAgentRolloutBuffer.sample_episodes` draws (episode, env copy) sequences of different
lengths. Stacking and padding each drawn sequence in Python costs a loop per draw; instead every
completed episode is written once into a slot of one `(slots, E, T_cap, ...)` tensor per key, and
a batch is one `index_select` per key (about 4x cheaper for 32 simple_spread sequences). The
episode's own per-step lists become views of its slot, so nothing is stored twice. On-policy
files never sample and never build a store.
"""
from typing import Dict, List, Optional

import torch


class PaddedEpisodeStore:
    """Slots of equal shape, one per stored episode; zero past each episode's length.

    An episode whose keys, number of env copies, trailing shapes, dtypes or device differ from the
    first one stored gets no slot (`put` returns None); the buffer then pads it on its own when drawn.
    """

    def __init__(self, capacity: Optional[int]):
        self.capacity = capacity  # the most episodes the buffer keeps: the store never grows past it
        self.tensors: Dict[str, torch.Tensor] = {}  # key -> (slots, E, T_cap, ...)
        self.lengths = torch.zeros(0, dtype=torch.long)  # (slots,) steps held in each slot
        self.free_slots: List[int] = []  # slots whose episode was dropped
        self.handed_out = 0  # slots ever handed out

    @property
    def copies(self) -> int:
        """E, the env copies of every stored episode (0 before the first)."""
        return next(iter(self.tensors.values())).shape[1] if self.tensors else 0

    def put(self, stacked: Dict[str, torch.Tensor]) -> Optional[int]:
        """Write an episode's (T, E, ...) tensors into a free slot and return it, replacing each
        tensor in `stacked` by a (T, E, ...) view of the slot; None if the episode does not fit."""
        T, E = next(iter(stacked.values())).shape[:2]
        if not self.tensors:
            self.tensors = {k: v.new_zeros((0, E, T) + v.shape[2:]) for k, v in stacked.items()}
        fits = stacked.keys() == self.tensors.keys() and E == self.copies and all(
            v.shape[1] == E and v.shape[2:] == self.tensors[k].shape[3:] and v.dtype == self.tensors[k].dtype
            and v.device == self.tensors[k].device for k, v in stacked.items())
        if not fits:
            return None
        slot = self.free_slots.pop() if self.free_slots else self._new_slot()
        self._grow(slot, T)
        for k, v in stacked.items():
            region = self.tensors[k][slot]  # (E, T_cap, ...)
            region[:, :T] = v.transpose(0, 1)
            region[:, T:] = 0  # a reused slot may hold a longer episode's steps
            stacked[k] = region[:, :T].transpose(0, 1)  # (T, E, ...) view of the store
        self.lengths[slot] = T
        return slot

    def release(self, slot: int) -> None:
        """The slot's episode was dropped: the next episode may take it."""
        self.free_slots.append(slot)

    def _new_slot(self) -> int:
        self.handed_out += 1
        return self.handed_out - 1

    def _grow(self, slot: int, T: int) -> None:
        """Room for `slot` and T steps: twice the slots (up to capacity) or the longer episode."""
        first = next(iter(self.tensors.values()))
        S, E, T_cap = first.shape[:3]
        if slot < S and T <= T_cap:
            return
        S_new = S if slot < S else max(slot + 1, min(2 * S, self.capacity or 2 * S))
        T_new = max(T, T_cap)
        for k, v in self.tensors.items():
            grown = v.new_zeros((S_new, E, T_new) + v.shape[3:])
            grown[:S, :, :T_cap] = v
            self.tensors[k] = grown
        self.lengths = torch.cat([self.lengths, torch.zeros(S_new - S, dtype=torch.long)])

    def gather(self, slots: List[int], copies: List[int], keys=None,
               device: Optional[torch.device] = None) -> Dict[str, torch.Tensor]:
        """Sequences (slot, copy) as (B, T_max, ...) tensors plus `filled` (B, T_max), 1 at real steps."""
        slots_t = torch.as_tensor(slots)
        lengths = self.lengths[slots_t]  # (B,)
        T_max = int(lengths.max())
        rows = slots_t * self.copies + torch.as_tensor(copies)  # (B,) row of (slot, copy) in the flat store
        batch = {}
        for key, full in self.tensors.items():
            if keys is None or key in keys:
                flat = full.flatten(0, 1)[:, :T_max]  # (slots * E, T_max, ...)
                batch[key] = flat.index_select(0, rows.to(flat.device)).to(device)  # (B, T_max, ...)
        batch["filled"] = (torch.arange(T_max) < lengths[:, None]).float().to(device)  # (B, T_max)
        return batch
