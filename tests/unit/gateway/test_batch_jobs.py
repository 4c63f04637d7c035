"""Batch API jobs without a server: what a batch refuses to start from, a batch cancelled before its
task began still ends cancelled, and one still running when its completion window ends expires (its
unanswered requests in the error file); the sending is tested through the stack, tests/services."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from treespec.gateway.batch_api.files import MemoryFileStore
from treespec.gateway.batch_api.jobs import BatchJobs
from treespec.gateway.errors import APIError

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}\n'


def test_a_batch_cancelled_before_it_began_ends_cancelled() -> None:
    async def scenario() -> tuple[str, str, bool]:
        jobs = BatchJobs(MemoryFileStore(1 << 20))
        source = await jobs.files.add("in.jsonl", "batch", LINE)
        job = await jobs.create(source.id, "/v1/completions", None, httpx.AsyncClient)
        first = (await jobs.cancel(job.id))["status"]  # the task has not run a step yet
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return first, job.status, job.body()["cancelled_at"] is not None

    assert asyncio.run(scenario()) == ("cancelling", "cancelled", True)


@pytest.mark.parametrize(("purpose", "file_id"), [("user_data", None), ("batch", "file-missing")])
def test_a_batch_needs_a_batch_file_that_exists(purpose: str, file_id: str | None) -> None:
    async def scenario() -> APIError:
        jobs = BatchJobs(MemoryFileStore(1 << 20))
        stored = await jobs.files.add("in.jsonl", purpose, LINE)
        with pytest.raises(APIError) as caught:
            await jobs.create(file_id or stored.id, "/v1/completions", None, httpx.AsyncClient)
        return caught.value

    error = asyncio.run(scenario())
    assert (error.status, error.param) == (400, "input_file_id")


def test_a_batch_still_running_when_its_window_ends_expires() -> None:
    async def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["prompt"] != "fast":
            await asyncio.sleep(60)
        return httpx.Response(200, json={"id": "cmpl-1", "object": "text_completion", "choices": []})

    def client() -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://gateway")

    def line(custom_id: str, prompt: str) -> bytes:
        body = {"prompt": prompt, "model": "m"}
        request = {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}
        return json.dumps(request).encode() + b"\n"

    async def scenario() -> tuple[dict[str, Any], bytes, bytes, int]:
        jobs = BatchJobs(MemoryFileStore(1 << 20), window_s=0.5)
        content = line("a", "fast") + line("b", "slow") + b"\n" + line("c", "slow")
        source = await jobs.files.add("in.jsonl", "batch", content)
        job = await jobs.create(source.id, "/v1/completions", None, client)
        assert job.task is not None
        await asyncio.wait_for(job.task, timeout=10)
        body = await jobs.get(job.id)
        with pytest.raises(APIError) as refused:
            await jobs.cancel(job.id)
        output = await jobs.files.content(body["output_file_id"])
        return body, output, await jobs.files.content(body["error_file_id"]), refused.value.status

    body, output, errors, refused = asyncio.run(scenario())
    assert body["status"] == "expired" and body["expired_at"] is not None
    assert body["request_counts"] == {"total": 3, "completed": 1, "failed": 2}
    answered = [json.loads(x) for x in output.splitlines()]
    assert [x["custom_id"] for x in answered] == ["a"]
    stopped = [json.loads(x) for x in errors.splitlines()]
    assert [(x["custom_id"], x["error"]["code"], x["response"]) for x in stopped] == [
        ("b", "batch_expired", None),
        ("c", "batch_expired", None),
    ]
    assert refused == 400
