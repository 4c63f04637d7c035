"""The in-memory stores' bound: a map that keeps at most `capacity` entries, dropping the least
recently used (read or written) first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LruMap(Generic[V]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, value: V) -> None:
        """Keep `value` as the most recently used, dropping the least recently used past capacity."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def get(self, key: str) -> V | None:
        """The value (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def values(self) -> list[V]:
        """Every value, least recently used first (their use is not recorded)."""
        return list(self._entries.values())

    def pop(self, key: str) -> V | None:
        return self._entries.pop(key, None)
