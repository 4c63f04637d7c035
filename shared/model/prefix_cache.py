"""Automatic prefix caching: full KV blocks of earlier requests, found again by the exact tokens before
and in them, so that a prompt sharing a prefix with an earlier one (a system prompt, the turns of a
conversation, few-shot examples) skips that prefix's prefill.

A block is cached once the K/V of all its tokens is committed. Its key is (the key id of the block
before it, its own tokens): exact, with no hash to collide. Key ids are never reused, so an entry
whose parent was evicted can no longer be found (it is evicted in turn, from the idle list). Cached
blocks nobody holds stay in the allocator's idle list and are evicted least recently used first,
only when no free block is left (kv_cache.py). A hit shares the blocks: their owners only read them
(new tokens, tree nodes included, are written after the request's committed length).

A request's first block hangs off the root, or off its cache salt (vLLM's `cache_salt`) if it has
one: requests of different salts, or with and without one, never share a block, so that how fast a
prompt starts tells nothing about other tenants' prompts.

A cached block may need more than its K/V to be reused: `complete` says whether it holds all of it
(with an EAGLE drafter, the target's features of its positions too: feature_cache.py). A match stops
at the first incomplete block, and a complete block computed again takes an incomplete one's place.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from treespec.shared.model.kv_cache import BlockAllocator

ROOT = 0  # the key id before an unsalted request's first block (a salted one's: the salt)

BlockKey = tuple[int | str, tuple[int, ...]]


def _always(block: int) -> bool:
    return True


@dataclass
class PrefixCache:
    allocator: BlockAllocator
    block_size: int
    _index: dict[BlockKey, int] = field(default_factory=dict)  # key -> block
    _keys: dict[int, tuple[BlockKey, int]] = field(default_factory=dict)  # block -> (key, key id)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(ROOT + 1))
    hit_tokens: int = 0  # prompt tokens found cached, over all lookups
    query_tokens: int = 0  # prompt tokens looked up
    evicted_blocks: int = 0
    complete: Callable[[int], bool] = _always  # whether a block holds all a reuse needs

    def __post_init__(self) -> None:
        self.allocator.on_evict = self._forget

    def match(self, tokens: Sequence[int], limit: int, salt: str = "") -> tuple[list[int], list[int]]:
        """The cached blocks holding the longest prefix of `tokens` of at most `limit` tokens cached
        under `salt`, now shared by the caller, and their key ids (the chain to extend with `register`)."""
        blocks: list[int] = []
        chain: list[int] = []
        parent: int | str = _root(salt)
        for start in range(0, limit - self.block_size + 1, self.block_size):
            block = self._index.get((parent, tuple(tokens[start : start + self.block_size])))
            if block is None or not self.complete(block):
                break
            blocks.append(block)
            parent = self._keys[block][1]
            chain.append(parent)
        self.allocator.share(blocks)
        return blocks, chain

    def record(self, looked_up: int, found: int) -> None:
        """A request admitted with `found` of its `looked_up` tokens cached (the hit-rate figures)."""
        self.query_tokens += looked_up
        self.hit_tokens += found

    def register(
        self, tokens: Sequence[int], blocks: Sequence[int], committed: int, chain: list[int], salt: str = ""
    ) -> None:
        """Cache the request's full blocks below `committed` tokens, under `salt`, that `chain` (its
        key ids so far, extended here) does not cover yet. Where an equal block is cached already
        (another request computed the same prefix), the chain follows that one and this block stays
        private, unless this one is complete and that one is not: then this one takes its place, under
        its key id."""
        while (len(chain) + 1) * self.block_size <= committed:
            i = len(chain)
            key = (
                chain[-1] if chain else _root(salt),
                tuple(tokens[i * self.block_size : (i + 1) * self.block_size]),
            )
            cached = self._index.get(key)
            if cached is not None and (self.complete(cached) or not self.complete(blocks[i])):
                chain.append(self._keys[cached][1])
                continue
            if cached is not None:
                _, key_id = self._keys.pop(cached)
                self.allocator.unretain(cached)
            else:
                key_id = next(self._ids)
            self._index[key] = blocks[i]
            self._keys[blocks[i]] = (key, key_id)
            self.allocator.retain(blocks[i])
            chain.append(key_id)

    def clear(self) -> None:
        """Forget every block nobody holds (before the pool's slots are written with other data)."""
        self.allocator.drop_idle()

    @property
    def num_cached_blocks(self) -> int:
        return len(self._keys)

    def _forget(self, block: int) -> None:
        key, _ = self._keys.pop(block)
        del self._index[key]
        self.evicted_blocks += 1


def _root(salt: str) -> int | str:
    """What a request's first block hangs off: key ids are ints, so a salt can be none of them."""
    return salt or ROOT
