"""The Draft stream to a co-located drafter over its local socket (`--drafter-address local:PATH`,
the drafter's `--local-socket PATH`; the drafter's side: drafter/server/local_server.py).

The same messages as over gRPC, in length-prefixed frames (shared/rpc/frames.py). The engine thread
writes its messages straight into the socket and the link's thread reads the replies, so a round trip
is two hand-offs between processes and one back to the engine thread. `send` must never block the
engine: what the socket does not take at once (a long prompt's Open while the drafter is busy) waits
in a backlog that a writer thread flushes, and later messages queue behind it to keep their order.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

from google.protobuf.message import DecodeError

from treespec.shared.rpc.frames import MAX_FRAME_BYTES, FrameError, frame, recv_frame
from treespec.v1 import drafter_pb2
from treespec.verifier.drafter_link import Backoff, DraftLink, LinkListener, LinkState
from treespec.verifier.drafter_targets import local_socket_path

log = logging.getLogger(__name__)

MAX_BACKLOG_BYTES = 4 * MAX_FRAME_BYTES  # a drafter this far behind is treated as gone


class LocalLink(DraftLink):
    def __init__(self, address: str, listener: LinkListener, backoff: Backoff | None = None) -> None:
        super().__init__(address, listener, backoff)
        path = local_socket_path(address)
        if path is None:
            raise ValueError(f"not a local:PATH address: {address!r}")
        self._path = path
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the backlog, the writer or the socket changed
        self._sock: socket.socket | None = None  # the current stream's, while it is up
        self._backlog = bytearray()
        self._writing = False  # the writer thread is sending (outside the lock)
        self._closed = False  # stopped: the writer thread ends
        name = f"drafter-writer-{address}"
        self._writer = threading.Thread(target=self._write_loop, name=name, daemon=True)

    def start(self) -> None:
        self._writer.start()
        super().start()

    def send(self, message: drafter_pb2.DraftRequest) -> None:
        try:
            data = frame(message.SerializeToString())
        except FrameError as exc:  # never raised into the engine: the request just gets no trees
            log.warning("not sent to drafter replica %s: %s", self.address, exc)
            return
        with self._lock:
            sock = self._sock
            if sock is None:
                return
            if not self._backlog and not self._writing:
                try:
                    data = data[sock.send(data, socket.MSG_DONTWAIT) :]
                except BlockingIOError:
                    pass
                except OSError:
                    return  # the reader sees the broken connection and ends the stream
            if data:
                self._backlog += data
                if len(self._backlog) > MAX_BACKLOG_BYTES:
                    self._backlog.clear()
                    _shut(sock, socket.SHUT_RDWR)
                self._changed.notify_all()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Let the backlog go out (within `timeout_s`), half-close (the drafter closes the requests,
        then the connection), and end both threads."""
        self._stopping.set()
        with self._lock:
            self._changed.wait_for(lambda: not self._backlog and not self._writing, timeout_s)
            _shut(self._sock, socket.SHUT_WR)
        self._thread.join(timeout_s)
        with self._lock:
            _shut(self._sock, socket.SHUT_RDWR)
        self._thread.join()
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._writer.join()

    def _connect(self) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._backoff.connect_timeout_s)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            return False
        sock.settimeout(None)
        with self._lock:
            if self._stopping.is_set():  # stop() may have looked for a socket just before
                sock.close()
                return False
            self._sock = sock
        return True

    def _stream(self) -> None:
        sock = self._sock
        assert sock is not None
        self._set_state(LinkState.UP, "connected (local socket)")
        self._listener.link_up(self)
        reason = "the replica closed the connection"
        try:
            while (payload := recv_frame(sock)) is not None:
                self._listener.link_reply(self, drafter_pb2.DraftReply.FromString(payload))
        except (OSError, FrameError, DecodeError) as exc:
            reason = repr(exc)
        finally:
            with self._lock:
                self._sock = None
                self._backlog.clear()
                _shut(sock, socket.SHUT_RDWR)  # a writer blocked in it returns
                self._changed.wait_for(lambda: not self._writing)
            sock.close()
        self._listener.link_down(self)
        if not self._stopping.is_set():
            self._set_state(LinkState.DOWN, f"lost ({reason})")

    def _write_loop(self) -> None:
        """Flushes the backlog, outside the lock, while the engine thread queues behind it."""
        while True:
            with self._lock:
                self._changed.wait_for(lambda: bool(self._backlog) or self._closed)
                if self._closed:
                    return
                data, sock = bytes(self._backlog), self._sock
                self._backlog.clear()
                self._writing = True
            try:
                if sock is not None:
                    sock.sendall(data)
            except OSError:
                _shut(sock, socket.SHUT_RDWR)  # the reader ends the stream
            finally:
                with self._lock:
                    self._writing = False
                    self._changed.notify_all()


def _shut(sock: socket.socket | None, how: int) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(how)
