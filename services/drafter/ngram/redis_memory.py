"""The n-gram memory in Redis, shared by every replica serving the same model (see `redis_keys` for the
layout). Redis is an accelerator, never a dependency of a request:
- reads are one pipelined round trip bounded by `read_timeout_s`, behind a small local cache;
- writes are queued and sent by a background thread (`redis_writer`), never on the caller's thread;
- any failure reads as "nothing remembered" and buffers writes, while one background thread reconnects
  (`redis_health`); no exception leaves `lookup`, `record`, `flush` or `close`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from treespec.drafter.ngram.memory import Context, Continuation, MemoryConfig, NgramMemory, Observation
from treespec.drafter.ngram.redis_cache import LookupCache
from treespec.drafter.ngram.redis_health import ConnectionHealth
from treespec.drafter.ngram.redis_keys import RedisKeys, pack_tokens, unpack_tokens
from treespec.drafter.ngram.redis_writer import BatchWriter

logger = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 2.0  # the writer and the reconnect probe wait longer than reads: nobody waits on them
CLOSE_TIMEOUT_S = 1.0  # how long `close` lets the writer drain


def _client(url: str, timeout_s: float) -> redis.Redis:
    """No client-side retries: a failed call must fail at once (the health tracker decides what next)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )


def _where(url: str) -> str:
    """host:port/db for logs, never the credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or ''}"


class RedisMemory(NgramMemory):
    def __init__(self, url: str, config: MemoryConfig) -> None:
        """Never raises for an unreachable store (it starts unhealthy and reconnects in the background);
        a malformed URL raises ValueError."""
        self._config = config
        self._keys = RedisKeys(config.namespace)
        self._reader = _client(url, config.read_timeout_s)
        self._writer_client = _client(url, WRITE_TIMEOUT_S)
        self._cache = LookupCache(config.cache_size, config.cache_ttl_s)
        self._health = ConnectionHealth(probe=self._probe, on_up=self._on_up, where=_where(url))
        self._writer = BatchWriter(self._writer_client, self._keys, config, self._health, self._cache.discard)
        self._closed = False
        self._health.check(self._reader.ping)

    @property
    def healthy(self) -> bool:
        return self._health.healthy and not self._closed

    @property
    def dropped(self) -> int:
        """Observations lost (buffer overflow while the store was down, or rejected by the store)."""
        return self._writer.dropped

    def lookup(self, contexts: Sequence[Context]) -> list[list[Continuation]]:
        keys = [tuple(context) for context in contexts]
        cached = {key: self._cache.get(key) for key in keys}
        missing = [key for key, hit in cached.items() if hit is None]
        fetched = self._fetch(missing) if missing and self.healthy else {}
        return [_first(cached[key], fetched.get(key, [])) for key in keys]

    def record(self, observations: Sequence[Observation]) -> None:
        if not self._closed:
            self._writer.submit(observations)

    def flush(self, timeout_s: float = 5.0) -> bool:
        try:
            return self._writer.flush(timeout_s)
        except Exception:
            logger.exception("n-gram memory: flush failed")
            return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._health.close()  # first: a failure during the final drain must not start a reconnect
            self._writer.close(CLOSE_TIMEOUT_S)
            self._reader.close()
            self._writer_client.close()
        except Exception:
            logger.exception("n-gram memory: close failed")

    def _fetch(self, contexts: list[Context]) -> dict[Context, list[Continuation]]:
        """One pipelined round trip; on any failure, nothing (and the store is marked down)."""
        packed: dict[Context, bytes] = {}
        for context in contexts:
            try:
                packed[context] = pack_tokens(context)
            except ValueError:
                continue  # ids no store can hold: nothing remembered (cheap to ask again)
        if not packed:
            return {}
        try:
            pipe = self._reader.pipeline(transaction=False)
            for key in packed.values():
                pipe.zrevrange(self._keys.context(key), 0, self._config.fanout - 1, withscores=True)
            replies = pipe.execute()
            fetched = {context: _decode(reply) for context, reply in zip(packed, replies, strict=True)}
        except Exception as error:
            self._health.mark_down(error)
            return {}
        for context, continuations in fetched.items():
            self._cache.put(context, continuations)
        return fetched

    def _probe(self) -> None:
        """The reconnect probe: drop the pools' idle sockets from before the outage, then ping afresh.
        A socket in use is left alone: the writer may still be waiting on it for a hung server's reply,
        and closing it under the writer would lose its batch; a failing socket drops itself."""
        self._reader.connection_pool.disconnect(inuse_connections=False)
        self._writer_client.connection_pool.disconnect(inuse_connections=False)
        self._writer_client.ping()

    def _on_up(self) -> None:
        self._writer.wake()


def _first(hit: list[Continuation] | None, fallback: list[Continuation]) -> list[Continuation]:
    return hit if hit is not None else fallback


def _decode(reply: list[tuple[bytes, float]]) -> list[Continuation]:
    return [Continuation(tokens=unpack_tokens(member), count=int(score)) for member, score in reply]
