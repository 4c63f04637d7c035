"""The Draft stream over a local socket, for the verifier beside a co-located drafter.

The same messages as the gRPC Draft stream (DraftRequest in, DraftReply out, in order), each in a
length-prefixed frame (shared/rpc/frames.py) on a Unix socket private to this user. A round trip then
costs one hand-off into this event loop and one back, where gRPC adds its own threads in both
processes: on 2 shared CPU cores, with a trivial plugin, a median of 0.7-0.8 ms against 1.4-1.6 ms
(README, Co-location). One connection is one stream: its requests are closed when it ends, however
it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from pathlib import Path

from google.protobuf.message import DecodeError

from treespec.drafter.server.servicer import DrafterServicer
from treespec.shared.rpc.frames import FrameError, frame, read_frame
from treespec.shared.rpc.private_socket import bind_private, peer_credentials, same_user
from treespec.v1 import drafter_pb2

log = logging.getLogger(__name__)


class LocalDraftServer:
    """Serves `servicer` on `path` from the running event loop; `close` ends every connection."""

    def __init__(self, servicer: DrafterServicer, path: Path) -> None:
        self.path = path
        self._servicer = servicer
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> LocalDraftServer:
        """Listening once this returns. Raises SocketInUseError when another server holds the path."""
        listener = bind_private(self.path)
        handler = functools.partial(_track, self._connections, self._servicer)
        self._server = await asyncio.start_unix_server(handler, sock=listener)
        return self

    async def close(self) -> None:
        """Stop listening, remove the socket file, end the connections (their requests are closed)."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for writer in self._connections.values():
            writer.close()  # the connection reads an end of stream and ends as if the verifier left
        await asyncio.gather(*self._connections, return_exceptions=True)


async def _track(
    connections: dict[asyncio.Task[None], asyncio.StreamWriter],
    servicer: DrafterServicer,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    task = asyncio.current_task()
    assert task is not None
    connections[task] = writer
    try:
        await _serve_connection(servicer, reader, writer)
    finally:
        del connections[task]


async def _serve_connection(
    servicer: DrafterServicer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A peer's mistake (a malformed or oversized frame) ends its connection, never the server."""
    conn: socket.socket = writer.get_extra_info("socket")
    if not same_user(conn):
        log.warning("refused a local Draft stream from uid %d", peer_credentials(conn)[1])
        writer.close()
        return
    session = servicer.session()
    try:
        while (payload := await read_frame(reader)) is not None:
            reply = await servicer.handle(session, drafter_pb2.DraftRequest.FromString(payload))
            if reply is not None:
                writer.write(frame(reply.SerializeToString()))
                await writer.drain()
    except (FrameError, DecodeError) as exc:
        log.warning("ending a local Draft stream: %s", exc)
    except ConnectionError:
        pass  # the verifier went away
    finally:
        servicer.end(session)
        writer.close()
