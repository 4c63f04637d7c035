"""The embedded n-gram memory: the same semantics as `RedisMemory`, in this process, behind one lock."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from treespec.drafter.ngram.memory import Context, Continuation, MemoryConfig, NgramMemory, Observation


@dataclass
class _Entry:
    """One context's continuations: count and the stamp of the latest increment (ties go to the newer)."""

    last_write: float
    counts: dict[tuple[int, ...], int] = field(default_factory=dict)
    stamps: dict[tuple[int, ...], int] = field(default_factory=dict)

    def increment(self, continuation: tuple[int, ...], stamp: int, fanout: int) -> None:
        """Count one more; keep the `fanout` most frequent. At most one is over, so this is O(fanout)."""
        self.counts[continuation] = self.counts.get(continuation, 0) + 1
        self.stamps[continuation] = stamp
        if len(self.counts) > fanout:
            weakest = min(self.counts, key=lambda c: (self.counts[c], self.stamps[c]))
            del self.counts[weakest], self.stamps[weakest]

    def ranked(self) -> list[Continuation]:
        order = sorted(self.counts, key=lambda c: (self.counts[c], self.stamps[c]), reverse=True)
        return [Continuation(tokens=c, count=self.counts[c]) for c in order]


class InProcessMemory(NgramMemory):
    """Contexts in write order (an OrderedDict), so that both the capacity eviction and the TTL sweep pop
    from the front: the least recently written context is also the first to expire. Writes apply at once
    (they are cheap), so `flush` has nothing to wait for.

    Two fine points differ from Redis, which trims once per batch after summing the batch's duplicates:
    here the fan-out is trimmed after every increment, and ties go to the most recently incremented
    continuation (Redis breaks ties by the members' bytes)."""

    def __init__(self, config: MemoryConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._contexts: OrderedDict[Context, _Entry] = OrderedDict()
        self._stamps = itertools.count()

    def lookup(self, contexts: Sequence[Context]) -> list[list[Continuation]]:
        now = self._clock()
        with self._lock:
            return [self._read(tuple(context), now) for context in contexts]

    def record(self, observations: Sequence[Observation]) -> None:
        now = self._clock()
        with self._lock:
            for context, continuation in observations:
                self._write(tuple(context), tuple(continuation), now)
            self._evict(now)

    def flush(self, timeout_s: float = 5.0) -> bool:
        return True

    def close(self) -> None:
        with self._lock:
            self._contexts.clear()

    def __len__(self) -> int:
        """Contexts held (expired ones not yet swept included)."""
        with self._lock:
            return len(self._contexts)

    def _read(self, context: Context, now: float) -> list[Continuation]:
        entry = self._contexts.get(context)
        if entry is None:
            return []
        if now - entry.last_write > self._config.ttl_s:
            del self._contexts[context]
            return []
        return entry.ranked()

    def _write(self, context: Context, continuation: tuple[int, ...], now: float) -> None:
        entry = self._contexts.get(context)
        if entry is None or now - entry.last_write > self._config.ttl_s:
            entry = self._contexts[context] = _Entry(last_write=now)
        entry.last_write = now
        self._contexts.move_to_end(context)
        entry.increment(continuation, next(self._stamps), self._config.fanout)

    def _evict(self, now: float) -> None:
        """Amortised O(1) per write: each context is popped at most once after it was written."""
        while len(self._contexts) > self._config.capacity:
            self._contexts.popitem(last=False)
        while self._contexts:
            oldest = next(iter(self._contexts.values()))
            if now - oldest.last_write <= self._config.ttl_s:
                break
            self._contexts.popitem(last=False)
