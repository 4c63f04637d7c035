"""Publish the target's features of committed positions into a drafter's ring (EAGLE).

After verification, the rows of each request's newly committed positions (a prefill chunk's tokens,
or a tree's root and accepted nodes) are written into the ring, and the drafter hears where they lie
with the commit. Chunks of a prompt that do not finish it are held until the commit that does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.verifier.forward_stage import ForwardItem, ForwardResult
from treespec.verifier.verify_stage import Verdict


@dataclass
class FeaturePublisher:
    _pending: dict[str, FeatureSlots] = field(default_factory=dict)

    def publish(
        self, ring: FeatureRing, result: ForwardResult, verdicts: list[Verdict]
    ) -> dict[str, FeatureSlots]:
        """Slots of each committing request's new positions, by request id. Call before kv_len moves."""
        if result.features is None:
            return {}
        accepted = {id(v.item): v.acceptance.path for v in verdicts}
        rows: list[torch.Tensor] = []
        owners: list[tuple[ForwardItem, int]] = []
        for item in result.items:
            path = accepted.get(id(item))
            if item.is_decode:
                assert path is not None
                index = torch.tensor(path, dtype=torch.long) + item.token_start
            else:
                index = torch.arange(item.token_start, item.token_start + item.num_new)
            rows.append(index)
            owners.append((item, len(index)))
        if not rows:
            return {}
        slots = ring.write(result.features[torch.cat(rows).to(result.features.device)])
        published: dict[str, FeatureSlots] = {}
        offset = 0
        for item, n in owners:
            mine = FeatureSlots(item.state.kv_len, slots[offset : offset + n])
            offset += n
            rid = item.state.request_id
            held = self._pending.pop(rid, None)
            if held is not None and held.start + len(held) == mine.start:
                mine = FeatureSlots(held.start, held.slots + mine.slots)
            if item.tree is None:  # a prompt chunk that leaves more for later: hold it
                self._pending[rid] = mine
            else:
                published[rid] = mine
        return published

    def forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)
