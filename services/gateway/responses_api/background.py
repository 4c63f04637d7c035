"""Responses made in the background (`background: true`, as on OpenAI's service and vLLM): begun at
once with status `in_progress`, then made by a task of the gateway's and stored as they end
(`completed` or `incomplete`, `failed` with its error, or `cancelled` by
`POST /v1/responses/{id}/cancel`); a client polls `GET /v1/responses/{id}`. They live in the
response store, so they need it (`--responses-store-size` above 0).

With `stream: true` as well, the request is answered with the response's typed events as they are
made, and they are kept in an event log (responses_api/event_log.py): a client whose connection
drops follows them again with `GET /v1/responses/{id}?stream=true&starting_after=N`, and the response
is made whether or not anyone follows. The logs of the last `kept_logs` finished responses are kept
for such replays (those still being made always are). With a store in Redis the events are written
there too (responses_api/redis_events.py), so they are followed on any replica, and kept as long as
the response."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any

from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event
from treespec.gateway.responses_api.event_log import Event as LoggedEvent
from treespec.gateway.responses_api.event_log import EventLog, error_event
from treespec.gateway.responses_api.redis_events import RedisEventStreams
from treespec.gateway.responses_api.store import StoreOrder

if TYPE_CHECKING:  # job.py imports the run, which imports the gateway's state, which holds this
    from treespec.gateway.responses_api.job import ResponseJob

log = logging.getLogger(__name__)

KEPT_EVENT_LOGS = 64  # finished streamed background responses whose events can still be replayed
FLUSH_S = 2.0  # how long a stopping gateway waits for the events it has logged to reach Redis


class BackgroundResponses:
    def __init__(self, kept_logs: int = KEPT_EVENT_LOGS, shared: RedisEventStreams | None = None) -> None:
        self._making: dict[str, tuple[ResponseJob, asyncio.Task[None]]] = {}
        self._logs: OrderedDict[str, EventLog] = OrderedDict()
        self._kept_logs = kept_logs
        self._shared = shared  # the events in Redis, for the other replicas
        self._writers: set[asyncio.Task[None]] = set()

    async def start(self, job: ResponseJob) -> dict[str, Any]:
        """Store the response as in progress and start making it; what the request is answered with."""
        begun = await self._begin(job)
        self._run(job, self._make(job))
        return begun

    async def start_streamed(self, job: ResponseJob, events: AsyncGenerator[Event, None]) -> EventLog:
        """Store the response as in progress and start making it from `events`, its typed events
        going into the log that the request (and any later client) follows."""
        await self._begin(job)
        events_log = EventLog()
        self._logs[job.run.id] = events_log
        if self._shared is not None:
            await self._shared.open(job.run.id)
            self._write(self._shared.write(job.run.id, events_log))
        self._run(job, self._make_streamed(job, events, events_log))
        return events_log

    async def events(self, response_id: str, starting_after: int = -1) -> AsyncIterator[LoggedEvent] | None:
        """The events of a streamed background response after sequence number `starting_after`, then
        each as it is made: from this replica's log, or from Redis; None when none are kept."""
        kept = self._logs.get(response_id)
        if kept is not None:
            return kept.follow(starting_after)
        if self._shared is not None and await self._shared.exists(response_id):
            return self._shared.follow(response_id, starting_after)
        return None

    async def cancel(self, response_id: str, keep: bool = True) -> dict[str, Any] | None:
        """Stop making the response and store it as cancelled (unless not `keep`: it is being
        deleted); None when this gateway makes none of that id."""
        making = self._making.get(response_id)
        if making is None or making[1].done():  # done: stored already, as it ended
            return None
        job, task = self._making.pop(response_id)
        task.cancel()  # closes its generation: the verifier frees the request
        events_log = self._logs.get(response_id)
        if events_log is not None and not events_log.closed:  # its followers learn why it ends
            cancelling = error_event("response_cancelled", "The response was cancelled.")
            events_log.append({**cancelling, "sequence_number": len(events_log)})
            events_log.close()  # before anything is awaited: the cancelled task would close it first
        cancelled = job.body(None, "cancelled")
        if keep:
            await job.keep(cancelled)
        return cancelled

    async def forget(self, response_id: str) -> None:
        """Cancel the response if it is being made, and drop its events (it is deleted)."""
        await self.cancel(response_id, keep=False)
        self._logs.pop(response_id, None)

    async def follow(self, orders: AsyncIterator[StoreOrder]) -> None:
        """Carry out the orders other gateway replicas give about the responses this one makes."""
        async for order in orders:
            if order.action == "cancel":
                await self.cancel(order.response_id)
            elif order.action == "forget":
                await self.forget(order.response_id)

    async def close(self) -> None:
        """Cancel every response still being made (the gateway is stopping), and give their events a
        moment to reach Redis."""
        tasks = [task for _, task in self._making.values()]
        for response_id in list(self._making):
            await self.cancel(response_id)
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._writers:
            await asyncio.wait(self._writers, timeout=FLUSH_S)
        for writer in self._writers:
            writer.cancel()
        await asyncio.gather(*self._writers, return_exceptions=True)
        if self._shared is not None:
            await self._shared.close()

    def _write(self, writing: Coroutine[Any, Any, None]) -> None:
        writer = asyncio.create_task(writing)
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)

    @staticmethod
    async def _begin(job: ResponseJob) -> dict[str, Any]:
        if not job.stores:
            raise APIError(
                400,
                "A background response must be stored (store: true, and a server whose "
                "--responses-store-size is above 0), for it is fetched later by its id.",
                code="invalid_value",
                param="background",
            )
        begun = job.body(None, "in_progress")
        await job.keep(begun)
        return begun

    def _run(self, job: ResponseJob, making: Coroutine[Any, Any, None]) -> None:
        response_id = job.run.id
        task = asyncio.create_task(making, name=f"response {response_id}")
        self._making[response_id] = (job, task)
        task.add_done_callback(lambda _: self._making.pop(response_id, None))

    @staticmethod
    async def _make(job: ResponseJob) -> None:
        try:
            await job.whole()
        except APIError as error:
            await job.keep(_failed(job, error.code or "server_error", error.message))
        except Exception as exc:  # recorded in the response: nobody awaits the task to raise it to
            log.exception("background response %s failed", job.run.id)
            await job.keep(_failed(job, "server_error", f"The response could not be made: {exc!r}"))

    async def _make_streamed(
        self, job: ResponseJob, events: AsyncGenerator[Event, None], out: EventLog
    ) -> None:
        """Log the response's events as they are made; an error ends them with the failed response."""
        failure: tuple[str, str] | None = None
        try:
            async for event in job.stream(events):
                if out.closed:  # cancelled: its last event is logged already
                    return
                out.append(event)
                if event["type"] == "error":
                    failure = (event["code"] or "server_error", event["message"])
        except Exception as exc:
            log.exception("background response %s failed", job.run.id)
            failure = ("server_error", f"The response could not be made: {exc!r}")
            if not out.closed:
                out.append({**error_event(*failure), "sequence_number": len(out)})
        finally:
            if failure is not None and not out.closed:
                failed = _failed(job, *failure)
                await job.keep(failed)
                out.append({"type": "response.failed", "response": failed, "sequence_number": len(out)})
            out.close()
            self._trim_logs()

    def _trim_logs(self) -> None:
        """Drop the oldest finished logs beyond those kept."""
        finished = [response_id for response_id, kept in self._logs.items() if kept.closed]
        for response_id in finished[: max(len(finished) - self._kept_logs, 0)]:
            del self._logs[response_id]


def _failed(job: ResponseJob, code: str, message: str) -> dict[str, Any]:
    return {**job.body(None, "failed"), "error": {"code": code, "message": message}}
