"""OpenAI's Files and Batch APIs through the official `openai` client against the real gateway and
verifier (conftest.py, with an API key): a batch file uploaded, run by the gateway through its own
routes, its answers in an output file (each the reply the endpoint gives alone) and its failures in an
error file, both in their lines' order; cancelling stops a batch; files carry their expiration policy
(an upload's, a batch's for its output, OpenAI's default for a batch input); what cannot be run, and
a policy that is none, is a 4xx."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch

from tests.services.gateway_stack import MODEL

pytestmark = pytest.mark.slow

POLL_S = 0.2
WAIT_S = 180.0


def _chat_line(custom_id: str, text: str, **body: Any) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 6,
        "temperature": 0,
        **body,
    }
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def _upload(client: openai.OpenAI, lines: list[dict[str, Any]], purpose: str = "batch") -> str:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose=purpose).id  # type: ignore[arg-type]


def _wait(client: openai.OpenAI, batch_id: str, statuses: tuple[str, ...]) -> Batch:
    deadline = time.monotonic() + WAIT_S
    batch = client.batches.retrieve(batch_id)
    while batch.status not in statuses:
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(POLL_S)
        batch = client.batches.retrieve(batch_id)
    return batch


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_batch_answers_every_line_as_its_endpoint_would(client: openai.OpenAI) -> None:
    lines = [
        _chat_line("a", "Say hello."),
        _chat_line("bad", "Say hello.", temperature=5),  # a 400 from the endpoint
        _chat_line("b", "Name a colour."),
        {**_chat_line("other", "hi"), "url": "/v1/completions"},  # not the batch's endpoint
    ]
    input_id = _upload(client, lines)
    assert client.files.retrieve(input_id).purpose == "batch"
    batch = client.batches.create(
        input_file_id=input_id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "1"},
    )
    assert batch.status in ("validating", "in_progress") and batch.metadata == {"run": "1"}
    done = _wait(client, batch.id, ("completed", "failed"))
    assert done.status == "completed" and done.completed_at is not None
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (4, 2, 2)
    answered = _lines(client, done.output_file_id)
    assert [line["custom_id"] for line in answered] == ["a", "b"]
    for line, text in zip(answered, ("Say hello.", "Name a colour."), strict=True):
        alone = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=6, temperature=0
        )
        assert line["response"]["status_code"] == 200
        assert (
            line["response"]["body"]["choices"][0]["message"]["content"] == alone.choices[0].message.content
        )
    failed = _lines(client, done.error_file_id)
    assert [line["custom_id"] for line in failed] == ["bad", "other"]
    assert failed[0]["response"]["status_code"] == 400
    assert failed[0]["response"]["body"]["error"]["param"] == "temperature"
    assert failed[1]["response"] is None and failed[1]["error"]["code"] == "mismatched_endpoint"
    assert done.id in [b.id for b in client.batches.list(limit=100)]
    assert client.files.retrieve(done.output_file_id or "").purpose == "batch_output"


def test_a_cancelled_batch_stops(client: openai.OpenAI) -> None:
    lines = [_chat_line(f"c{i}", "Write a long story about the sea.", max_tokens=400) for i in range(24)]
    batch = client.batches.create(
        input_file_id=_upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h"
    )
    _wait(client, batch.id, ("in_progress",))
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = _wait(client, batch.id, ("cancelled",))
    assert done.cancelled_at is not None and done.request_counts is not None
    assert done.request_counts.completed < 24
    with pytest.raises(openai.BadRequestError):
        client.batches.cancel(_finished_batch(client))


def _finished_batch(client: openai.OpenAI) -> str:
    batch = client.batches.create(
        input_file_id=_upload(client, [_chat_line("x", "hi")]),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    return _wait(client, batch.id, ("completed",)).id


def test_files_are_listed_read_and_deleted(client: openai.OpenAI) -> None:
    file_id = _upload(client, [_chat_line("x", "hi")], purpose="user_data")
    assert file_id in [f.id for f in client.files.list(purpose="user_data")]
    assert file_id not in [f.id for f in client.files.list(purpose="batch")]
    assert json.loads(client.files.content(file_id).text)["custom_id"] == "x"
    with pytest.raises(openai.BadRequestError) as caught:  # not a batch input
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert caught.value.param == "input_file_id"
    assert client.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file_id)


def test_files_expire_as_their_policy_says(client: openai.OpenAI, http: httpx.Client) -> None:
    data = ("requests.jsonl", io.BytesIO(json.dumps(_chat_line("x", "hi")).encode() + b"\n"))
    brief = client.files.create(
        file=data, purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert brief.expires_at == brief.created_at + 3600
    batch_input = client.files.retrieve(_upload(client, [_chat_line("x", "hi")]))
    assert batch_input.expires_at == batch_input.created_at + 30 * 24 * 3600  # OpenAI's default for batch
    kept = client.files.retrieve(_upload(client, [_chat_line("x", "hi")], purpose="user_data"))
    assert kept.expires_at is None
    batch = client.batches.create(
        input_file_id=brief.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 7200},
    )
    output = client.files.retrieve(_wait(client, batch.id, ("completed",)).output_file_id or "")
    assert output.expires_at == output.created_at + 7200
    form = {"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "60"}
    too_soon = http.post("/v1/files", data=form, files={"file": ("a.jsonl", b"{}\n")})
    assert too_soon.status_code == 400 and too_soon.json()["error"]["param"] == "expires_after"
    never = {"anchor": "created_at", "seconds": 10**9}
    body = {"input_file_id": brief.id, "endpoint": "/v1/chat/completions", "output_expires_after": never}
    refused = http.post("/v1/batches", json=body)
    assert refused.status_code == 400 and "output_expires_after" in refused.json()["error"]["param"]


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"input_file_id": "file-none"}, 400, "input_file_id"),
        ({"endpoint": "/v1/embeddings"}, 400, "endpoint"),
        ({"completion_window": "1h"}, 400, "completion_window"),
    ],
)
def test_a_batch_that_cannot_run_is_refused(
    client: openai.OpenAI, http: httpx.Client, fields: dict[str, Any], status: int, param: str
) -> None:
    body = {
        "input_file_id": _upload(client, [_chat_line("x", "hi")]),
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        **fields,
    }
    reply = http.post("/v1/batches", json=body)
    assert reply.status_code == status
    assert reply.json()["error"]["param"] == param


def test_an_upload_is_checked(http: httpx.Client) -> None:
    assert http.post("/v1/files", data={"purpose": "batch"}, files={"x": ("a", b"")}).status_code == 400
    no_purpose = http.post("/v1/files", files={"file": ("a.jsonl", b"{}\n")})
    assert no_purpose.status_code == 400 and no_purpose.json()["error"]["param"] == "purpose"
    two = http.post(
        "/v1/files", data={"purpose": "batch"}, files=[("file", ("a", b"1")), ("file", ("b", b"2"))]
    )
    assert two.status_code == 400 and "Too many files" in two.json()["error"]["message"]
    as_json = http.post("/v1/files", json={"file": "x", "purpose": "batch"})
    assert as_json.status_code == 415
    assert http.get("/v1/files/file-none").status_code == 404
