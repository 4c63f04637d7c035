"""The engine on its own thread beside the asyncio event loop, with outputs routed to async streams.

`Engine.step` blocks (a forward pass), so it runs on one dedicated thread; the event loop only
queues requests and aborts (both thread-safe on the engine) and receives outputs through
`call_soon_threadsafe`. Idle, the thread sleeps on an Event.

A request id stays taken from `submit` until the engine's last output for it has been handled, so
that a late output of an aborted request can never reach a new request that reuses its id.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from treespec.verifier.engine import Engine
from treespec.verifier.request import EngineBusyError, FinishReason, GenerationRequest, RequestOutput
from treespec.verifier.server.observer import EngineSnapshot, FinishedRequest, LoopObserver
from treespec.verifier.server.output_stream import OutputStream
from treespec.verifier.server.profiler import EngineProfiler

log = logging.getLogger(__name__)

T = TypeVar("T")


class DuplicateRequestError(ValueError):
    """The request id belongs to a live request."""


class EngineStoppedError(RuntimeError):
    """The loop is shutting down and takes no new requests."""


class EngineStepError(RuntimeError):
    """An engine step failed while the request was live; the request was aborted."""


@dataclass(eq=False)
class _Route:
    """Where one request's outputs go, and its timing. Guarded by the loop's lock."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput | BaseException]
    num_prompt: int
    submitted_at: float
    first_token_at: float | None = None
    num_output: int = 0
    closed: bool = False  # the consumer is gone or has had its last item: outputs are dropped

    def deliver(self, item: RequestOutput | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # its event loop is closed: nobody is listening any more
            self.closed = True

    def record(self, output: RequestOutput, now: float) -> FinishedRequest | None:
        if output.token_ids:
            if self.first_token_at is None:
                self.first_token_at = now
            self.num_output += len(output.token_ids)
        if not output.finished:
            return None
        first = self.first_token_at
        ttft = None if first is None else first - self.submitted_at
        tpot = None if first is None or self.num_output < 2 else (now - first) / (self.num_output - 1)
        return FinishedRequest(output, self.num_output, ttft, tpot)


class EngineLoop:
    def __init__(
        self, engine: Engine, observer: LoopObserver | None = None, profiler: EngineProfiler | None = None
    ) -> None:
        self.engine = engine
        self._observer = observer
        self._profiler = profiler or EngineProfiler(None)
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._snapshot = EngineSnapshot.of(engine)
        self._thread = threading.Thread(target=self.run, name="treespec-engine", daemon=True)
        self._started = threading.Event()
        self._exited = threading.Event()

    # ---- the event loop's side ---------------------------------------------------------------

    def start(self) -> None:
        """Run the engine on a thread of its own."""
        self._thread.start()

    def run(self) -> None:
        """Run the engine in the calling thread until `stop` (instead of `start`).

        Where speed matters, build the engine in that same thread too (VerifierServer.prepare)."""
        self._started.set()
        try:
            self._run()
        finally:
            self._exited.set()

    @property
    def is_alive(self) -> bool:
        return self._started.is_set() and not self._exited.is_set()

    def snapshot(self) -> EngineSnapshot:
        """The engine's figures after its latest step."""
        return self._snapshot

    @property
    def num_live(self) -> int:
        """Requests submitted whose last output has not been handled yet."""
        with self._lock:
            return len(self._routes)

    async def submit(self, request: GenerationRequest) -> OutputStream:
        """Queue `request` (validation errors raise here) and return its outputs' stream."""
        # A constraint compiles off the event loop (a large schema may take a while); cached for
        # add_request below. An invalid one raises here.
        await asyncio.to_thread(self.engine.compile_constraint, request.sampling.constraint)
        loop = asyncio.get_running_loop()
        rid = request.request_id
        route = _Route(loop, asyncio.Queue(), len(request.prompt_ids), time.monotonic())
        with self._lock:
            if self._stopping:
                raise EngineStoppedError("the verifier is shutting down")
            if rid in self._routes:
                raise DuplicateRequestError(f"request id {rid!r} belongs to a live request")
            self.engine.add_request(request)
            self._routes[rid] = route
        self._wake.set()
        return OutputStream(rid, route.queue, lambda: self._release(rid, route))

    def flush_cache(self) -> int:
        """Forget the engine's cached prefixes; the blocks given back. Under the lock, with no
        request live: the engine thread is then waiting, not stepping (EngineBusyError otherwise)."""
        with self._lock:
            if self._routes:
                raise EngineBusyError("the prefix cache is flushed only while no request runs or waits")
            return self.engine.flush_cache()

    async def start_profile(self, num_steps: int = 0, record_shapes: bool = False) -> Path:
        """Record a profiler trace of the engine's steps (profiler.py); where it will be written."""
        return await self.on_engine_thread(functools.partial(self._profiler.start, num_steps, record_shapes))

    async def stop_profile(self) -> Path:
        """Stop recording and write the trace; its path."""
        return await self.on_engine_thread(self._profiler.stop)

    async def on_engine_thread(self, call: Callable[[], T]) -> T:
        """`call`'s result, run on the engine thread between two steps (or while it idles)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._stopping:
                raise EngineStoppedError("the verifier is shutting down")
            self._calls.put((call, future))
        self._wake.set()
        return await asyncio.wrap_future(future)

    def abort(self, request_id: str) -> None:
        """Abort a live request; its stream ends with an ABORT output."""
        with self._lock:
            if request_id in self._routes:
                self.engine.abort(request_id)
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """End every live stream with an ABORT output, free the engine's requests, join the thread."""
        with self._lock:
            self._stopping = True
            for rid, route in self._routes.items():
                if not route.closed:
                    route.closed = True
                    route.deliver(RequestOutput(rid, [], FinishReason.ABORT, route.num_prompt))
                self.engine.abort(rid)
        self._wake.set()
        if self._started.is_set():
            self._exited.wait(timeout)

    def _release(self, rid: str, route: _Route) -> None:
        """The consumer stopped listening: abort the request unless it is over already."""
        with self._lock:
            if self._routes.get(rid) is not route or route.closed:
                return
            route.closed = True
            self.engine.abort(rid)  # under the lock: it must reach the engine before any reuse of rid
        self._wake.set()

    # ---- the engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        while self._wait_for_work():
            self._run_step()
        self._run_step()  # the aborts queued by stop(): frees their KV, closes them at the drafter
        self._run_calls(EngineStoppedError("the verifier is shutting down"))
        log.info("engine loop stopped")

    def _run_calls(self, refusal: BaseException | None = None) -> None:
        """The calls queued for this thread (refused with `refusal`, once stopping)."""
        while True:
            try:
                call, future = self._calls.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            if refusal is not None:
                future.set_exception(refusal)
                continue
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

    def _wait_for_work(self) -> bool:
        """Sleep until there is work; False once stopping."""
        while True:
            self._wake.clear()
            self._run_calls()
            with self._lock:
                if self._stopping:
                    return False
                if self.engine.has_work():
                    return True
                self._drop_orphans()
            self._wake.wait()

    def _drop_orphans(self) -> None:
        """An idle engine holds no request: closed routes still waiting for one are orphans
        (their last output was lost in a failed step)."""
        for rid in [rid for rid, route in self._routes.items() if route.closed]:
            del self._routes[rid]

    def _run_step(self) -> None:
        try:
            self._dispatch(self.engine.step())
        except Exception as exc:
            log.exception("engine step failed; aborting the live requests")
            self._fail_live(exc)
        self._publish()
        self._profiled()
        self._run_calls()

    def _profiled(self) -> None:
        """Count the step in a recording of so many steps; write the trace when it is the last."""
        try:
            written = self._profiler.stepped()
        except Exception:  # a trace that cannot be written never stops the engine
            log.exception("the profiler trace could not be written")
            return
        if written is not None:
            log.info("profiler trace written to %s", written)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        now = time.monotonic()
        finished: list[FinishedRequest] = []
        with self._lock:
            for output in outputs:
                route = self._routes.get(output.request_id)
                if route is None:
                    continue
                record = route.record(output, now)
                if record is not None:
                    del self._routes[output.request_id]
                    finished.append(record)
                if not route.closed:
                    route.deliver(output)
        for record in finished:
            self._notify(functools.partial(self._report_finished, record))

    def _fail_live(self, exc: Exception) -> None:
        with self._lock:
            for rid, route in self._routes.items():
                if not route.closed:
                    route.closed = True
                    route.deliver(EngineStepError(f"the engine failed: {exc!r}"))
                self.engine.abort(rid)

    def _publish(self) -> None:
        self._snapshot = EngineSnapshot.of(self.engine)
        self._notify(functools.partial(self._report_step, self._snapshot))

    def _report_finished(self, record: FinishedRequest) -> None:
        if self._observer is not None:
            self._observer.request_finished(record)

    def _report_step(self, snapshot: EngineSnapshot) -> None:
        if self._observer is not None:
            self._observer.engine_stepped(snapshot)

    @staticmethod
    def _notify(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # metrics trouble never reaches a request
            log.exception("loop observer failed")
