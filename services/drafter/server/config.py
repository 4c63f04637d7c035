"""The drafter server's configuration: built from the command line at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from treespec.drafter.server.plugin_calls import PluginCalls
from treespec.shared.drafting.drafter import DrafterContext

DEFAULT_PORT = 50061


@dataclass(frozen=True)
class DrafterServerConfig:
    kind: str  # a drafter registry name, or `package.module:Class`
    context: DrafterContext
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port
    grace_s: float = 5.0  # on SIGTERM/SIGINT: how long running streams may finish
    plugin_calls: PluginCalls = PluginCalls.THREAD  # where the plugin's calls run (plugin_calls.py)
    local_socket: Path | None = None  # also serve the Draft stream there (local_server.py)

    @property
    def address(self) -> str:
        return join_host_port(self.host, self.port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
