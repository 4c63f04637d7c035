"""Which n-gram memory to open: Redis when a URL is given (shared across replicas), else in-process."""

from __future__ import annotations

from treespec.drafter.ngram.local_memory import InProcessMemory
from treespec.drafter.ngram.memory import MemoryConfig, NgramMemory


def open_memory(redis_url: str | None, config: MemoryConfig) -> NgramMemory:
    """Never raises for an unreachable Redis (the memory reconnects in the background); ValueError for a
    malformed URL. The Redis client is imported only when asked for."""
    if redis_url is None:
        return InProcessMemory(config)
    from treespec.drafter.ngram.redis_memory import RedisMemory

    return RedisMemory(redis_url, config)
