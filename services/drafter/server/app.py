"""Running the drafter server: in-process (`DrafterServer`, tests and embedding) or as a process
(`serve`, the `treespec drafter` command)."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from opentelemetry import trace

from treespec.drafter.server.config import DrafterServerConfig, join_host_port
from treespec.drafter.server.local_server import LocalDraftServer
from treespec.drafter.server.plugin_calls import PluginCalls
from treespec.drafter.server.servicer import DrafterServicer
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.launcher.heap_freeze import freeze_heap
from treespec.shared.rpc.server import ServerHandle, create_server
from treespec.shared.telemetry.tracing import build_tracer_provider, install_tracer_provider
from treespec.v1 import drafter_pb2, drafter_pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

SERVICE_NAME: str = drafter_pb2.DESCRIPTOR.services_by_name["Drafter"].full_name


async def start_server(servicer: DrafterServicer, address: str) -> ServerHandle:
    """Bound, started and reported SERVING by health checking."""
    handle = create_server(address)
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, handle.server)
    await handle.start([SERVICE_NAME])
    return handle


class DrafterServer:
    """A drafter server on an event loop of its own, in a background thread (started here)."""

    def __init__(
        self,
        plugin: Drafter | Callable[[], Drafter],
        kind: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tracer: trace.Tracer | None = None,
        calls: PluginCalls = PluginCalls.THREAD,
        local_socket: Path | None = None,
    ) -> None:
        """`plugin`, or a function that makes it on the plugin's thread (DrafterServicer.build);
        `calls`: where its calls run (plugin_calls.py); `local_socket`: also serve the Draft stream
        there, for a verifier on this machine (local_server.py)."""
        make = (lambda: plugin) if isinstance(plugin, Drafter) else plugin
        self._address = join_host_port(host, port)
        self._local_socket = local_socket
        self._local: LocalDraftServer | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="drafter-server", daemon=True)
        self._handle: ServerHandle | None = None
        self._thread.start()
        try:  # on the loop's thread, which runs the plugin's calls with PluginCalls.LOOP
            build = _call(lambda: DrafterServicer.build(make, kind, tracer, calls))
            self.servicer = asyncio.run_coroutine_threadsafe(build, self._loop).result()
        except BaseException:
            self._end_loop()
            raise

    def start(self) -> int:
        """Returns the bound port (a free one when constructed with port 0)."""
        if self._local_socket is not None:
            local = LocalDraftServer(self.servicer, self._local_socket).start()
            self._local = asyncio.run_coroutine_threadsafe(local, self._loop).result()
        future = asyncio.run_coroutine_threadsafe(start_server(self.servicer, self._address), self._loop)
        self._handle = future.result()
        return self._handle.port

    def stop(self, grace_s: float | None = 0.5) -> None:
        """Ends every stream (their requests are closed in the plugin), then the loop and thread."""
        if self._local is not None:
            asyncio.run_coroutine_threadsafe(self._local.close(), self._loop).result()
            self._local = None
        if self._handle is not None:
            asyncio.run_coroutine_threadsafe(_stop(self._handle, grace_s), self._loop).result()
            self._handle = None
        self.servicer.shutdown()
        self._end_loop()

    def _end_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    def __enter__(self) -> DrafterServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _call(fn: Callable[[], T]) -> T:
    return fn()


async def _stop(handle: ServerHandle, grace_s: float | None) -> None:
    """Stop the server, then let the RPC tasks it cancelled unwind before the loop goes away."""
    await handle.stop(grace_s)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:
        _, pending = await asyncio.wait(others, timeout=1.0)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def serve(config: DrafterServerConfig) -> int:
    """Run until SIGTERM or SIGINT; then stop accepting, let streams finish for `grace_s`, exit 0.

    Raises UnknownDrafterError (a ValueError), or TypeError for options the plugin does not take.
    """
    install_tracer_provider(build_tracer_provider("treespec-drafter"))
    # Built on this thread, which runs the event loop below (and so, with PluginCalls.LOOP, the plugin).
    make = functools.partial(create_drafter, config.kind, config.context)
    servicer = DrafterServicer.build(make, config.kind, calls=config.plugin_calls)
    freeze_heap()
    asyncio.run(_serve_until_signal(servicer, config))
    return 0


async def _serve_until_signal(servicer: DrafterServicer, config: DrafterServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Listening locally before gRPC reports SERVING, which is what launchers wait for.
    local = None
    if config.local_socket is not None:
        local = await LocalDraftServer(servicer, config.local_socket).start()
        log.info("drafter (%s) serving the Draft stream locally at %s", config.kind, config.local_socket)
    handle = await start_server(servicer, config.address)
    log.info("drafter (%s) listening on %s", config.kind, join_host_port(config.host, handle.port))
    await stop.wait()
    log.info("drafter (%s) stopping", config.kind)
    if local is not None:
        await local.close()
    await handle.stop(config.grace_s)
    await asyncio.to_thread(servicer.shutdown)
