"""Run the gateway on uvicorn (uvloop event loop, httptools HTTP parser) until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import socket

import uvicorn
from opentelemetry import trace

from treespec.gateway.app import create_app
from treespec.gateway.config import GatewayConfig

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5  # open streams may run this long after SIGTERM; then they are cut (and cancelled)


class _Server(uvicorn.Server):
    """uvicorn's server, saying where it listens once the socket is bound (port 0: the chosen one)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            scheme = "https" if self.config.is_ssl else "http"
            log.info("gateway listening on %s://%s:%d", scheme, host, port)


def serve(config: GatewayConfig, *, tracer_provider: trace.TracerProvider | None = None) -> None:
    app = create_app(config, tracer_provider=tracer_provider)
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        loop="uvloop",
        http="httptools",
        log_level=config.logs.http_log_level,
        access_log=config.logs.access_log,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        **(config.tls.uvicorn_options() if config.tls is not None else {}),
    )
    _Server(uvicorn_config).run()
