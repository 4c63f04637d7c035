"""OpenAI's Conversations API through the real gateway and verifier, with the OpenAI SDK: a
conversation is created with items and metadata, read, updated, paged through, added to, trimmed
and deleted; a response given `conversation` answers as the whole conversation sent at once would,
and adds its input and output to it; what does not fit is a 400 or a 404 naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.services.test_gateway_stored_responses import GREEDY, _respond

pytestmark = pytest.mark.slow


def _user(text: str) -> Any:
    return {"type": "message", "role": "user", "content": text}


def _texts(items: Any) -> list[str]:
    return [item.content[0].text for item in items]


def test_a_conversation_is_created_read_updated_paged_and_deleted(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(
        items=[_user("one"), _user("two")], metadata={"topic": "count"}
    )
    assert client.conversations.retrieve(conversation.id).model_dump() == conversation.model_dump()
    assert client.conversations.update(conversation.id, metadata={"topic": "numbers"}).metadata == {
        "topic": "numbers"
    }
    added = client.conversations.items.create(conversation.id, items=[_user("three")])
    assert _texts(added.data) == ["three"]
    newest = client.conversations.items.list(conversation.id, limit=2)
    assert _texts(newest.data) == ["three", "two"]
    every: list[Any] = list(client.conversations.items.list(conversation.id, order="asc", limit=1))  # by page
    assert _texts(every) == ["one", "two", "three"]
    middle = every[1].id
    assert client.conversations.items.retrieve(middle, conversation_id=conversation.id).id == middle
    assert client.conversations.items.delete(middle, conversation_id=conversation.id).id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(middle, conversation_id=conversation.id)
    assert client.conversations.delete(conversation.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)


def test_a_response_in_a_conversation_answers_the_whole_of_it_and_adds_its_turn(
    client: openai.OpenAI,
) -> None:
    conversation = client.conversations.create()
    first = _respond(client, input="My name is Ada.", max_output_tokens=8, conversation=conversation.id)
    assert first.conversation is not None and first.conversation.id == conversation.id
    second = _respond(
        client, input="What is my name?", max_output_tokens=8, conversation={"id": conversation.id}
    )
    whole = _respond(
        client,
        input=[
            _user("My name is Ada."),
            {"role": "assistant", "content": first.output_text},
            _user("What is my name?"),
        ],
        max_output_tokens=8,
        store=False,
    )
    assert second.output_text == whole.output_text
    items: list[Any] = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message"] * 4
    assert [item.role for item in items] == ["user", "assistant", "user", "assistant"]
    assert items[1].id == first.output[0].id and items[3].id == second.output[0].id


def test_what_does_not_fit_a_conversation_is_refused(client: openai.OpenAI, http: httpx.Client) -> None:
    conversation = client.conversations.create()
    both = {**GREEDY, "input": "hi", "conversation": conversation.id, "previous_response_id": "resp_x"}
    refused = http.post("/v1/responses", json=both)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "conversation"
    unknown = http.post("/v1/responses", json={**GREEDY, "input": "hi", "conversation": "conv_none"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "conversation"
    many = {"metadata": {f"k{i}": "v" for i in range(17)}}
    crowded = {"items": [_user(str(i)) for i in range(21)]}
    for body in (many, crowded):
        assert http.post("/v1/conversations", json=body).status_code == 400
    after = http.get(f"/v1/conversations/{conversation.id}/items", params={"after": "msg_none"})
    assert after.status_code == 400 and after.json()["error"]["param"] == "after"
