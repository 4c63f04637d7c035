"""Loopback ports: a free one, for services started on ports nobody chose (tests, benchmarks), and
whether a chosen one is taken, checked before a service loads anything."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: held at once while chosen (free ports taken one after the other
    can repeat, and two services of a stack then met on one port)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_in_use(host: str, port: int) -> bool:
    """Whether another server listens on host:port now, so that a server of ours could not (bound as
    ours bind, with SO_REUSEADDR: connections closing on the port do not count). A host that does
    not resolve is not this check's to report (False): the server's own bind names it."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def taken_ports(addresses: Iterable[tuple[str, int]]) -> str | None:
    """An error naming those of `addresses` (host, port; port 0: any free one, never taken) another
    server listens on; None where all are free. Services check before they load anything: their
    own binds would refuse a taken port only after that."""
    taken = [f"{host}:{port}" for host, port in addresses if port and port_in_use(host, port)]
    return f"already in use: {', '.join(taken)} (another server listens there)" if taken else None
