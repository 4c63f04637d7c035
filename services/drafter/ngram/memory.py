"""The n-gram memory shared across requests (and, in Redis, across replicas): contexts -> continuations.

A context is an n-gram (the latest `w` tokens of some history); a continuation is the run of tokens that
followed it (up to `branch_length`). Every time a (context, continuation) pair is recorded its count grows
by one. Implementations: `InProcessMemory` (the embedded default) and `RedisMemory` (shared).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

Context = tuple[int, ...]
Observation = tuple[Context, tuple[int, ...]]  # (context, continuation that followed it)


@dataclass(frozen=True)
class Continuation:
    tokens: tuple[int, ...]
    count: int


@dataclass(frozen=True)
class MemoryConfig:
    """Bounds and timings shared by every implementation."""

    namespace: str  # model + tokenizer (+ tenant): memories of different vocabularies never mix
    capacity: int = 10_000_000  # contexts kept; the least recently written go first
    ttl_s: float = 86_400.0  # a context not written for this long is forgotten
    fanout: int = 8  # continuations kept per context (the most frequent)
    read_timeout_s: float = 0.02  # a lookup waits at most this long (Redis), else drafts locally
    cache_size: int = 4096  # contexts whose lookups are cached locally
    cache_ttl_s: float = 1.0  # how long a cached lookup stays fresh
    flush_interval_s: float = 0.05  # background writer period
    max_pending: int = 100_000  # observations buffered while the store is unreachable (oldest dropped)


class NgramMemory(ABC):
    """Never raises on the drafting path: an unreachable store reads as empty and buffers writes."""

    @abstractmethod
    def lookup(self, contexts: Sequence[Context]) -> list[list[Continuation]]:
        """For each context, its continuations, most frequent first (at most `fanout`); one round trip."""

    @abstractmethod
    def record(self, observations: Sequence[Observation]) -> None:
        """Queue observations and return at once; they are written in batches in the background."""

    @abstractmethod
    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued so far is written; False when that did not happen in time."""

    @abstractmethod
    def close(self) -> None:
        """Stop background work (pending writes are flushed when the store is reachable)."""

    @property
    def healthy(self) -> bool:
        """False while the store is unreachable (lookups read as empty meanwhile)."""
        return True
