"""Running a batch file (batch_file.py) against a gateway: the lines are read as they are needed, at
most `max_concurrency` requests are in flight, and each result goes to a sink as it ends. For
`treespec run-batch` (over HTTP) the sink writes each as soon as every line before it has been, so the
output keeps the input's order while memory holds only what is out of order; the Batch API
(batch_api/jobs.py) sends through the gateway's own routes and keeps them for its output files. A
request that gets no answer (the connection fails) is an error line; the others go on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

import httpx

from treespec.gateway.batch_file import BatchRequest, LineError, answered, parse_line, unsent

Result = dict[str, Any]


@dataclass
class BatchSummary:
    lines: int = 0
    succeeded: int = 0  # answered with a 2xx
    failed: int = 0  # answered with another status, or not sent


class OrderedWriter:
    """Writes results in their lines' order as they become ready."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._ready: dict[int, str] = {}
        self._next = 0

    def add(self, index: int, result: Result) -> None:
        self._ready[index] = json_line(result)
        while self._next in self._ready:
            self._out.write(self._ready.pop(self._next) + "\n")
            self._next += 1
        self._out.flush()


class ResultSink(Protocol):
    """Where each line's result goes, by the line's index among the batch's requests."""

    def add(self, index: int, result: Result) -> None: ...


async def run_batch(
    lines: Iterable[str], out: TextIO, base_url: str, max_concurrency: int, api_key: str | None = None
) -> BatchSummary:
    """Send every line's request to the gateway at `base_url`; write the results to `out`."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=None) as client:
        return await send_lines(lines, client, OrderedWriter(out), max_concurrency)


async def send_lines(
    lines: Iterable[str],
    client: httpx.AsyncClient,
    sink: ResultSink,
    max_concurrency: int,
    endpoint: str | None = None,
    summary: BatchSummary | None = None,
) -> BatchSummary:
    """Send every line's request through `client`, each result to `sink`. `endpoint`: the one URL
    the lines may use (the Batch API's), a line with another is not sent; `summary`: counted into as
    the results come (the Batch API reports them while it runs)."""
    summary = summary if summary is not None else BatchSummary()
    slots = asyncio.Semaphore(max_concurrency)
    seen: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()
    try:
        for index, text in enumerate(line for line in lines if line.strip()):
            summary.lines += 1
            parsed = parse_line(text, seen)
            if isinstance(parsed, BatchRequest) and endpoint is not None and parsed.url != endpoint:
                message = f"The line's url {parsed.url!r} is not the batch's endpoint {endpoint!r}."
                parsed = LineError(parsed.custom_id, "mismatched_endpoint", message)
            if isinstance(parsed, LineError):
                _record(summary, sink, index, unsent(parsed))
                continue
            await slots.acquire()
            task = asyncio.create_task(_send(client, parsed, index, summary, sink))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: slots.release())
        await asyncio.gather(*tasks)
    finally:  # cancelled: the requests in flight stop too
        for task in tasks:
            task.cancel()
    return summary


async def _send(
    client: httpx.AsyncClient, request: BatchRequest, index: int, summary: BatchSummary, sink: ResultSink
) -> None:
    try:
        reply = await client.post(request.url, json=request.body)
        body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        error = LineError(request.custom_id, "request_failed", f"The request got no answer: {exc!r}.")
        _record(summary, sink, index, unsent(error))
        return
    request_id = body.get("id") if isinstance(body, dict) and reply.is_success else None
    _record(summary, sink, index, answered(request.custom_id, reply.status_code, body, request_id))


def succeeded(result: Result) -> bool:
    """Whether a line's result is a 2xx answer."""
    response = result["response"]
    return response is not None and 200 <= response["status_code"] < 300


def _record(summary: BatchSummary, sink: ResultSink, index: int, result: Result) -> None:
    if succeeded(result):
        summary.succeeded += 1
    else:
        summary.failed += 1
    sink.add(index, result)


def json_line(result: Result) -> str:
    return json.dumps(result, ensure_ascii=False)
