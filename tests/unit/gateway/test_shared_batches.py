"""Batches of two gateway replicas sharing one real redis-server (files and batch objects there), the
requests sent to a mock transport: a batch created on one replica is read, listed and cancelled on the
other (the running replica hears the order), its files read on both; a batch whose replica is gone
shows as expired once its window has long ended."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from tests.redis_server import RedisServer
from treespec.gateway.batch_api.jobs import STALE_S, BatchJobs
from treespec.gateway.batch_api.redis_batches import RedisBatchBook
from treespec.gateway.batch_api.redis_files import RedisFileStore


def _line(custom_id: str, prompt: str) -> bytes:
    request = {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": {"prompt": prompt}}
    return json.dumps(request).encode() + b"\n"


async def _answer(request: httpx.Request) -> httpx.Response:
    if json.loads(request.content)["prompt"] != "fast":
        await asyncio.sleep(60)
    return httpx.Response(200, json={"id": "cmpl-1", "object": "text_completion", "choices": []})


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(_answer), base_url="http://gateway")


def _replica(server: RedisServer) -> BatchJobs:
    return BatchJobs(RedisFileStore(server.url, 1 << 20), RedisBatchBook(server.url, ttl_s=3600))


async def _until(check: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := await check()):
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)
    return result


def test_a_batch_is_read_listed_and_cancelled_on_another_replica(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        a, b = _replica(redis_server), _replica(redis_server)
        following = [asyncio.create_task(jobs.follow()) for jobs in (a, b)]
        try:
            source = await b.files.add("in.jsonl", "batch", _line("x", "fast") + _line("y", "slow"))
            job = await a.create(source.id, "/v1/completions", None, _client)  # its input from b

            async def counted() -> dict[str, Any] | None:
                told = await b.get(job.id)
                return told if told["request_counts"]["completed"] == 1 else None

            told = await _until(counted)
            assert told["status"] == "in_progress" and told["input_file_id"] == source.id
            assert [body["id"] for body in await b.listed()] == [job.id]
            await asyncio.sleep(0.2)  # b's order listener is reading by now
            assert (await b.cancel(job.id))["status"] == "cancelling"

            async def ended() -> dict[str, Any] | None:
                told = await b.get(job.id)
                return told if told["status"] == "cancelled" else None

            told = await _until(ended)
            assert job.status == "cancelled" and told["cancelled_at"] is not None
            assert told["request_counts"] == {"total": 2, "completed": 1, "failed": 0}
            answered = json.loads(await b.files.content(told["output_file_id"]))
            assert answered["custom_id"] == "x"
        finally:
            for task in following:
                task.cancel()
            await asyncio.gather(*following, return_exceptions=True)
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_a_batch_whose_replica_is_gone_expires(redis_server: RedisServer) -> None:
    async def scenario() -> tuple[str, str, int]:
        jobs = _replica(redis_server)
        long_ago = time.time() - STALE_S - 5
        base = {"id": "batch_old", "object": "batch", "created_at": int(long_ago) - 86400}
        await jobs.book.put({**base, "status": "in_progress", "expires_at": int(long_ago)})
        await jobs.book.put({**base, "id": "batch_done", "status": "completed", "expires_at": int(long_ago)})
        told = await jobs.get("batch_old")
        listed = {body["id"]: body["status"] for body in await jobs.listed()}
        await jobs.close()
        return told["status"], listed["batch_done"], told["expired_at"]

    status, done, expired_at = asyncio.run(scenario())
    assert (status, done) == ("expired", "completed") and expired_at < time.time() - STALE_S
