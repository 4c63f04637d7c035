"""Running a batch file (batch_file.py) against a gateway: the lines are read as they are needed, at
most `max_concurrency` requests are in flight, and each result is written as soon as every line
before it has been, so the output keeps the input's order while memory holds only what is out of
order. A request that gets no answer (the connection fails) is an error line; the others go on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

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

    def add(self, index: int, line: str) -> None:
        self._ready[index] = line
        while self._next in self._ready:
            self._out.write(self._ready.pop(self._next) + "\n")
            self._next += 1
        self._out.flush()


async def run_batch(
    lines: Iterable[str], out: TextIO, base_url: str, max_concurrency: int, api_key: str | None = None
) -> BatchSummary:
    """Send every line's request to the gateway at `base_url`; write the results to `out`."""
    summary = BatchSummary()
    writer = OrderedWriter(out)
    slots = asyncio.Semaphore(max_concurrency)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    seen: set[str] = set()
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=None) as client:
        tasks: set[asyncio.Task[None]] = set()
        for index, text in enumerate(line for line in lines if line.strip()):
            summary.lines += 1
            parsed = parse_line(text, seen)
            if isinstance(parsed, LineError):
                _record(summary, writer, index, unsent(parsed))
                continue
            await slots.acquire()
            task = asyncio.create_task(_send(client, parsed, index, summary, writer))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: slots.release())
        await asyncio.gather(*tasks)
    return summary


async def _send(
    client: httpx.AsyncClient, request: BatchRequest, index: int, summary: BatchSummary, writer: OrderedWriter
) -> None:
    try:
        reply = await client.post(request.url, json=request.body)
        body = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        error = LineError(request.custom_id, "request_failed", f"The request got no answer: {exc!r}.")
        _record(summary, writer, index, unsent(error))
        return
    request_id = body.get("id") if isinstance(body, dict) and reply.is_success else None
    _record(summary, writer, index, answered(request.custom_id, reply.status_code, body, request_id))


def _record(summary: BatchSummary, writer: OrderedWriter, index: int, result: Result) -> None:
    response = result["response"]
    if response is not None and 200 <= response["status_code"] < 300:
        summary.succeeded += 1
    else:
        summary.failed += 1
    writer.add(index, _json(result))


def _json(result: Result) -> str:
    return json.dumps(result, ensure_ascii=False)
