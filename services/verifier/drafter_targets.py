"""Where the drafter replicas are: a fixed list of host:port (or `local:PATH`, a co-located drafter's
local socket), or a DNS name that resolves to several."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from treespec.shared.rpc.private_socket import socket_path

DNS_SCHEME = "dns:///"
LOCAL_SCHEME = "local:"  # the Draft stream over a co-located drafter's local socket (local_link.py)


@dataclass(frozen=True)
class DrafterTargets:
    """`fixed`: host:port addresses; or `dns_host`/`dns_port`: resolve (and re-resolve) those."""

    fixed: tuple[str, ...] = ()
    dns_host: str | None = None
    dns_port: int = 0

    @classmethod
    def parse(cls, targets: list[str] | str) -> DrafterTargets:
        """A list of host:port or local:PATH; or one string: `dns:///name:port`, or a single address."""
        if isinstance(targets, str) and targets.startswith(DNS_SCHEME):
            host, port = split_host_port(targets.removeprefix(DNS_SCHEME))
            return cls(dns_host=host, dns_port=port)
        addresses = (targets,) if isinstance(targets, str) else tuple(targets)
        if not addresses:
            raise ValueError("no drafter targets")
        for address in addresses:
            if local_socket_path(address) is None:
                split_host_port(address)
        return cls(fixed=addresses)

    @property
    def dynamic(self) -> bool:
        return self.dns_host is not None

    def resolve(self) -> list[str]:
        """The addresses now; raises OSError (socket.gaierror) when the name does not resolve."""
        if self.dns_host is None:
            return list(self.fixed)
        infos = socket.getaddrinfo(self.dns_host, self.dns_port, type=socket.SOCK_STREAM)
        ips = dict.fromkeys(str(info[4][0]) for info in infos)  # ordered and unique
        return [join_host_port(ip, self.dns_port) for ip in ips]


def local_socket_path(address: str) -> str | None:
    """The socket path of a `local:PATH` address (None for other addresses); ValueError when PATH is
    not a filesystem path."""
    if not address.startswith(LOCAL_SCHEME):
        return None
    return os.fspath(socket_path(address.removeprefix(LOCAL_SCHEME)))


def split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"drafter address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
