"""The draft model's own paged KV cache: a block pool shared by the requests it drafts for.

Each request holds blocks for the positions whose K/V the draft model has computed (its prompt and
committed tokens, `length` of them) and, past them, scratch positions for the tree nodes of the step
being drafted; the next catch-up overwrites the scratch with the committed tokens. A request that
cannot get blocks is simply not drafted for (`reserve` returns False): it decodes plainly until
others finish and give theirs back.

Prefix caching, as the verifier's (shared/model/prefix_cache.py): a request's full blocks below its
length are cached under their exact tokens (and its cache salt), so that a later prompt sharing that
prefix (the turns of a conversation, a system prompt) starts with its draft K/V instead of reading
the whole prompt again. A request writes only past its length, so the blocks it shares stay as they
are; cached blocks nobody holds are evicted, oldest first, when the pool runs short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from treespec.shared.model.config import ModelConfig
from treespec.shared.model.kv_cache import BlockAllocator, KVCache, OutOfBlocksError
from treespec.shared.model.prefix_cache import PrefixCache


@dataclass
class DraftSequence:
    """One request's blocks, and how many of its first positions hold the draft model's K/V; `chain`:
    the prefix cache's key ids of its cached blocks, `salt` its cache salt."""

    blocks: list[int] = field(default_factory=list)
    length: int = 0
    chain: list[int] = field(default_factory=list)
    salt: str = ""


class DraftCache:
    def __init__(
        self,
        config: ModelConfig,
        num_blocks: int,
        page_size: int,
        dtype: torch.dtype,
        device: torch.device,
        prefix_caching: bool = True,
    ) -> None:
        self.kv = KVCache.allocate(config, num_blocks, page_size, dtype, device)
        self.allocator = BlockAllocator(num_blocks)
        self.page_size = page_size
        self.prefix = PrefixCache(self.allocator, page_size) if prefix_caching else None

    def start(self, tokens: Sequence[int], salt: str = "") -> DraftSequence:
        """A request's sequence, holding the cached blocks of its prompt's longest cached prefix (all
        but its last token: the draft model reads at least that one, for the root's children)."""
        seq = DraftSequence(salt=salt)
        if self.prefix is not None:
            seq.blocks, seq.chain = self.prefix.match(tokens, len(tokens) - 1, salt)
            seq.length = len(seq.blocks) * self.page_size
            self.prefix.record(len(tokens), seq.length)
        return seq

    def cache_prefix(self, seq: DraftSequence, tokens: Sequence[int]) -> None:
        """Cache the sequence's full blocks below its length (`tokens`: at least that many)."""
        if self.prefix is not None:
            self.prefix.register(tokens, seq.blocks, seq.length, seq.chain, seq.salt)

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
        seq.blocks, seq.length, seq.chain = [], 0, []
