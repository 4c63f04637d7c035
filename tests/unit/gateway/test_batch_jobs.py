"""Batch API jobs without a server: what a batch refuses to start from, and a batch cancelled before
its task began still ends cancelled (the sending is tested through the stack, tests/services)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from treespec.gateway.batch_api.files import FileStore
from treespec.gateway.batch_api.jobs import BatchJobs
from treespec.gateway.errors import APIError

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}\n'


def test_a_batch_cancelled_before_it_began_ends_cancelled() -> None:
    async def scenario() -> tuple[str, str, bool]:
        jobs = BatchJobs(FileStore(1 << 20))
        source = jobs.files.add("in.jsonl", "batch", LINE)
        job = jobs.create(source.id, "/v1/completions", None, httpx.AsyncClient)
        first = jobs.cancel(job.id).status  # the task has not run a step yet
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return first, job.status, job.body()["cancelled_at"] is not None

    assert asyncio.run(scenario()) == ("cancelling", "cancelled", True)


@pytest.mark.parametrize(("purpose", "file_id"), [("user_data", None), ("batch", "file-missing")])
def test_a_batch_needs_a_batch_file_that_exists(purpose: str, file_id: str | None) -> None:
    async def scenario() -> APIError:
        jobs = BatchJobs(FileStore(1 << 20))
        stored = jobs.files.add("in.jsonl", purpose, LINE)
        with pytest.raises(APIError) as caught:
            jobs.create(file_id or stored.id, "/v1/completions", None, httpx.AsyncClient)
        return caught.value

    error = asyncio.run(scenario())
    assert (error.status, error.param) == (400, "input_file_id")
