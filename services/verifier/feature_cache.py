"""The target's features of cached prefixes (EAGLE), kept beside their K/V.

A drafter that reads the target's features (feature_publisher.py) needs them for every position of a
prompt, also for the positions whose K/V a request finds in the prefix cache (prefix_cache.py) and so
does not compute. The verifier therefore keeps the feature row of every committed position in a pool
indexed like the K/V slots; a request that reuses cached blocks hands their rows to its drafter before
the rows it computes, and the drafter catches up over the whole prompt as if it had been computed.

Rows hold for the feature spec they were written under only. Every slot carries the epoch its row was
written in, and the epoch moves on whenever the drafter's spec changes (a co-located drafter attaching,
another head). A cached block is reused only as far as every slot of it was written in the current
epoch (the prefix cache asks `holds_block`): K/V committed while no drafter read features, or under
another spec, is computed again, and its cached blocks give way to the complete ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.drafting.features import FeatureSpec

NEVER = -1  # the epoch of a slot no row was written into


@dataclass
class FeatureCache:
    num_blocks: int
    block_size: int
    spec: FeatureSpec | None = None  # the drafter's current spec; None: no drafter reads features
    epoch: int = 0
    _rows: torch.Tensor | None = None  # [num_blocks * block_size, spec.width]
    _written: torch.Tensor = field(init=False)  # [num_blocks * block_size] long: each row's epoch

    def __post_init__(self) -> None:
        self._written = torch.full((self.num_blocks * self.block_size,), NEVER, dtype=torch.long)

    @property
    def active(self) -> bool:
        return self.spec is not None

    def follow(self, spec: FeatureSpec | None, dtype: torch.dtype, device: torch.device) -> None:
        """Take the drafter's spec for this step; rows written under another one stop counting. The
        pool is allocated on first use (never without a drafter that reads features) and kept while
        its row width and dtype still fit."""
        if spec == self.spec:
            return
        self.spec = spec
        self.epoch += 1
        if spec is None:
            return
        rows = self._rows
        if rows is None or rows.shape[1] != spec.width or rows.dtype != dtype or rows.device != device:
            self._rows = None  # the old pool goes before the new one is made
            size = (self.num_blocks * self.block_size, spec.width)
            self._rows = torch.empty(size, dtype=dtype, device=device)

    def store(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """The rows of committed positions, into their K/V slots (a CPU long tensor)."""
        if self._rows is None or not self.active or slots.numel() == 0:
            return
        self._rows.index_copy_(0, slots.to(self._rows.device), rows.to(self._rows.dtype))
        self._written[slots] = self.epoch

    def covers(self, slots: torch.Tensor) -> bool:
        """Whether every one of these slots holds a row of the current spec."""
        return self.active and bool((self._written[slots] == self.epoch).all())

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """The rows at these slots: [len(slots), width] (check `covers` first)."""
        assert self._rows is not None
        return self._rows.index_select(0, slots.to(self._rows.device))

    def holds_block(self, block: int) -> bool:
        """Whether a cached block can be reused: every row of it written under the current spec, or
        no drafter reads features (then its K/V alone is reused)."""
        if not self.active:
            return True
        start = block * self.block_size
        return bool((self._written[start : start + self.block_size] == self.epoch).all())
