"""OpenAI's stored chat completions through the real gateway and verifier, with the OpenAI SDK: a
completion made with `store: true` (whole or streamed) reads back as it was answered, with its
metadata; lists show those stored in the order made, filtered by model and metadata and paged; its
metadata is replaced, its messages are listed, and it is deleted; one made without `store` is not
kept; what does not fit is a 400 or a 404."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow

MESSAGES: Any = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": [{"type": "text", "text": "Name a color."}]},
]


def _made(client: openai.OpenAI, tag: str, **fields: Any) -> Any:
    model = client.models.list().data[0].id
    return client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        store=True,
        metadata={"test": tag, **fields.pop("metadata", {})},
        **fields,
    )


def test_a_stored_completion_reads_back_as_answered_and_is_updated_and_deleted(
    client: openai.OpenAI,
) -> None:
    tag = uuid.uuid4().hex
    made = _made(client, tag, logprobs=True, top_logprobs=2)
    kept = client.chat.completions.retrieve(made.id)
    assert kept.choices == made.choices and kept.usage == made.usage and kept.created == made.created
    assert kept.model_dump()["metadata"] == {"test": tag}
    updated = client.chat.completions.update(made.id, metadata={"test": tag, "reviewed": "yes"})
    assert updated.model_dump()["metadata"] == {"test": tag, "reviewed": "yes"}
    messages = client.chat.completions.messages.list(made.id)
    assert [(m.role, m.content) for m in messages.data] == [
        ("system", "Answer in one word."),
        ("user", "Name a color."),
    ]
    assert messages.data[0].id == f"{made.id}-0" and messages.data[1].content_parts is not None
    last = client.chat.completions.messages.list(made.id, order="desc", limit=1)
    assert [m.role for m in last.data] == ["user"] and last.has_more
    assert client.chat.completions.delete(made.id).deleted
    for call in (client.chat.completions.retrieve, client.chat.completions.messages.list):
        with pytest.raises(openai.NotFoundError):
            call(made.id)


def test_a_streamed_completion_is_kept_whole(client: openai.OpenAI) -> None:
    tag = uuid.uuid4().hex
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        store=True,
        metadata={"test": tag},
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    kept = client.chat.completions.retrieve(chunks[0].id)
    whole = _made(client, tag)  # the same request answered whole
    assert kept.choices[0].message.content == text == whole.choices[0].message.content
    assert kept.choices[0].finish_reason == whole.choices[0].finish_reason
    assert kept.usage is not None and kept.usage.completion_tokens == whole.usage.completion_tokens


def test_lists_show_the_stored_in_order_filtered_and_paged(client: openai.OpenAI) -> None:
    tag = uuid.uuid4().hex
    made = [_made(client, tag, metadata={"n": str(n)}) for n in range(3)]
    unkept = client.chat.completions.create(model=made[0].model, messages=MESSAGES, max_tokens=2)
    ids = [m.id for m in made]
    assert [c.id for c in client.chat.completions.list(metadata={"test": tag})] == ids
    newest = client.chat.completions.list(metadata={"test": tag}, order="desc", limit=2)
    assert [c.id for c in newest.data] == ids[:0:-1] and newest.has_more
    paged: list[Any] = list(client.chat.completions.list(metadata={"test": tag}, limit=1))  # page by page
    assert [c.id for c in paged] == ids
    assert [c.id for c in client.chat.completions.list(metadata={"test": tag, "n": "1"})] == ids[1:2]
    assert client.chat.completions.list(metadata={"test": tag}, model="another-model").data == []
    assert unkept.id not in [c.id for c in client.chat.completions.list(limit=100)]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(unkept.id)


def test_what_does_not_fit_is_refused(client: openai.OpenAI, http: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError) as unknown_after:
        client.chat.completions.list(after="chatcmpl-none")
    assert unknown_after.value.body is not None and "chatcmpl-none" in str(unknown_after.value.body)
    assert http.get("/v1/chat/completions", params={"metadata": "x"}).status_code == 400
    assert http.get("/v1/chat/completions", params={"limit": 0}).status_code == 400
    made = _made(client, uuid.uuid4().hex)
    too_many = {str(n): "v" for n in range(17)}
    refused = http.post(f"/v1/chat/completions/{made.id}", json={"metadata": too_many})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "metadata"
    assert http.post(f"/v1/chat/completions/{made.id}", json={"model": "x"}).status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.update("chatcmpl-none", metadata={})
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.delete("chatcmpl-none")
