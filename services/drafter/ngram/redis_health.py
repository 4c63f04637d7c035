"""Whether the Redis store is reachable, with one warning per outage and a single background reconnect.

While the store is down nobody waits on it: lookups read as empty without touching the network and the
writer buffers. Only the reconnect thread probes it, backing off, until a probe succeeds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnect probes: `initial_s`, doubling up to `max_s`."""

    initial_s: float = 0.1
    max_s: float = 2.0

    def next(self, delay_s: float) -> float:
        return min(delay_s * 2.0, self.max_s)


class ConnectionHealth:
    """`healthy` flips to False on the first failure reported (one warning) and back to True when the
    reconnect thread's probe succeeds (one info line); `on_up` then runs (the writer drains its buffer)."""

    def __init__(
        self,
        probe: Callable[[], object],
        on_up: Callable[[], None],
        where: str,
        backoff: Backoff = Backoff(),
    ) -> None:
        self._probe = probe
        self._on_up = on_up
        self._where = where
        self._backoff = backoff
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._healthy = True
        self._reconnecting = False
        self._thread: threading.Thread | None = None

    @property
    def healthy(self) -> bool:
        return self._healthy

    def check(self, probe: Callable[[], object]) -> None:
        """Probe once now (at start-up); a failure starts the background reconnect instead of raising."""
        try:
            probe()
        except Exception as error:
            self.mark_down(error)

    def mark_down(self, error: BaseException) -> None:
        """Report a failure. Idempotent while down: the outage logs once and has one reconnect thread."""
        with self._lock:
            if self._stop.is_set() or self._reconnecting:
                self._healthy = False
                return
            self._healthy = False
            self._reconnecting = True
            self._thread = threading.Thread(target=self._reconnect, name="ngram-redis-reconnect", daemon=True)
            self._thread.start()
        logger.warning(
            "n-gram memory: Redis at %s unreachable (%s: %s); drafting from local matches and buffering "
            "writes until it is back",
            self._where,
            type(error).__name__,
            error,
        )

    def close(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _reconnect(self) -> None:
        delay_s = self._backoff.initial_s
        while not self._stop.wait(delay_s):
            try:
                self._probe()
            except Exception:
                delay_s = self._backoff.next(delay_s)
                continue
            with self._lock:
                self._healthy = True
                self._reconnecting = False
            logger.info("n-gram memory: reconnected to Redis at %s", self._where)
            self._on_up()
            return
        with self._lock:
            self._reconnecting = False
