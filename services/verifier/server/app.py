"""The verifier server: engine loop + gRPC service + metrics endpoint, started and stopped in-process.

    server = VerifierServer(VerifierServerConfig(EngineConfig(model_path), port=0))
    port = await server.start()      # model loaded, serving, health SERVING
    ...
    await server.stop()              # in-flight requests get the grace period, then end with ABORT

`serve_until_signalled` runs one until SIGTERM or SIGINT (the `treespec verifier` command).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from wsgiref.simple_server import WSGIServer

from opentelemetry import trace
from prometheus_client import CollectorRegistry, start_http_server

from treespec.shared.drafting.drafter import Drafter
from treespec.shared.launcher.heap_freeze import freeze_heap
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.shared.rpc.server import ServerHandle, create_server
from treespec.v1 import verifier_pb2, verifier_pb2_grpc
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.server import convert
from treespec.verifier.server.drafters import DrafterSpec, build_drafter
from treespec.verifier.server.engine_loop import EngineLoop
from treespec.verifier.server.metrics import VerifierMetrics
from treespec.verifier.server.profiler import EngineProfiler
from treespec.verifier.server.servicer import VerifierServicer

log = logging.getLogger(__name__)

SERVICE_NAME = verifier_pb2.DESCRIPTOR.services_by_name["Verifier"].full_name
TRACER_NAME = "treespec.verifier"


@dataclass(frozen=True)
class VerifierServerConfig:
    engine: EngineConfig
    host: str = "127.0.0.1"
    port: int = 50051  # 0: a free port
    metrics_port: int | None = None  # Prometheus over HTTP on host; None or 0: off
    served_model_name: str | None = None  # default: the model folder's name
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    shutdown_grace_s: float = 5.0  # how long in-flight requests may run on after a stop
    profile_dir: Path | None = None  # where /start_profile's traces go; None: profiling is off

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.engine.model_path.name


@dataclass
class _Running:
    engine: Engine
    loop: EngineLoop
    handle: ServerHandle
    metrics_http: WSGIServer | None
    drafter_shutdown: Callable[[], None]


class VerifierServer:
    """`drafter` and `model` replace what the config names (tests; a model loaded once)."""

    def __init__(
        self,
        config: VerifierServerConfig,
        *,
        drafter: Drafter | None = None,
        model: CausalLM | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        engine_thread: bool = True,
    ) -> None:
        """`engine_thread=False`: the caller runs `engine_loop.run()` in a thread of its choice
        (the CLI uses the main thread; see EngineLoop.run)."""
        self.config = config
        self._engine_thread = engine_thread
        self.metrics = VerifierMetrics(CollectorRegistry())
        self._drafter = drafter
        self._model = model
        self._tracer_provider = tracer_provider or trace.get_tracer_provider()
        self._running: _Running | None = None
        self._prepared: tuple[Engine, Callable[[], None]] | None = None

    @property
    def port(self) -> int:
        return self._state.handle.port

    @property
    def engine_loop(self) -> EngineLoop:
        return self._state.loop

    @property
    def _state(self) -> _Running:
        if self._running is None:
            raise RuntimeError("the verifier server is not running")
        return self._running

    def prepare(self) -> None:
        """Load the model and build the engine in the calling thread, before `start`.

        Call it from the thread that will run the engine (with `engine_thread=False`). Every thread
        that runs torch's parallel operations keeps an OpenMP thread team; with more such threads than
        cores, libgomp throttles its spin-waits and every matrix product of the engine slows down
        (measured here: 19 instead of 34 tokens/s). One thread for all torch work avoids that.
        """
        self._prepared = self._build_engine()

    async def start(self) -> int:
        """Load the model (unless prepared), start the engine thread (unless the caller runs it),
        serve; returns the bound port."""
        prepared, self._prepared = self._prepared, None
        if prepared is None and self._engine_thread:
            engine, drafter_shutdown, loop = await self._start_engine_thread()
        else:
            if prepared is None:
                prepared = await asyncio.to_thread(self._build_engine)
            engine, drafter_shutdown = prepared
            loop = EngineLoop(engine, self.metrics, self._profiler())
            if self._engine_thread:
                loop.start()
        metrics_http = None
        try:
            metrics_http = self._start_metrics_http()
            handle = await self._serve(engine, loop)
        except BaseException:
            await asyncio.to_thread(loop.stop)
            _close_http(metrics_http)
            drafter_shutdown()
            raise
        self._running = _Running(engine, loop, handle, metrics_http, drafter_shutdown)
        log.info("verifier listening on %s:%d", self.config.host, handle.port)
        return handle.port

    async def stop(self, grace: float | None = None) -> None:
        """Refuse new calls, let in-flight ones finish within `grace` seconds, end the rest with an
        ABORT chunk, stop the engine thread."""
        if self._running is None:
            return
        running, self._running = self._running, None
        grace = self.config.shutdown_grace_s if grace is None else grace
        server_stopped = asyncio.create_task(running.handle.stop(grace + 1.0))
        await _wait_idle(running.loop, grace)
        await asyncio.to_thread(running.loop.stop)
        await server_stopped
        _close_http(running.metrics_http)
        running.drafter_shutdown()
        log.info("verifier stopped")

    async def _start_engine_thread(self) -> tuple[Engine, Callable[[], None], EngineLoop]:
        """Build the engine on a thread of its own that then runs it: one thread does all the engine's
        torch work, as `prepare` explains (the model loaded in a worker thread and run in another once
        slowed every forward)."""
        built: concurrent.futures.Future[tuple[Engine, Callable[[], None], EngineLoop]]
        built = concurrent.futures.Future()

        def build_then_run() -> None:
            try:
                engine, drafter_shutdown = self._build_engine()
                loop = EngineLoop(engine, self.metrics, self._profiler())
            except BaseException as exc:
                built.set_exception(exc)
                return
            built.set_result((engine, drafter_shutdown, loop))
            loop.run()

        threading.Thread(target=build_then_run, name="treespec-engine", daemon=True).start()
        return await asyncio.wrap_future(built)

    def _profiler(self) -> EngineProfiler:
        return EngineProfiler(self.config.profile_dir, self.config.engine.device)

    def _build_engine(self) -> tuple[Engine, Callable[[], None]]:
        """The engine, and what ends the drafter built here (an injected one is the caller's)."""
        c = self.config.engine
        model = self._model or load_model(c.model_path, c.load_options())
        if self._drafter is not None:
            return Engine(c, self._drafter, model), _nothing
        built = build_drafter(self.config.drafter, model, c.model_path)
        try:
            return Engine(c, built.drafter, model), built.shutdown
        except BaseException:
            built.shutdown()
            raise

    async def _serve(self, engine: Engine, loop: EngineLoop) -> ServerHandle:
        # No tracing interceptor: the servicer reads the caller's context from the metadata (spans.py).
        handle = create_server(f"{self.config.host}:{self.config.port}")
        verifier_pb2_grpc.add_VerifierServicer_to_server(self._servicer(engine, loop), handle.server)
        await handle.start([SERVICE_NAME])
        return handle

    def _servicer(self, engine: Engine, loop: EngineLoop) -> VerifierServicer:
        algorithm = self.config.drafter.name or (self.config.engine.speculative_algorithm or "")
        info = convert.model_info(engine, self.config.model_name, algorithm)
        tracer = self._tracer_provider.get_tracer(TRACER_NAME)
        return VerifierServicer(loop, info, engine.config.speculation, tracer)

    def _start_metrics_http(self) -> WSGIServer | None:
        if not self.config.metrics_port:
            return None
        httpd, _ = start_http_server(
            self.config.metrics_port, addr=self.config.host, registry=self.metrics.registry
        )
        log.info("verifier metrics at http://%s:%d/metrics", self.config.host, httpd.server_port)
        return httpd


def _nothing() -> None:
    pass


def _close_http(httpd: WSGIServer | None) -> None:
    if httpd is not None:
        httpd.shutdown()
        httpd.server_close()


async def _wait_idle(loop: EngineLoop, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while loop.num_live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def serve_until_signalled(
    config: VerifierServerConfig, *, tracer_provider: trace.TracerProvider | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully. Call from the main thread.

    The engine is built and run in this thread, and the event loop with the gRPC server gets a thread
    of its own that never runs torch: see VerifierServer.prepare.
    """
    server = VerifierServer(config, tracer_provider=tracer_provider, engine_thread=False)
    server.prepare()
    event_loop = asyncio.new_event_loop()
    io_thread = threading.Thread(target=event_loop.run_forever, name="treespec-io", daemon=True)
    io_thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), event_loop).result()
    engine_loop = server.engine_loop
    stopped: list[concurrent.futures.Future[None]] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # stop() waits for in-flight requests, which need the engine: it runs on the event loop
        # while this thread keeps stepping until the engine loop is told to stop.
        if not stopped:
            stopped.append(asyncio.run_coroutine_threadsafe(server.stop(), event_loop))

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    freeze_heap()  # the process is ready: its startup objects need no more scanning
    try:
        engine_loop.run()
    finally:
        if stopped:
            stopped[0].result()
        else:
            asyncio.run_coroutine_threadsafe(server.stop(), event_loop).result()
        event_loop.call_soon_threadsafe(event_loop.stop)
        io_thread.join()
        event_loop.close()
