"""Target features for drafters that read the target's hidden states (EAGLE), and the ring buffer the
verifier publishes them into.

Per committed position the verifier writes one row (`FeatureSpec.width` wide) into a preallocated
ring and tells the drafter only where the rows are (`FeatureSlots`). In process the ring is a plain
tensor; a co-located drafter process maps the same memory (shared memory on CPU, see
shared/drafting/shared_tensor.py), so rows never travel over the network.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from treespec.shared.model.causal_lm import HiddenCapture


@dataclass(frozen=True)
class FeatureSpec:
    """What is published per position: the final normed hidden state (EAGLE-2), or the concatenated
    outputs of `aux_layer_ids` (EAGLE-3; "output of layer id", i.e. the residual entering id + 1)."""

    hidden_size: int
    aux_layer_ids: tuple[int, ...] = ()

    @property
    def uses_aux(self) -> bool:
        return bool(self.aux_layer_ids)

    @property
    def width(self) -> int:
        return self.hidden_size * max(1, len(self.aux_layer_ids))

    def capture(self, rows: torch.Tensor) -> HiddenCapture:
        return HiddenCapture(rows, tuple(i + 1 for i in self.aux_layer_ids))

    def select(self, hidden: torch.Tensor | None, aux_hidden: torch.Tensor | None) -> torch.Tensor:
        chosen = aux_hidden if self.uses_aux else hidden
        if chosen is None:
            raise RuntimeError("the forward did not capture the features this spec needs")
        return chosen


@dataclass(frozen=True)
class FeatureSlots:
    """Rows of the ring holding the features of history positions start, start + 1, ..."""

    start: int
    slots: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.slots)


class FeatureRing:
    """A fixed [capacity, width] buffer written round-robin by the verifier, read by a drafter.

    Rows are overwritten after `capacity` further rows; drafters copy what they need when told of a
    commit. `buffer` may live in shared memory, so a co-located process sees the same rows.
    """

    def __init__(self, spec: FeatureSpec, buffer: torch.Tensor) -> None:
        if buffer.dim() != 2 or buffer.shape[1] != spec.width:
            raise ValueError(f"a ring for {spec} needs [capacity, {spec.width}], got {tuple(buffer.shape)}")
        self.spec = spec
        self.buffer = buffer
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def allocate(
        cls, spec: FeatureSpec, capacity: int, dtype: torch.dtype, device: torch.device | str = "cpu"
    ) -> FeatureRing:
        return cls(spec, torch.zeros(capacity, spec.width, dtype=dtype, device=device))

    @property
    def capacity(self) -> int:
        return int(self.buffer.shape[0])

    def write(self, rows: torch.Tensor) -> tuple[int, ...]:
        """Store rows [n, width] (the latest `capacity` rows when n exceeds it); their slots, in order."""
        n = int(rows.shape[0])
        if n == 0:
            return ()
        if n > self.capacity:
            raise ValueError(f"{n} feature rows do not fit a ring of {self.capacity}")
        with self._lock:
            start = self._next
            self._next = (start + n) % self.capacity
        slots = [(start + i) % self.capacity for i in range(n)]
        index = torch.tensor(slots, dtype=torch.long, device=self.buffer.device)
        self.buffer.index_copy_(0, index, rows.to(self.buffer.dtype))
        return tuple(slots)

    def read(self, slots: tuple[int, ...] | list[int]) -> torch.Tensor:
        """A copy of the rows at `slots`: [len(slots), width]."""
        index = torch.tensor(list(slots), dtype=torch.long, device=self.buffer.device)
        return self.buffer.index_select(0, index)
