"""A small LRU of recent lookups, so that hot contexts cost no round trip while they stay fresh."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from treespec.drafter.ngram.memory import Context, Continuation


@dataclass(frozen=True)
class _Cached:
    fresh_until: float
    continuations: tuple[Continuation, ...]


class LookupCache:
    """Empty results are cached too: most contexts were never seen, and asking again within `ttl_s` would
    cost a round trip for nothing. Staleness is bounded by `ttl_s` (what other replicas wrote meanwhile)."""

    def __init__(self, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._size = size
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Context, _Cached] = OrderedDict()

    def get(self, context: Context) -> list[Continuation] | None:
        """The cached continuations while fresh, else None (not cached)."""
        with self._lock:
            cached = self._entries.get(context)
            if cached is None:
                return None
            if self._clock() >= cached.fresh_until:
                del self._entries[context]
                return None
            self._entries.move_to_end(context)
            return list(cached.continuations)

    def put(self, context: Context, continuations: Iterable[Continuation]) -> None:
        if self._size <= 0:
            return
        cached = _Cached(self._clock() + self._ttl_s, tuple(continuations))
        with self._lock:
            self._entries[context] = cached
            self._entries.move_to_end(context)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def discard(self, contexts: Iterable[Context]) -> None:
        """Forget contexts this replica just wrote, so that its own next lookup sees the new counts."""
        with self._lock:
            for context in contexts:
                self._entries.pop(context, None)
