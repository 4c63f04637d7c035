"""The verifier's connection to one drafter replica: one long-lived Draft stream, re-established
with backoff when it breaks. `DraftLink` is what every transport shares; `ReplicaLink` carries the
stream over gRPC (any replica), `LocalLink` (local_link.py) over a co-located drafter's local socket."""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from treespec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME: str = drafter_pb2.DESCRIPTOR.services_by_name["Drafter"].full_name
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # gRPC's own reconnection backoff reaches minutes; a restarted replica should be back in seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class LinkListener(Protocol):
    """Called from the link's thread."""

    def link_up(self, link: DraftLink) -> None: ...

    def link_down(self, link: DraftLink) -> None: ...

    def link_reply(self, link: DraftLink, reply: drafter_pb2.DraftReply) -> None: ...


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.05
    max_s: float = 1.0
    factor: float = 2.0
    connect_timeout_s: float = 1.0  # one wait for the channel to become ready

    def after(self, delay_s: float) -> float:
        return min(delay_s * self.factor, self.max_s)


class LinkState(enum.Enum):
    NEW = "new"
    UP = "up"
    DOWN = "down"


class DraftLink(ABC):
    """A thread connects, runs the stream until it breaks, and reconnects with backoff; the listener
    hears of each stream's start and end and of every reply. A stream that broke loses what was
    queued in it: the owner reopens the requests from their history (see RemoteDrafter)."""

    def __init__(self, address: str, listener: LinkListener, backoff: Backoff | None = None) -> None:
        self.address = address
        self._listener = listener
        self._backoff = backoff or Backoff()
        self._state = LinkState.NEW
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"drafter-link-{address}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @abstractmethod
    def send(self, message: drafter_pb2.DraftRequest) -> None:
        """Never blocks; dropped when no stream is up."""

    @abstractmethod
    def stop(self, timeout_s: float = 1.0) -> None:
        """Half-close the stream (the replica closes its requests), then end what is left."""

    @abstractmethod
    def _connect(self) -> bool:
        """True once the replica can take a stream."""

    @abstractmethod
    def _stream(self) -> None:
        """Run one stream until it ends (link_up first, link_down last)."""

    def _run(self) -> None:
        delay = self._backoff.initial_s
        while not self._stopping.is_set():
            if self._connect():
                started = time.monotonic()
                self._stream()
                lived = time.monotonic() - started
                delay = (
                    self._backoff.initial_s if lived >= self._backoff.max_s else self._backoff.after(delay)
                )
            elif not self._stopping.is_set():
                self._set_state(LinkState.DOWN, "unreachable")
                delay = self._backoff.after(delay)
            self._stopping.wait(delay)

    def _set_state(self, state: LinkState, why: str) -> None:
        """Logged once per change, not once per attempt."""
        if state is self._state:
            return
        back = self._state is LinkState.DOWN
        self._state = state
        if state is LinkState.UP:
            log.info("drafter replica %s %s", self.address, "is back" if back else why)
        else:
            log.warning("drafter replica %s %s; retrying in the background", self.address, why)


class ReplicaLink(DraftLink):
    """Over gRPC: messages go into the current stream's outbox, which gRPC drains through a request
    iterator; the link's thread reads the replies."""

    def __init__(self, address: str, listener: LinkListener, backoff: Backoff | None = None) -> None:
        super().__init__(address, listener, backoff)
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._outbox: queue.SimpleQueue[drafter_pb2.DraftRequest | None] | None = None
        self._call: Any = None  # the current Draft call (grpc's stream-stream call object)
        self._ready: Any = None  # the pending readiness check (a cancellable grpc future)

    def send(self, message: drafter_pb2.DraftRequest) -> None:
        outbox = self._outbox
        if outbox is not None:
            outbox.put(message)

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stopping.set()
        ready = self._ready
        if ready is not None:
            ready.cancel()
        outbox = self._outbox
        if outbox is not None:
            outbox.put(None)
        self._thread.join(timeout_s)
        call = self._call
        if call is not None:
            call.cancel()
        self._thread.join()
        self._channel.close()

    def _connect(self) -> bool:
        """Ready: the replica reports the Drafter service SERVING. (A health check rather than
        grpc.channel_ready_future, whose polling thread trips over a channel closed under it.)"""
        request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
        timeout = self._backoff.connect_timeout_s
        self._ready = health_pb2_grpc.HealthStub(self._channel).Check.future(
            request, timeout=timeout, wait_for_ready=True
        )
        if self._stopping.is_set():  # stop() may have looked for a call to cancel just before
            return False
        try:
            serving = self._ready.result().status == health_pb2.HealthCheckResponse.SERVING
        except (grpc.RpcError, grpc.FutureCancelledError):
            return False
        finally:
            self._ready = None
        return serving and not self._stopping.is_set()

    def _stream(self) -> None:
        outbox: queue.SimpleQueue[drafter_pb2.DraftRequest | None] = queue.SimpleQueue()
        self._call = drafter_pb2_grpc.DrafterStub(self._channel).Draft(_drain(outbox))
        self._outbox = outbox
        if self._stopping.is_set():  # stop() may have looked for an outbox just before
            outbox.put(None)
        self._set_state(LinkState.UP, "connected")
        self._listener.link_up(self)
        reason = "the replica ended the stream"
        try:
            for reply in self._call:
                self._listener.link_reply(self, reply)
        except grpc.RpcError as exc:
            reason = f"{exc.code().name}: {exc.details()}"
        finally:
            self._outbox = None
            self._call = None
            outbox.put(None)  # ends gRPC's thread that drains the request iterator
        self._listener.link_down(self)
        if not self._stopping.is_set():
            self._set_state(LinkState.DOWN, f"lost ({reason})")


def _drain(outbox: queue.SimpleQueue[drafter_pb2.DraftRequest | None]) -> Iterator[drafter_pb2.DraftRequest]:
    while (message := outbox.get()) is not None:
        yield message
