"""OpenAI's Batch API, run by the gateway itself: a batch reads its input file (files.py: one request a
line, batch_file.py), sends the requests through the gateway's own routes in process (at most
`BATCH_CONCURRENCY` in flight; the verifier batches them continuously), and writes the 2xx answers to
an output file and the rest (4xx and 5xx answers, lines that could not be sent) to an error file, each
in its lines' order. Its status goes validating -> in_progress -> finalizing -> completed (or failed,
when the input cannot be read at all); a cancelled batch stops its requests in flight and writes
what had ended (cancelling -> cancelled). One still running when its completion window (24 hours)
ends stops too: expired, its answered requests written as always and the others to the error file
as `batch_expired`. A batch runs in the replica that created it, which keeps the newest `MAX_KEPT`;
with a shared store (book.py, redis_batches.py) it tells every status and its counts there (at least
every `REPORT_S` seconds while it runs), so every replica reads, lists and cancels it (the running
replica hears the order); one whose replica is gone shows as expired once its window has ended."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import httpx

from treespec.gateway.batch_api.book import BatchBook, LocalBook
from treespec.gateway.batch_api.files import OUTPUT_PURPOSE, FileStore
from treespec.gateway.batch_file import LineError, parse_line, unsent
from treespec.gateway.batch_runner import BatchSummary, json_line, send_lines, succeeded
from treespec.gateway.errors import APIError

log = logging.getLogger(__name__)

BATCH_CONCURRENCY = 32  # requests of one batch in flight at once
MAX_KEPT = 10_000  # batches kept (finished ones go first, oldest first)
COMPLETION_WINDOW = "24h"
WINDOW_S = 24 * 3600
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
CANCELLABLE = ("validating", "in_progress")
REPORT_S = 1.0  # a running batch's counts are told to the other replicas this often
STALE_S = 60.0  # unfinished this long after its window ended: its replica is gone, the batch expired

ClientFactory = Callable[[], httpx.AsyncClient]


@dataclass
class BatchJob:
    id: str
    endpoint: str
    input_file_id: str
    metadata: dict[str, str] | None
    created_at: int
    status: str = "validating"
    times: dict[str, int] = field(default_factory=dict)  # "<status>_at" -> when it was reached
    summary: BatchSummary = field(default_factory=BatchSummary)
    total: int = 0  # the input's requests (its lines that are not blank)
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    task: asyncio.Task[None] | None = None
    output_expires_s: int | None = None  # how long its output and error files are kept (None: ever)
    expires_at: float = 0.0  # the end of its completion window (time.time()); unfinished, it expires

    def reach(self, status: str) -> None:
        self.status = status
        self.times[f"{status}_at"] = int(time.time())

    def body(self) -> dict[str, Any]:
        s = self.summary
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": COMPLETION_WINDOW,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": int(self.expires_at),
            **{
                f"{name}_at": self.times.get(f"{name}_at")
                for name in (
                    "in_progress",
                    "finalizing",
                    "completed",
                    "failed",
                    "expired",
                    "cancelling",
                    "cancelled",
                )
            },
            "request_counts": {"total": self.total, "completed": s.succeeded, "failed": s.failed},
            "metadata": self.metadata,
        }


@dataclass
class BatchJobs:
    files: FileStore
    book: BatchBook = field(default_factory=LocalBook)  # where the other replicas learn of batches
    window_s: float = WINDOW_S  # a batch's completion window
    _jobs: OrderedDict[str, BatchJob] = field(default_factory=OrderedDict)  # those made here
    _reports: set[asyncio.Task[None]] = field(default_factory=set)

    async def create(
        self,
        input_file_id: str,
        endpoint: str,
        metadata: dict[str, str] | None,
        client: ClientFactory,
        output_expires_s: int | None = None,
    ) -> BatchJob:
        """A batch of the file's requests, started at once; `client` makes the client that sends them
        (through the gateway's own routes, with the creator's credentials); `output_expires_s`: how
        long its output and error files are kept (None: until deleted)."""
        source = await self.files.find(input_file_id)
        content = None if source is None else await self.files.read(input_file_id)
        if source is None or content is None:
            raise APIError(
                400, f"No such File object: {input_file_id}", code="invalid_value", param="input_file_id"
            )
        if source.purpose != "batch":
            raise APIError(
                400,
                f"File {input_file_id} has purpose '{source.purpose}'; a batch's input needs purpose"
                " 'batch'.",
                code="invalid_value",
                param="input_file_id",
            )
        now = time.time()
        job = BatchJob(
            f"batch_{uuid.uuid4().hex}",
            endpoint,
            input_file_id,
            metadata,
            int(now),
            output_expires_s=output_expires_s,
            expires_at=now + self.window_s,
        )
        self._keep(job)
        await self._tell(job)
        job.task = asyncio.create_task(self._run(job, content, client))
        job.task.add_done_callback(lambda _: self._settle(job))
        return job

    async def get(self, batch_id: str) -> dict[str, Any]:
        """The batch's object, from whichever replica runs it; a 404 for none."""
        job = self._jobs.get(batch_id)
        if job is not None:
            return job.body()
        told = await self.book.get(batch_id) if self.book.shared else None
        if told is None:
            raise APIError(404, f"No batch found with id '{batch_id}'.", code="not_found", param="batch_id")
        return _as_now(told)

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        """Cancel it here, or order the replica running it to (its object then says cancelling)."""
        job = self._jobs.get(batch_id)
        body = job.body() if job is not None else await self.get(batch_id)
        if body["status"] not in (*CANCELLABLE, "cancelling", "cancelled"):
            raise APIError(400, f"Cannot cancel a batch that is {body['status']}.", code="invalid_value")
        if body["status"] not in CANCELLABLE:
            return body
        if job is None:
            await self.book.order_cancel(batch_id)
            return {**body, "status": "cancelling", "cancelling_at": int(time.time())}
        self._cancel_here(job)
        await self._tell(job)
        return job.body()

    async def listed(self) -> list[dict[str, Any]]:
        """Every batch's object (every replica's, with a shared store), oldest first."""
        told = await self.book.listed() if self.book.shared else []
        bodies = {body["id"]: _as_now(body) for body in told}
        bodies.update((job.id, job.body()) for job in self._jobs.values())
        return sorted(bodies.values(), key=lambda body: int(body["created_at"]))

    async def follow(self) -> None:
        """Carry out the other replicas' orders to cancel the batches running here (until cancelled)."""
        async for batch_id in self.book.cancel_orders():
            job = self._jobs.get(batch_id)
            if job is not None and job.status in CANCELLABLE:
                self._cancel_here(job)
                await self._tell(job)

    async def close(self) -> None:
        """Stop the batches still running (the gateway is stopping), then the stores."""
        tasks = [job.task for job in self._jobs.values() if job.task is not None and not job.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*self._reports, return_exceptions=True)
        await self.book.close()
        await self.files.close()

    def _cancel_here(self, job: BatchJob) -> None:
        if job.task is not None:
            job.reach("cancelling")
            job.task.cancel()

    async def _tell(self, job: BatchJob) -> None:
        if self.book.shared:
            await self.book.put(job.body())

    async def _report(self, job: BatchJob) -> None:
        """Tell the batch's counts while it runs."""
        while True:
            await asyncio.sleep(REPORT_S)
            await self._tell(job)

    def _settle(self, job: BatchJob) -> None:
        """A batch cancelled before its task began (its run, which tells every other end, never saw
        the cancel) ends cancelled too, and that end is told."""
        if job.status != "cancelling":
            return
        job.reach("cancelled")
        if self.book.shared:
            report = asyncio.get_running_loop().create_task(self._tell(job))
            self._reports.add(report)
            report.add_done_callback(self._reports.discard)

    def _keep(self, job: BatchJob) -> None:
        self._jobs[job.id] = job
        finished = [j.id for j in self._jobs.values() if j.status not in UNFINISHED]
        for old in finished[: max(0, len(self._jobs) - MAX_KEPT)]:
            del self._jobs[old]

    async def _run(self, job: BatchJob, content: bytes, client: ClientFactory) -> None:
        report = asyncio.create_task(self._report(job))
        try:
            await self._send(job, content, client)
        finally:
            report.cancel()
            with suppress(asyncio.CancelledError):
                await report
            await self._tell(job)

    async def _send(self, job: BatchJob, content: bytes, client: ClientFactory) -> None:
        try:
            lines = content.decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            self._fail(job, "invalid_file", f"The input file is not UTF-8 text: {exc}.")
            return
        if not any(line.strip() for line in lines):
            self._fail(job, "empty_file", "The input file holds no requests.")
            return
        results: dict[int, dict[str, Any]] = {}
        job.total = sum(1 for line in lines if line.strip())
        job.reach("in_progress")
        window = asyncio.timeout(max(0.0, job.expires_at - time.time()))
        try:
            async with window, client() as http:
                await send_lines(lines, http, _Results(results), BATCH_CONCURRENCY, job.endpoint, job.summary)
        except asyncio.CancelledError:
            await self._end(job, results, "cancelled")
            raise
        except Exception as exc:  # a batch's trouble is told in the batch, never lost
            if window.expired():  # its completion window ended first (a TimeoutError)
                await self._expire(job, lines, results)
                return
            log.exception("batch %s failed", job.id)
            await self._write(job, results)
            self._fail(job, "batch_failed", f"The batch stopped: {exc!r}.")
            return
        job.reach("finalizing")
        await self._tell(job)
        await self._end(job, results, "completed")

    async def _end(self, job: BatchJob, results: dict[int, dict[str, Any]], status: str) -> None:
        await self._write(job, results)
        if job.status != "failed":
            job.reach(status)

    async def _expire(self, job: BatchJob, lines: list[str], results: dict[int, dict[str, Any]]) -> None:
        """The requests the window left unanswered (stopped) go to the error file, as on OpenAI's
        service; what was answered is written as always."""
        for index, text in enumerate(line for line in lines if line.strip()):
            if index not in results:
                custom_id = parse_line(text, set()).custom_id
                results[index] = unsent(LineError(custom_id, "batch_expired", EXPIRED_MESSAGE))
                job.summary.failed += 1
        await self._end(job, results, "expired")

    def _fail(self, job: BatchJob, code: str, message: str) -> None:
        job.errors = [{"code": code, "message": message, "param": None, "line": None}]
        job.reach("failed")

    async def _write(self, job: BatchJob, results: dict[int, dict[str, Any]]) -> None:
        """The output file (2xx answers) and the error file (the rest), each in its lines' order;
        none for a side without lines. A file that does not fit the store (or a store that does not
        answer) fails the batch."""
        ordered = [results[i] for i in sorted(results)]
        good = [r for r in ordered if succeeded(r)]
        bad = [r for r in ordered if not succeeded(r)]
        try:
            if good:
                job.output_file_id = await self._file(job, "output", good)
            if bad:
                job.error_file_id = await self._file(job, "error", bad)
        except APIError as exc:
            code = "output_too_large" if exc.status == 413 else exc.code or "output_not_written"
            self._fail(job, code, exc.message)

    async def _file(self, job: BatchJob, kind: str, results: list[dict[str, Any]]) -> str:
        text = "".join(json_line(r) + "\n" for r in results)
        name, content = f"{job.id}_{kind}.jsonl", text.encode("utf-8")
        return (await self.files.add(name, OUTPUT_PURPOSE, content, job.output_expires_s)).id


def _as_now(body: dict[str, Any]) -> dict[str, Any]:
    """Another replica's batch as it stands: still unfinished well after its window ended, that
    replica is gone (it would have ended it), and the batch expired."""
    if body["status"] in UNFINISHED and time.time() > body["expires_at"] + STALE_S:
        return {**body, "status": "expired", "expired_at": body["expires_at"]}
    return body


@dataclass
class _Results:
    """A batch's results by line index, as they come."""

    into: dict[int, dict[str, Any]]

    def add(self, index: int, result: dict[str, Any]) -> None:
        self.into[index] = result
