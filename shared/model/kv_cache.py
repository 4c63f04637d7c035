"""The paged KV cache: a block pool per layer and the allocator that hands blocks to requests."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from treespec.shared.model.config import ModelConfig


class OutOfBlocksError(RuntimeError):
    """The pool cannot satisfy an allocation; the scheduler preempts and retries."""


@dataclass
class KVCache:
    """K and V pools: [num_layers, num_blocks, block_size, kv_heads, head_dim] each."""

    k: torch.Tensor
    v: torch.Tensor
    block_size: int

    @classmethod
    def allocate(
        cls, config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device
    ) -> KVCache:
        shape = (config.num_layers, num_blocks, block_size, config.num_kv_heads, config.head_dim)
        return cls(
            k=torch.zeros(shape, dtype=dtype, device=device),
            v=torch.zeros(shape, dtype=dtype, device=device),
            block_size=block_size,
        )

    @property
    def num_blocks(self) -> int:
        return int(self.k.shape[1])

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's pools as flat slot views [num_blocks * block_size, kv_heads, head_dim]."""
        return self.k[layer].flatten(0, 1), self.v[layer].flatten(0, 1)

    def flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All layers as [num_layers, num_slots, kv_heads, head_dim] views (for KV compaction)."""
        return self.k.flatten(1, 2), self.v.flatten(1, 2)


@dataclass
class BlockAllocator:
    """Free blocks and reference counts over the pool's block ids.

    The free blocks form a min-heap: a request gets the lowest free ids, so while the pool is not
    fragmented its blocks are one ascending run, which attention reads as a view instead of a gather.

    A block may be `retain`ed (the prefix cache keeps its K/V for later requests): when its last owner
    frees it, it goes idle instead of free. Idle blocks count as free; they are handed out only when
    no free block is left, least recently idle first, and `on_evict` is told before one is reused.
    """

    num_blocks: int
    on_evict: Callable[[int], None] | None = None
    _free: list[int] = field(init=False)  # a heap
    _refs: list[int] = field(init=False)
    _retained: set[int] = field(init=False, default_factory=set)
    _idle: OrderedDict[int, None] = field(init=False, default_factory=OrderedDict)  # oldest first

    def __post_init__(self) -> None:
        self._free = list(range(self.num_blocks))  # ascending: already a heap
        self._refs = [0] * self.num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free) + len(self._idle)

    @property
    def num_idle(self) -> int:
        return len(self._idle)

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise OutOfBlocksError(f"need {n} KV blocks, {self.num_free} free")
        blocks = [heapq.heappop(self._free) for _ in range(min(n, len(self._free)))]
        while len(blocks) < n:
            blocks.append(self._evict_oldest())
        for b in blocks:
            self._refs[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """Another owner holds these blocks too (a shared prefix); idle ones are owned again."""
        for b in blocks:
            self._refs[b] += 1
            self._idle.pop(b, None)

    def free(self, blocks: list[int]) -> None:
        """Drop one owner of each block. Retained blocks go idle last first, so that a cached
        prefix is evicted from its end, not its start."""
        for b in reversed(blocks):
            if self._refs[b] <= 0:
                raise RuntimeError(f"KV block {b} freed twice")
            self._refs[b] -= 1
            if self._refs[b] == 0:
                if b in self._retained:
                    self._idle[b] = None
                else:
                    heapq.heappush(self._free, b)

    def retain(self, block: int) -> None:
        """Keep this owned block's K/V when its owners free it (until it is evicted)."""
        self._retained.add(block)

    def unretain(self, block: int) -> None:
        """Stop keeping this block's K/V: an idle one is free now, a held one when its owners free it."""
        self._retained.discard(block)
        if block in self._idle:
            del self._idle[block]
            heapq.heappush(self._free, block)

    def drop_idle(self) -> None:
        """Evict every idle block now (their K/V is about to be overwritten)."""
        while self._idle:
            heapq.heappush(self._free, self._evict_oldest())

    def _evict_oldest(self) -> int:
        block, _ = self._idle.popitem(last=False)
        self._retained.discard(block)
        if self.on_evict is not None:
            self.on_evict(block)
        return block
