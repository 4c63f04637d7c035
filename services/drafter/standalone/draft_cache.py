"""The draft model's own paged KV cache: a block pool shared by the requests it drafts for.

Each request holds blocks for the positions whose K/V the draft model has computed (its prompt and
committed tokens, `length` of them) and, past them, scratch positions for the tree nodes of the step
being drafted; the next catch-up overwrites the scratch with the committed tokens. A request that
cannot get blocks is simply not drafted for (`reserve` returns False): it decodes plainly until
others finish and give theirs back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.model.config import ModelConfig
from treespec.shared.model.kv_cache import BlockAllocator, KVCache, OutOfBlocksError


@dataclass
class DraftSequence:
    """One request's blocks, and how many of its first positions hold the draft model's K/V."""

    blocks: list[int] = field(default_factory=list)
    length: int = 0


class DraftCache:
    def __init__(
        self, config: ModelConfig, num_blocks: int, page_size: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.kv = KVCache.allocate(config, num_blocks, page_size, dtype, device)
        self.allocator = BlockAllocator(num_blocks)
        self.page_size = page_size

    def reserve(self, seq: DraftSequence, positions: int) -> bool:
        """Blocks for the first `positions` positions; False (nothing allocated) when the pool lacks them."""
        missing = -(-positions // self.page_size) - len(seq.blocks)
        if missing <= 0:
            return True
        try:
            seq.blocks += self.allocator.allocate(missing)
        except OutOfBlocksError:
            return False
        return True

    def slots(self, seq: DraftSequence, positions: int) -> torch.Tensor:
        """[positions] long: the flat pool slot of each of the first positions (reserved before)."""
        blocks = torch.tensor(seq.blocks, dtype=torch.long)
        flat = (blocks[:, None] * self.page_size + torch.arange(self.page_size)).flatten()
        return flat[:positions]

    def release(self, seq: DraftSequence) -> None:
        if seq.blocks:
            self.allocator.free(seq.blocks)
        seq.blocks, seq.length = [], 0
