"""Two gateway replicas with their responses in one real Redis (`--responses-store-url`), before the
package's verifier, through the OpenAI SDK: a response made on one replica is read, continued and
deleted on the other, and the continued response equals the one sent whole; a chat completion stored
on one is read, listed, updated and deleted on the other; a background response made on one is polled
on the other until it is done, and one streamed is followed there too (after its client's connection
dropped) and cancelled there; with Redis down a response is still answered, and reading one back is
a 503 until Redis is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest

from tests.redis_server import RedisServer
from tests.services.gateway_stack import KEY, Service, start_gateway
from tests.services.test_gateway_batches import _chat_line, _lines, _upload, _wait
from tests.services.test_gateway_stored_responses import (
    GREEDY,
    _poll,
    _respond,
    _verifier_goes_idle,
    ada_conversation,
)
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow


def _gateway(
    model_path: Path, verifier: int, redis: RedisServer, log_dir: Path
) -> tuple[Service, openai.OpenAI]:
    """A gateway replica keeping its responses in `redis`, with its SDK client."""
    port = free_port()
    service = start_gateway(model_path, verifier, port, log_dir, (KEY,), ("--responses-store-url", redis.url))
    return service, openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def replicas(
    model_path: Path,
    verifier: int,
    module_redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    """Two gateway replicas sharing the module's Redis store."""
    log_dir = tmp_path_factory.mktemp("replicas")
    started: list[tuple[Service, openai.OpenAI]] = []
    try:
        for _ in range(2):
            started.append(_gateway(model_path, verifier, module_redis_server, log_dir))
        yield started[0][1], started[1][1]
    finally:
        for service, _ in started:
            service.stop()


def test_a_response_made_on_one_replica_is_read_continued_and_deleted_on_the_other(
    replicas: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    a, b = replicas
    first, continued, whole = ada_conversation(a, continuing=b)
    assert b.responses.retrieve(first.id).model_dump() == first.model_dump()
    assert continued.output_text == whole.output_text and continued.previous_response_id == first.id
    assert [item.id for item in a.responses.input_items.list(continued.id).data] == [
        item.id for item in b.responses.input_items.list(continued.id).data
    ]
    b.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(first.id)


def test_a_background_response_is_polled_on_the_other_replica(
    replicas: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    a, b = replicas
    begun = _respond(a, input="Name three fruits.", max_output_tokens=12, background=True)
    polled = _poll(b, begun.id)
    assert polled.status in ("completed", "incomplete") and polled.output_text


def test_a_conversation_is_shared_by_the_replicas(replicas: tuple[openai.OpenAI, openai.OpenAI]) -> None:
    a, b = replicas
    conversation = a.conversations.create(metadata={"topic": "fruit"})
    reply = _respond(b, input="Name a fruit.", max_output_tokens=6, conversation=conversation.id)
    items: list[Any] = list(a.conversations.items.list(conversation.id, order="asc"))
    assert [item.role for item in items] == ["user", "assistant"] and items[1].id == reply.output[0].id
    a.conversations.items.delete(items[0].id, conversation_id=conversation.id)
    assert [item.id for item in b.conversations.items.list(conversation.id)] == [items[1].id]
    b.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        a.conversations.retrieve(conversation.id)


def test_a_stored_chat_completion_is_shared_by_the_replicas(
    replicas: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    a, b = replicas
    model = a.models.list().data[0].id
    made = a.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        store=True,
        metadata={"on": "a"},
    )
    assert b.chat.completions.retrieve(made.id).choices == made.choices
    assert [c.id for c in b.chat.completions.list(metadata={"on": "a"})] == [made.id]
    b.chat.completions.update(made.id, metadata={"on": "b"})
    assert a.chat.completions.retrieve(made.id).model_dump()["metadata"] == {"on": "b"}
    assert b.chat.completions.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.chat.completions.retrieve(made.id)


STORY = {"input": "Write a very long story about a lighthouse keeper.", "max_output_tokens": 400}


def test_a_background_response_is_cancelled_or_deleted_from_the_other_replica(
    replicas: tuple[openai.OpenAI, openai.OpenAI], http: httpx.Client
) -> None:
    a, b = replicas
    begun = _respond(a, background=True, **STORY)
    cancelled = b.responses.cancel(begun.id)  # the replica making it stops it
    assert cancelled.status == "cancelled" and a.responses.retrieve(begun.id).status == "cancelled"
    assert _verifier_goes_idle(http)
    doomed = _respond(a, background=True, **STORY)
    b.responses.delete(doomed.id)
    assert _verifier_goes_idle(http)
    with pytest.raises(openai.NotFoundError):  # not stored again as it ended
        a.responses.retrieve(doomed.id)


def test_a_background_response_whose_replica_died_is_cancelled_by_another(
    replicas: tuple[openai.OpenAI, openai.OpenAI],
    model_path: Path,
    verifier: int,
    module_redis_server: RedisServer,
    tmp_path: Path,
    http: httpx.Client,
) -> None:
    maker, a = _gateway(model_path, verifier, module_redis_server, tmp_path)  # a third replica, killed
    b = replicas[1]
    begun = _respond(a, background=True, **STORY)
    maker.process.kill()  # gone without storing how the response ended
    maker.process.wait()
    assert b.responses.retrieve(begun.id).status == "in_progress"
    assert b.responses.cancel(begun.id).status == "cancelled"
    assert b.responses.retrieve(begun.id).status == "cancelled"
    assert _verifier_goes_idle(http)  # the dead replica's generation was cancelled with its connection


def test_a_streamed_background_response_is_followed_and_cancelled_on_the_other_replica(
    replicas: tuple[openai.OpenAI, openai.OpenAI], http: httpx.Client
) -> None:
    a, b = replicas
    fields: dict[str, Any] = {"input": "Write a short poem about the sea.", "max_output_tokens": 48}
    seen = []
    for event in _streamed(a, **fields):
        seen.append(event)
        if len(seen) == 6:
            break  # A's client drops its connection, and resumes on B while A makes the response
    rest = list(cast(Any, b.responses.retrieve(seen[0].response.id, stream=True, starting_after=5)))
    assert [event.sequence_number for event in seen + rest] == list(range(len(seen) + len(rest)))
    assert rest[-1].type in ("response.completed", "response.incomplete")
    text = "".join(event.delta for event in seen + rest if event.type == "response.output_text.delta")
    assert text == rest[-1].response.output_text == a.responses.retrieve(seen[0].response.id).output_text
    response_id = next(iter(_streamed(a, **STORY))).response.id
    assert b.responses.cancel(response_id).status == "cancelled"
    followed = list(cast(Any, b.responses.retrieve(response_id, stream=True)))
    assert followed[0].type == "response.created" and followed[-1].type == "error"
    assert followed[-1].code == "response_cancelled"
    assert _verifier_goes_idle(http)
    with pytest.raises(openai.BadRequestError) as polled_only:  # made without stream: no events
        b.responses.retrieve(_respond(a, background=True, **fields).id, stream=True)
    assert polled_only.value.body["param"] == "stream"  # type: ignore[index]


def _streamed(client: openai.OpenAI, **fields: Any) -> Any:
    return client.responses.create(background=True, stream=True, **cast(Any, {**GREEDY, **fields}))


def test_a_batch_s_file_and_batch_are_shared_by_the_replicas(
    replicas: tuple[openai.OpenAI, openai.OpenAI],
) -> None:
    """OpenAI's Files and Batch APIs beside the responses: a file uploaded to one replica feeds a
    batch created on the other, which both list and poll; its output is read on the first; a batch
    is cancelled from the replica that does not run it; the file deleted on one is gone on both."""
    a, b = replicas
    lines = [_chat_line(f"q{i}", f"Name a colour, {i}.") for i in range(2)]
    input_id = _upload(a, lines)
    assert b.files.retrieve(input_id).bytes == a.files.retrieve(input_id).bytes
    batch = b.batches.create(input_file_id=input_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.id in [x.id for x in a.batches.list(limit=100)]
    done = _wait(a, batch.id, ("completed",))
    assert done.request_counts is not None and done.request_counts.completed == 2
    assert [line["custom_id"] for line in _lines(a, done.output_file_id)] == ["q0", "q1"]
    long_lines = [_chat_line(f"l{i}", "Tell a long story.", max_tokens=200) for i in range(64)]
    running = b.batches.create(
        input_file_id=_upload(b, long_lines), endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert a.batches.cancel(running.id).status == "cancelling"
    cancelled = _wait(b, running.id, ("cancelled",))
    assert cancelled.request_counts is not None and cancelled.request_counts.completed < 64
    a.files.delete(input_id)
    with pytest.raises(openai.NotFoundError):
        b.files.retrieve(input_id)


# Last: the replicas' order listeners subscribe again only a moment after Redis is back.
def test_with_redis_down_responses_are_answered_and_reading_is_a_503(
    replicas: tuple[openai.OpenAI, openai.OpenAI], module_redis_server: RedisServer
) -> None:
    a, b = replicas
    module_redis_server.stop()
    made = _respond(a, input="Say hi.", max_output_tokens=4)
    assert made.status in ("completed", "incomplete") and made.output_text
    with pytest.raises(openai.InternalServerError) as unavailable:
        b.responses.retrieve(made.id)
    assert unavailable.value.status_code == 503
    module_redis_server.start()
    again = _respond(a, input="Say hi.", max_output_tokens=4)
    assert b.responses.retrieve(again.id).output_text == made.output_text
