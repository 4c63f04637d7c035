"""Length-prefixed frames: how a co-located drafter's Draft stream carries its protobuf messages over
a local socket (local_link.py on the verifier, local_server.py on the drafter) without gRPC's
threads. A frame is a 4-byte little-endian length, then that many bytes of one serialized message."""

from __future__ import annotations

import asyncio
import socket
import struct

HEADER = struct.Struct("<I")
MAX_FRAME_BYTES = 64 * 1024 * 1024  # as the gRPC channels' largest message


class FrameError(ValueError):
    """A frame over MAX_FRAME_BYTES, or a connection closed in the middle of one."""


def frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_BYTES:
        raise FrameError(f"a {len(payload)}-byte message is over the {MAX_FRAME_BYTES}-byte frame limit")
    return HEADER.pack(len(payload)) + payload


def recv_frame(sock: socket.socket) -> bytes | None:
    """The next frame's payload from a blocking socket; None when the peer closed between frames."""
    header = _recv_exactly(sock, HEADER.size)
    if header is None:
        return None
    payload = _recv_exactly(sock, _length(header))
    if payload is None:
        raise FrameError("the connection closed in the middle of a frame")
    return payload


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's payload; None when the peer closed between frames."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("the connection closed in the middle of a frame") from exc
        return None
    try:
        return await reader.readexactly(_length(header))
    except asyncio.IncompleteReadError as exc:
        raise FrameError("the connection closed in the middle of a frame") from exc


def _length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"a {length}-byte frame is over the {MAX_FRAME_BYTES}-byte limit")
    return int(length)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    """None when the peer closed before the first byte."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return None
            raise FrameError("the connection closed in the middle of a frame")
        got += n
    return bytes(buffer)
