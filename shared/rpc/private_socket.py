"""Unix domain sockets private to one user: the co-location handshake's socket (shared memory
handles) and a co-located drafter's local Draft stream. Only a filesystem path is accepted, never a
network address; the socket file is mode 0600, and servers check the peer's uid as the kernel
reports it as well (between bind and chmod another user could connect)."""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
from pathlib import Path

SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]*\]|[\w.-]*):\d+$")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (Linux SO_PEERCRED)


class SocketInUseError(RuntimeError):
    """The path is served by a live process already, or is some other kind of file."""


def socket_path(value: str | os.PathLike[str]) -> Path:
    """A filesystem path for an AF_UNIX socket (gRPC's "unix:PATH" and "unix:///abs" allowed).
    Refused (ValueError): network addresses (host:port, scheme://...) and abstract sockets ("@name"),
    which no file permission protects."""
    text = os.fspath(value)
    for prefix in ("unix://", "unix:"):
        if text.startswith(prefix):
            text = text.removeprefix(prefix)
            break
    if not text:
        raise ValueError("a Unix socket needs a path")
    if "://" in text or ("/" not in text and _HOST_PORT.match(text)):
        raise ValueError(f"a Unix domain socket path is needed here, not the network address {value!r}")
    if text.startswith(("@", "\0")):
        raise ValueError(f"abstract Unix sockets are not accepted ({value!r}): give a filesystem path")
    if len(os.fsencode(text)) > SUN_PATH_MAX:
        raise ValueError(f"socket path longer than {SUN_PATH_MAX} bytes: {text}")
    return Path(text)


def bind_private(path: Path, backlog: int = 8) -> socket.socket:
    """A listening socket on a fresh socket file, readable and writable by this user only. A stale
    socket file (its server is gone) is replaced; a live one, or any other file, is an error."""
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise SocketInUseError(f"{path} exists and is not a socket")
        if _answers(path):
            raise SocketInUseError(f"another process is serving at {path}")
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.fspath(path))
        os.chmod(path, 0o600)
        listener.listen(backlog)
    except BaseException:
        listener.close()
        raise
    return listener


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """The connected process's pid and uid, as the kernel reports them (not as the peer claims)."""
    pid, uid, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid, uid


def same_user(conn: socket.socket) -> bool:
    return peer_credentials(conn)[1] == os.geteuid()


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(os.fspath(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True
