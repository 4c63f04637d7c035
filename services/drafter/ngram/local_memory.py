"""The embedded n-gram memory: the same semantics as `RedisMemory`, in this process, behind one lock."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from treespec.drafter.ngram.memory import Context, Continuation, MemoryConfig, NgramMemory, Observation

# A continuation's count and the stamp of its latest increment, as one int: (count << COUNT_SHIFT) | stamp.
# Comparing two orders them by count, then by recency (ties go to the newer), as the ranking wants.
COUNT_SHIFT = 48  # stamps below 2**48: 2.8e14 increments


def _increment(
    continuations: dict[tuple[int, ...], int], continuation: tuple[int, ...], stamp: int, fanout: int
) -> None:
    """Count one more; keep the `fanout` most frequent. At most one is over, so this is O(fanout)."""
    count = (continuations.get(continuation, 0) >> COUNT_SHIFT) + 1
    continuations[continuation] = (count << COUNT_SHIFT) | stamp
    if len(continuations) > fanout:
        del continuations[min(continuations, key=continuations.__getitem__)]


def _ranked(continuations: dict[tuple[int, ...], int]) -> list[Continuation]:
    order = sorted(continuations.items(), key=lambda item: item[1], reverse=True)
    return [Continuation(tokens=c, count=packed >> COUNT_SHIFT) for c, packed in order]


class InProcessMemory(NgramMemory):
    """Contexts in write order (an OrderedDict), so that both the capacity eviction and the TTL sweep pop
    from the front: the least recently written context is also the first to expire. Writes apply at once
    (they are cheap), so `flush` has nothing to wait for.

    The contexts' write times stand in that OrderedDict and their continuations in a plain dict beside
    it ({continuation: count and stamp as one int}): floats, tuples of ints, dicts of those and ints
    only, which Python's cyclic collector stops tracking once a full pass has seen them (they can hold
    nothing else), so a memory of millions of contexts adds nothing to its full passes. (An object per
    context, as before, kept each one tracked: 830 bytes a context and a 0.24 s full pass at 920,000
    contexts, which stalls a drafting step in a long-running drafter.)

    Two fine points differ from Redis, which trims once per batch after summing the batch's duplicates:
    here the fan-out is trimmed after every increment, and ties go to the most recently incremented
    continuation (Redis breaks ties by the members' bytes)."""

    def __init__(self, config: MemoryConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._written: OrderedDict[Context, float] = OrderedDict()  # in write order
        self._continuations: dict[Context, dict[tuple[int, ...], int]] = {}
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
            self._written.clear()
            self._continuations.clear()

    def __len__(self) -> int:
        """Contexts held (expired ones not yet swept included)."""
        with self._lock:
            return len(self._written)

    def _read(self, context: Context, now: float) -> list[Continuation]:
        last_write = self._written.get(context)
        if last_write is None:
            return []
        if now - last_write > self._config.ttl_s:
            self._forget(context)
            return []
        return _ranked(self._continuations[context])

    def _write(self, context: Context, continuation: tuple[int, ...], now: float) -> None:
        last_write = self._written.get(context)
        if last_write is None or now - last_write > self._config.ttl_s:
            self._continuations[context] = {}
        self._written[context] = now
        self._written.move_to_end(context)
        _increment(self._continuations[context], continuation, next(self._stamps), self._config.fanout)

    def _forget(self, context: Context) -> None:
        del self._written[context], self._continuations[context]

    def _evict(self, now: float) -> None:
        """Amortised O(1) per write: each context is forgotten at most once after it was written. The
        oldest goes while there are too many or it has expired."""
        while self._written:
            oldest, written = next(iter(self._written.items()))
            if len(self._written) <= self._config.capacity and now - written <= self._config.ttl_s:
                break
            self._forget(oldest)
