"""The Redis key layout of the n-gram memory, and how token runs are packed into keys and members.

Layout (version `v1`, one namespace per model + tokenizer + tenant):
- `treespec:ngram:v1:{namespace}:c:{context}`: a ZSET per context; members are continuations, score = count;
- `treespec:ngram:v1:{namespace}:index`: a ZSET of contexts scored by their last write time (ms), so that
  every replica can evict the least recently written contexts when the capacity is exceeded.
Token runs are packed as uint32 little-endian bytes: compact, binary-safe, and the same on every replica.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

KEY_VERSION = "v1"
_UINT32_MAX = 2**32 - 1


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """uint32 little-endian; ValueError for ids outside [0, 2**32) rather than a silently wrapped id."""
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error as error:
        raise ValueError(f"token ids must lie in [0, {_UINT32_MAX}]: {error}") from error


def unpack_tokens(packed: bytes) -> tuple[int, ...]:
    if len(packed) % 4:
        raise ValueError(f"a packed token run has a multiple of 4 bytes, got {len(packed)}")
    return struct.unpack(f"<{len(packed) // 4}I", packed)


@dataclass(frozen=True)
class RedisKeys:
    """The keys of one namespace."""

    namespace: str

    @property
    def prefix(self) -> bytes:
        return f"treespec:ngram:{KEY_VERSION}:{self.namespace}:".encode()

    @property
    def context_prefix(self) -> bytes:
        """What precedes a packed context in its key (the eviction script rebuilds keys from it)."""
        return self.prefix + b"c:"

    @property
    def index(self) -> bytes:
        return self.prefix + b"index"

    def context(self, packed_context: bytes) -> bytes:
        return self.context_prefix + packed_context
