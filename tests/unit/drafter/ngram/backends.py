"""The memories under test, built the same way for every contract test: in-process, or on a real Redis."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import redis

from tests.redis_server import RedisServer
from treespec.drafter.ngram.local_memory import InProcessMemory
from treespec.drafter.ngram.memory import MemoryConfig, NgramMemory
from treespec.drafter.ngram.redis_keys import RedisKeys
from treespec.drafter.ngram.redis_memory import RedisMemory

# Reads wait longer than in production: a loaded test machine must not read as an outage.
TEST_READ_TIMEOUT_S = 0.25


def config(namespace: str = "test", **overrides: Any) -> MemoryConfig:
    base = MemoryConfig(namespace=namespace, read_timeout_s=TEST_READ_TIMEOUT_S, cache_ttl_s=0.1)
    return replace(base, **overrides)


@dataclass
class Backend:
    """Opens memories (closed at teardown) and counts the contexts a namespace holds."""

    name: str
    server: RedisServer | None = None
    opened: list[NgramMemory] = field(default_factory=list)

    def open(self, memory_config: MemoryConfig) -> NgramMemory:
        memory: NgramMemory
        if self.server is None:
            memory = InProcessMemory(memory_config)
        else:
            memory = RedisMemory(self.server.url, memory_config)
        self.opened.append(memory)
        return memory

    def count_contexts(self, memory: NgramMemory, namespace: str) -> int:
        if isinstance(memory, InProcessMemory):
            return len(memory)
        assert self.server is not None
        return count_redis_contexts(self.server.url, namespace)

    def close(self) -> None:
        for memory in self.opened:
            memory.close()


def count_redis_contexts(url: str, namespace: str) -> int:
    """Context keys of a namespace, counted with SCAN (what the capacity bounds)."""
    client = redis.Redis.from_url(url)
    try:
        pattern = RedisKeys(namespace).context_prefix + b"*"
        return sum(1 for _ in client.scan_iter(match=pattern, count=1000))
    finally:
        client.close()
