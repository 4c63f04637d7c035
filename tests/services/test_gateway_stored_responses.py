"""Stored responses through the real gateway and verifier (SmolLM2, random drafts), with the OpenAI
SDK: `previous_response_id` continues a conversation exactly as sending all of it would; a stored
response reads back, lists its input items page by page and is deleted; `store: false` keeps
nothing; what is not there is a 404 naming it; a background response is fetched later, or
cancelled."""

from __future__ import annotations

import time
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.services.gateway_stack import MODEL
from tests.services.test_gateway_responses_api import WEATHER

pytestmark = pytest.mark.slow

GREEDY: dict[str, Any] = {"model": MODEL, "temperature": 0}


def _respond(client: openai.OpenAI, **fields: Any) -> Response:
    return cast(Response, client.responses.create(**cast(Any, {**GREEDY, **fields})))


def ada_conversation(
    client: openai.OpenAI, continuing: openai.OpenAI | None = None
) -> tuple[Response, Response, Response]:
    """A first response, one continuing it (on `continuing`, another gateway replica, if given), and
    the response to the whole conversation sent at once (not stored)."""
    first = _respond(client, instructions="Answer briefly.", input="My name is Ada.", max_output_tokens=8)
    second = _respond(
        continuing or client, instructions="Answer briefly.", previous_response_id=first.id,
        input="What is my name?", max_output_tokens=8,
    )  # fmt: skip
    whole = _respond(
        client,
        instructions="Answer briefly.",
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "What is my name?"},
        ],
        max_output_tokens=8,
        store=False,
    )
    return first, second, whole


def test_a_continued_response_is_the_response_to_the_whole_conversation(client: openai.OpenAI) -> None:
    first, second, whole = ada_conversation(client)
    assert first.to_dict()["store"] is True and first.previous_response_id is None
    assert second.previous_response_id == first.id and whole.to_dict()["store"] is False
    assert second.output_text == whole.output_text
    assert second.usage is not None and whole.usage is not None
    assert second.usage.input_tokens == whole.usage.input_tokens
    # The earlier turns are the cached prefix of the continued one.
    assert second.usage.input_tokens_details.cached_tokens > 0


def test_a_function_call_s_output_continues_the_response_that_called_it(client: openai.OpenAI) -> None:
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    called = _respond(
        client,
        input=[question],
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40,
    )
    (call,) = [item for item in called.output if item.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"celsius": 21}'}
    tools: dict[str, Any] = {"tools": [WEATHER], "tool_choice": "none", "max_output_tokens": 12}
    continued = _respond(client, previous_response_id=called.id, input=[result], **tools)
    sent_whole = _respond(client, input=[question, call.to_dict(), result], store=False, **tools)
    assert continued.output_text == sent_whole.output_text and continued.output_text


def test_a_stored_response_reads_back_lists_its_input_and_is_deleted(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    turns = [{"role": "user", "content": f"Word {i}."} for i in range(5)]
    created = _respond(client, input=turns, max_output_tokens=4, metadata={"run": "a"})
    read = client.responses.retrieve(created.id)
    assert read.model_dump() == created.model_dump()
    newest_first = client.responses.input_items.list(created.id)
    texts = [cast(Any, item).content[0].text for item in newest_first.data]
    assert texts == [f"Word {i}." for i in reversed(range(5))]
    pages: list[str] = []
    after: Any = openai.omit
    while True:  # the SDK's own paging, two at a time, oldest first
        page = client.responses.input_items.list(created.id, limit=2, order="asc", after=after)
        pages += [item.id for item in page.data]
        if not page.has_more:
            break
        after = page.data[-1].id
    assert pages == [item.id for item in reversed(newest_first.data)] and len(set(pages)) == 5
    client.responses.delete(created.id)
    for method, path in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
        gone = http.request(method, f"/v1/responses/{created.id}{path}")
        assert gone.status_code == 404 and created.id in gone.json()["error"]["message"]
    continuing = http.post(
        "/v1/responses", json={**GREEDY, "input": "hi", "previous_response_id": created.id}
    )
    assert continuing.status_code == 404
    assert continuing.json()["error"]["param"] == "previous_response_id"


def test_a_streamed_response_is_stored_as_it_ended(client: openai.OpenAI) -> None:
    events = list(
        cast(Any, client.responses.create(stream=True, input="Say hi.", max_output_tokens=6, **GREEDY))
    )
    final = events[-1].response
    assert events[0].response.store is True and final.store is True
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_store_false_keeps_nothing(http: httpx.Client) -> None:
    created = http.post(
        "/v1/responses", json={**GREEDY, "input": "hi", "max_output_tokens": 2, "store": False}
    ).json()
    assert created["store"] is False
    assert http.get(f"/v1/responses/{created['id']}").status_code == 404


@pytest.mark.parametrize(
    ("path", "params", "param"),
    [
        ("/input_items", {"limit": 0}, "limit"),
        ("/input_items", {"order": "sideways"}, "order"),
        ("/input_items", {"after": "msg_none"}, "after"),
        ("", {"stream": "true"}, "stream"),
    ],
)
def test_bad_listing_and_reading_requests_are_400_naming_the_field(
    http: httpx.Client, path: str, params: dict[str, Any], param: str
) -> None:
    created = http.post("/v1/responses", json={**GREEDY, "input": "hi", "max_output_tokens": 2}).json()
    response = http.get(f"/v1/responses/{created['id']}{path}", params=params)
    assert response.status_code == 400, response.text
    assert (response.json()["error"]["param"] or "").endswith(param)


def _poll(client: openai.OpenAI, response_id: str, timeout_s: float = 120) -> Response:
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def _verifier_goes_idle(http: httpx.Client, timeout_s: float = 30) -> bool:
    """Whether the verifier runs no request within the time (a flush is refused while one runs)."""
    deadline = time.monotonic() + timeout_s
    while (flush := http.post("/flush_cache")).status_code == 400 and time.monotonic() < deadline:
        time.sleep(0.2)
    return flush.status_code == 200


def test_a_background_response_is_made_and_fetched_later(client: openai.OpenAI) -> None:
    begun = _respond(client, input="Name three fruits.", max_output_tokens=12, background=True)
    assert begun.status == "in_progress" and begun.background is True and begun.output == []
    listed = [item.id for item in client.responses.input_items.list(begun.id).data]
    done = _poll(client, begun.id)
    assert [item.id for item in client.responses.input_items.list(begun.id).data] == listed  # ids kept
    foreground = _respond(client, input="Name three fruits.", max_output_tokens=12, store=False)
    assert done.status in ("completed", "incomplete") and done.background is True
    assert done.output_text == foreground.output_text and done.output_text
    assert done.usage is not None and done.usage.output_tokens >= 1


def test_a_background_response_is_cancelled(client: openai.OpenAI, http: httpx.Client) -> None:
    story = {"input": "Write a very long story about a lighthouse keeper.", "max_output_tokens": 400}
    begun = _respond(client, background=True, **story)
    unfinished = http.post(
        "/v1/responses", json={**GREEDY, "input": "Go on.", "previous_response_id": begun.id}
    )
    assert unfinished.status_code == 400
    assert unfinished.json()["error"]["code"] == "previous_response_unfinished"
    cancelled = client.responses.cancel(begun.id)
    assert cancelled.status == "cancelled" and client.responses.retrieve(begun.id).status == "cancelled"
    assert client.responses.cancel(begun.id).status == "cancelled"  # again: as it is
    assert _verifier_goes_idle(http)  # its generation was stopped


def test_a_background_response_deleted_while_made_stays_deleted(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    begun = _respond(
        client,
        input="Write a very long story about a lighthouse keeper.",
        max_output_tokens=400,
        background=True,
    )
    client.responses.delete(begun.id)
    assert _verifier_goes_idle(http)  # its generation was stopped
    assert http.get(f"/v1/responses/{begun.id}").status_code == 404  # not stored again as it ended


def test_only_a_background_response_is_cancelled(client: openai.OpenAI, http: httpx.Client) -> None:
    synchronous = _respond(client, input="hi", max_output_tokens=2)
    refused = http.post(f"/v1/responses/{synchronous.id}/cancel")
    assert refused.status_code == 400 and "synchronous" in refused.json()["error"]["message"]
    assert http.post("/v1/responses/resp_none/cancel").status_code == 404
    bad = http.post("/v1/responses", json={**GREEDY, "input": "hi", "background": True, "store": False})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "background", bad.text


def test_input_tokens_are_counted_as_the_response_s_prompt(client: openai.OpenAI, http: httpx.Client) -> None:
    """OpenAI's input token count (`client.responses.input_tokens.count`) is the prompt a response
    made from the same fields takes: instructions, input, a previous response's items; a
    response may continue its previous one without new input, and a request with neither is a 400."""
    fields: dict[str, Any] = {"instructions": "Answer briefly.", "input": "Name a colour."}
    made = _respond(client, max_output_tokens=2, **fields)
    counted = client.responses.input_tokens.count(model=MODEL, **fields)
    assert counted.object == "response.input_tokens"
    assert made.usage is not None and counted.input_tokens == made.usage.input_tokens
    # Without instructions SmolLM2's template writes its default system prompt instead.
    default_system = client.responses.input_tokens.count(input=fields["input"])
    alone = _respond(client, input=fields["input"], max_output_tokens=2)
    assert alone.usage is not None and default_system.input_tokens == alone.usage.input_tokens
    assert default_system.input_tokens != counted.input_tokens
    onward = client.responses.input_tokens.count(previous_response_id=made.id, input="And another?")
    continued = _respond(client, previous_response_id=made.id, input="And another?", max_output_tokens=2)
    assert continued.usage is not None and onward.input_tokens == continued.usage.input_tokens
    resumed = _respond(client, previous_response_id=made.id, max_output_tokens=2)  # no new input
    assert resumed.usage is not None and resumed.usage.input_tokens > made.usage.input_tokens
    for body, status, param in (
        ({}, 400, "input"),
        ({"input": "hi", "model": "other-model"}, 404, "model"),
        ({"input": "hi", "max_output_tokens": 5}, 400, "max_output_tokens"),
    ):
        answer = http.post("/v1/responses/input_tokens", json=body)
        assert answer.status_code == status and answer.json()["error"]["param"] == param, answer.text
    assert http.post("/v1/responses", json={"model": MODEL}).json()["error"]["param"] == "input"
