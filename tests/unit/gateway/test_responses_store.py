"""The stored responses without a server: what a continuing response starts from, how input items
are listed, and the store's bound (the routes run in tests/services/test_gateway_stored_responses.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.request import ResponsesRequest
from treespec.gateway.responses_api.store import MemoryResponseStore, StoredResponse


def _request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", **fields})


def _body(response_id: str, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "output": output or []}


REPLY = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello Ada.", "annotations": [], "logprobs": []}],
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "f",
    "arguments": "{}",
    "status": "completed",
}
THOUGHT = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "hm"}],
    "status": "completed",
}


def test_a_continuing_response_starts_from_the_whole_earlier_conversation() -> None:
    first = _request(instructions="Be brief.", input="I am Ada.")
    stored = StoredResponse.of(_body("resp_1", [THOUGHT, REPLY, CALL]), first.items, ())
    second = _request(
        instructions="Be kind.", input=[{"type": "function_call_output", "call_id": "call_1", "output": "1"}]
    )
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    # The earlier instructions are not carried over; the reasoning is left out as chat templates do.
    assert second.chat_messages(stored.conversation) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Hello Ada.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
    ]
    third = StoredResponse.of(_body("resp_2", [REPLY]), second.items, stored.conversation)
    assert len(third.conversation) == len(stored.conversation) + 2  # its input and its output


def test_input_items_are_listed_with_ids_and_text_parts() -> None:
    request = _request(
        input=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "id": "msg_given"},
            {"type": "function_call_output", "call_id": "c", "output": "1"},
        ]
    )
    user, assistant, output = StoredResponse.of(_body("resp_1"), request.items, ()).input_items
    assert user["content"] == [{"type": "input_text", "text": "hi"}] and user["id"].startswith("msg_")
    assert assistant["content"] == [{"type": "output_text", "text": "hello", "annotations": []}]
    assert assistant["id"] == "msg_given"  # a client's own id stays
    assert output["id"].startswith("fco_") and output["status"] == "completed"
    assert len({user["id"], output["id"]}) == 2
    (one,) = StoredResponse.of(_body("resp_2"), _request(input="hey").items, ()).input_items
    assert (one["type"], one["role"], one["content"]) == (
        "message",
        "user",
        [{"type": "input_text", "text": "hey"}],
    )


def test_the_store_keeps_the_most_recently_used_up_to_its_capacity() -> None:
    async def scenario() -> None:
        store = MemoryResponseStore(2)
        for name in ("a", "b"):
            await store.put(StoredResponse.of(_body(name), _request(input=name).items, ()))
        assert (await store.get("a")).id == "a"  # used: b is now the oldest
        await store.put(StoredResponse.of(_body("c"), _request(input="c").items, ()))
        assert len(store) == 2 and (await store.get("a")).id == "a" and (await store.get("c")).id == "c"
        with pytest.raises(APIError) as gone:
            await store.get("b")
        assert (gone.value.status, gone.value.code, gone.value.param) == (404, "not_found", None)
        await store.delete("a")
        with pytest.raises(APIError) as deleted:
            await store.get("a", "previous_response_id")
        error = deleted.value
        assert (error.status, error.code, error.param) == (
            404,
            "previous_response_not_found",
            "previous_response_id",
        )
        assert error.message == "Previous response with id 'a' not found."
        with pytest.raises(APIError):
            await store.delete("a")

    asyncio.run(scenario())


def test_a_store_of_size_zero_keeps_nothing() -> None:
    store = MemoryResponseStore(0)
    asyncio.run(store.put(StoredResponse.of(_body("a"), _request(input="a").items, ())))
    assert not store.enabled and len(store) == 0
    with pytest.raises(ValueError, match="negative"):
        MemoryResponseStore(-1)


def test_a_stored_response_reads_back_from_its_json_as_it_was() -> None:
    request = _request(
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call_output", "call_id": "call_1", "output": "1"},
        ]
    )
    earlier = StoredResponse.of(
        _body("resp_0", [THOUGHT, REPLY, CALL]), _request(input="I am Ada.").items, ()
    )
    stored = StoredResponse.of(_body("resp_1", [REPLY]), request.items, earlier.conversation)
    assert StoredResponse.from_json(stored.to_json()) == stored
