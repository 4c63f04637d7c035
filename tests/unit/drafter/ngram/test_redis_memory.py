"""What only the Redis memory has: replicas sharing one store, namespaces, and its key layout."""

from __future__ import annotations

import redis

from tests.redis_server import RedisServer
from tests.unit.drafter.ngram.backends import Backend, config
from treespec.drafter.ngram.memory import Continuation
from treespec.drafter.ngram.redis_keys import RedisKeys, pack_tokens


def test_replicas_share_what_they_learn(redis_backend: Backend) -> None:
    first, second = redis_backend.open(config()), redis_backend.open(config())
    first.record([((1, 2), (3,)), ((1, 2), (3,))])
    second.record([((1, 2), (3,)), ((1, 2), (4,))])
    assert first.flush() and second.flush()
    expected = [[Continuation((3,), 3), Continuation((4,), 1)]]
    assert first.lookup([(1, 2)]) == expected
    assert second.lookup([(1, 2)]) == expected


def test_namespaces_are_isolated(redis_backend: Backend) -> None:
    model_a, model_b = redis_backend.open(config("model-a")), redis_backend.open(config("model-b"))
    model_a.record([((1,), (2,))])
    assert model_a.flush()
    assert model_b.lookup([(1,)]) == [[]]
    assert model_a.lookup([(1,)]) == [[Continuation((2,), 1)]]


def test_key_layout(redis_backend: Backend, redis_server: RedisServer) -> None:
    """Other tools (and older or newer replicas) read this layout: it is part of the contract."""
    memory = redis_backend.open(config("layout"))
    memory.record([((1, 256), (70000,))])
    assert memory.flush()
    client = redis.Redis.from_url(redis_server.url)
    try:
        key = b"treespec:ngram:v1:layout:c:" + b"\x01\x00\x00\x00\x00\x01\x00\x00"
        assert client.zrange(key, 0, -1, withscores=True) == [(pack_tokens([70000]), 1.0)]
        assert 0 < client.pttl(key) <= 86_400_000
        assert client.zrange(RedisKeys("layout").index, 0, -1) == [pack_tokens([1, 256])]
    finally:
        client.close()


def test_token_ids_that_cannot_be_packed_are_ignored(redis_backend: Backend) -> None:
    memory = redis_backend.open(config())
    memory.record([((-1,), (2,)), ((1,), (2**32,)), ((1,), (2,))])
    assert memory.flush()
    assert memory.lookup([(-1,), (1,)]) == [[], [Continuation((2,), 1)]]
