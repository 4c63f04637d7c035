"""The background writer: `submit` appends to a bounded queue (never blocks, never touches the network);
a daemon thread drains it every `flush_interval_s`, one pipeline per batch, while the store is healthy.

Progress is two counters: `submitted` (everything ever queued) and `done` (written, or dropped because
the queue overflowed or the store rejected it). `flush` waits for `done` to reach `submitted` as of the call.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import redis

from treespec.drafter.ngram.memory import Context, MemoryConfig, Observation
from treespec.drafter.ngram.redis_batch import aggregate, write_batch
from treespec.drafter.ngram.redis_health import ConnectionHealth
from treespec.drafter.ngram.redis_keys import RedisKeys

logger = logging.getLogger(__name__)

MAX_BATCH = 4096  # observations per pipeline: one MULTI/EXEC stays short enough not to stall the server
# Errors after which the batch may not have reached the store: retry it once the store is back.
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, OSError)


class BatchWriter:
    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        config: MemoryConfig,
        health: ConnectionHealth,
        on_written: Callable[[Iterable[Context]], None],
    ) -> None:
        self._client = client
        self._keys = keys
        self._config = config
        self._health = health
        self._on_written = on_written
        self._cond = threading.Condition()
        self._queue: deque[Observation] = deque(maxlen=max(1, config.max_pending))
        self._submitted = 0
        self._done = 0
        self._dropped = 0
        self._urgent = False  # a flush is waiting: write without waiting for the next period
        self._stop = False
        self._warned_rejected = False
        self._thread = threading.Thread(target=self._run, name="ngram-redis-writer", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Observations lost to the queue's bound (store down too long) or rejected by the store."""
        return self._dropped

    def submit(self, observations: Sequence[Observation]) -> None:
        """O(len(observations)); the oldest queued observations go first when the queue is full."""
        with self._cond:
            if self._stop:
                return
            for observation in observations:
                if len(self._queue) == self._queue.maxlen:
                    self._count_dropped(1)
                self._queue.append(observation)
            self._submitted += len(observations)

    def flush(self, timeout_s: float) -> bool:
        with self._cond:
            target = self._submitted
            self._urgent = True
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= target, timeout=max(0.0, timeout_s))

    def wake(self) -> None:
        """The store is back: drain the buffer now rather than at the next period."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()

    def close(self, timeout_s: float) -> None:
        """Stop; the thread drains what it can first while the store is healthy (bounded by `timeout_s`)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            if batch:
                self._write(batch)

    def _next_batch(self) -> list[Observation] | None:
        """Waits for the period (or a flush, or a backlog); None when stopped and nothing more can go."""
        with self._cond:
            healthy = self._health.healthy
            ready = healthy and (self._urgent or self._stop or len(self._queue) >= MAX_BATCH)
            if not ready:
                self._cond.wait(timeout=self._config.flush_interval_s)
            healthy = self._health.healthy
            if self._stop and not (healthy and self._queue):
                return None
            if not healthy or not self._queue:
                return []
            size = min(MAX_BATCH, len(self._queue))
            batch = [self._queue.popleft() for _ in range(size)]
            if not self._queue:
                self._urgent = False
            return batch

    def _write(self, batch: list[Observation]) -> None:
        try:
            aggregated = aggregate(batch)
            write_batch(self._client, self._keys, self._config, aggregated)
        except _TRANSIENT as error:
            self._requeue(batch)
            self._health.mark_down(error)
            return
        except Exception as error:
            self._reject(batch, error)
            return
        self._on_written(aggregated.contexts)
        with self._cond:
            self._done += len(batch)
            self._cond.notify_all()

    def _requeue(self, batch: list[Observation]) -> None:
        """Back at the front, oldest first; what no longer fits the bound is dropped, oldest first too.
        A batch whose reply was lost may have been applied already: its counts then grow twice (rare)."""
        with self._cond:
            overflow = max(0, len(batch) + len(self._queue) - (self._queue.maxlen or 0))
            self._count_dropped(overflow)
            self._queue.extendleft(reversed(batch[overflow:]))

    def _reject(self, batch: list[Observation], error: Exception) -> None:
        """The store answered with an error (e.g. a foreign key of the wrong type): retrying cannot help.
        While closing, the error is the client closed under a write still waiting on the store."""
        if self._stop:
            logger.debug("n-gram memory: a batch of %d was in flight at close (%s)", len(batch), error)
        elif not self._warned_rejected:
            self._warned_rejected = True
            logger.warning("n-gram memory: Redis rejected a batch of %d (%s); dropped", len(batch), error)
        with self._cond:
            self._count_dropped(len(batch))

    def _count_dropped(self, count: int) -> None:
        """Called under the lock: dropped observations count as done, so that flushes do not wait on them."""
        self._dropped += count
        self._done += count
        self._cond.notify_all()
