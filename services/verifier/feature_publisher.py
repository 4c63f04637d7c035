"""Publish the target's features of committed positions into a drafter's ring (EAGLE).

After verification, the rows of each request's newly committed positions (a prefill chunk's tokens,
or a tree's root and accepted nodes) are written into the ring, and the drafter hears where they lie
with the commit. Chunks of a prompt that do not finish it are held until the commit that does. A CUDA
ring's writes are complete before `publish` returns the slots (a drafter process may read them at
once).

The same rows go into the feature cache at their positions' K/V slots (feature_cache.py). A prompt
whose first positions came from the prefix cache gets their cached rows published before its own, so
the drafter reads a feature for every position either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.verifier.feature_cache import FeatureCache
from treespec.verifier.forward_stage import ForwardItem, ForwardResult
from treespec.verifier.verify_stage import Verdict


@dataclass(frozen=True)
class _Published:
    """An item's rows for the ring: a cached prefix's rows (when it follows one), then its new ones."""

    item: ForwardItem
    start: int  # the history position of the first row
    rows: torch.Tensor  # [n, width]


def finish_writes(ring: FeatureRing) -> None:
    """A CUDA ring's rows are written on this thread's stream, asynchronously; the slots returned go to
    the drafter with the commit, and a co-located drafter process reads them on a stream of its own
    (through CUDA IPC), which nothing orders after ours. So the writes must be done before anyone hears
    of the slots. (A CPU ring's writes are done when `write` returns.)"""
    device = ring.buffer.device
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


@dataclass
class FeaturePublisher:
    cache: FeatureCache | None = None
    _pending: dict[str, FeatureSlots] = field(default_factory=dict)

    def publish(
        self, ring: FeatureRing, result: ForwardResult, verdicts: list[Verdict]
    ) -> dict[str, FeatureSlots]:
        """Slots of each committing request's new positions, by request id. Call before kv_len moves."""
        if result.features is None:
            return {}
        accepted = {id(v.item): v.acceptance.path for v in verdicts}
        parts: list[_Published] = []
        room = ring.capacity
        for item in result.items:
            rows = result.features[self._committed_rows(item, accepted.get(id(item)))]
            kv_len = item.state.kv_len
            if self.cache is not None:
                self.cache.store(item.kv_slots[kv_len : kv_len + rows.shape[0]], rows)
            part = self._with_cached_prefix(item, rows, room - rows.shape[0])
            room -= part.rows.shape[0]
            parts.append(part)
        if not parts:
            return {}
        slots = ring.write(torch.cat([p.rows for p in parts]))
        finish_writes(ring)
        published: dict[str, FeatureSlots] = {}
        offset = 0
        for part in parts:
            n = part.rows.shape[0]
            mine = FeatureSlots(part.start, slots[offset : offset + n])
            offset += n
            rid = part.item.state.request_id
            held = self._pending.pop(rid, None)
            if held is not None and held.start + len(held) == mine.start:
                mine = FeatureSlots(held.start, held.slots + mine.slots)
            if part.item.tree is None:  # a prompt chunk that leaves more for later: hold it
                self._pending[rid] = mine
            else:
                published[rid] = mine
        return published

    def forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    @staticmethod
    def _committed_rows(item: ForwardItem, path: list[int] | None) -> torch.Tensor:
        """The forward's rows of the item's newly committed positions, in position order."""
        if item.is_decode:
            assert path is not None
            return torch.tensor(path, dtype=torch.long) + item.token_start
        return torch.arange(item.token_start, item.token_start + item.num_new)

    def _with_cached_prefix(self, item: ForwardItem, rows: torch.Tensor, room: int) -> _Published:
        """A prompt chunk that starts past position 0 with nothing held before it starts after a cached
        prefix: the prefix's rows go first, when the cache holds them all and the ring has room."""
        kv_len = item.state.kv_len
        own = _Published(item, kv_len, rows)
        if item.is_decode or kv_len == 0 or kv_len > room or self.cache is None:
            return own
        held = self._pending.get(item.state.request_id)
        if held is not None and held.start + len(held) == kv_len:  # a later chunk of the prompt
            return own
        prefix = item.kv_slots[:kv_len]
        if not self.cache.covers(prefix):
            return own
        return _Published(item, 0, torch.cat([self.cache.read(prefix).to(rows.dtype), rows]))
