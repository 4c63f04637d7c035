"""Background responses streamed as they are made (`background` and `stream`), through the real
gateway and verifier with the OpenAI SDK: the events are those of a foreground stream and the
response is stored; a client that drops its connection resumes after the last event it saw
(`GET /v1/responses/{id}?stream=true&starting_after=N`) while the response goes on being made; a
cancelled one ends its followers' streams; what cannot be streamed is a 400 naming `stream`."""

from __future__ import annotations

from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.services.test_gateway_stored_responses import GREEDY, _poll, _respond, _verifier_goes_idle

pytestmark = pytest.mark.slow

FRUITS: dict[str, Any] = {"input": "Name three fruits.", "max_output_tokens": 16}
STORY: dict[str, Any] = {
    "input": "Write a very long story about a lighthouse keeper.",
    "max_output_tokens": 400,
}


def _stream(client: openai.OpenAI, **fields: Any) -> Any:
    return client.responses.create(background=True, stream=True, **cast(Any, {**GREEDY, **fields}))


def _text(events: list[Any]) -> str:
    return "".join(event.delta for event in events if event.type == "response.output_text.delta")


def test_a_streamed_background_response_gives_a_foreground_stream_s_events_and_is_stored(
    client: openai.OpenAI,
) -> None:
    events = list(_stream(client, **FRUITS))
    foreground = list(cast(Any, client.responses.create(stream=True, store=False, **GREEDY, **FRUITS)))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events] == [e.type for e in foreground]
    assert _text(events) == _text(foreground) and _text(events)
    final = events[-1].response
    assert final.background is True and final.status in ("completed", "incomplete")
    stored = client.responses.retrieve(final.id)
    assert stored.model_dump() == final.model_dump()
    replayed = list(cast(Any, client.responses.retrieve(final.id, stream=True)))
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in events]


def test_a_dropped_stream_resumes_after_its_last_event(client: openai.OpenAI) -> None:
    fields = {"input": "Write a short poem about the sea.", "max_output_tokens": 48}
    stream = _stream(client, **fields)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 6:
            break
    stream.close()  # the connection drops; the response goes on being made
    response_id = seen[0].response.id
    done: Response = _poll(client, response_id)
    assert done.status in ("completed", "incomplete")
    rest = list(cast(Any, client.responses.retrieve(response_id, stream=True, starting_after=5)))
    assert [e.sequence_number for e in seen + rest] == list(range(len(seen) + len(rest)))
    assert rest[-1].type == f"response.{done.status}"
    foreground = _respond(client, store=False, **fields)
    assert _text(seen + rest) == foreground.output_text == done.output_text


def test_a_follower_joins_while_the_response_is_made(client: openai.OpenAI, http: httpx.Client) -> None:
    stream = _stream(client, **{**STORY, "max_output_tokens": 64})  # it runs to its end
    first = next(iter(stream))
    joined = list(cast(Any, client.responses.retrieve(first.response.id, stream=True, starting_after=0)))
    stream.close()
    assert joined[0].sequence_number == 1 and joined[-1].type in ("response.completed", "response.incomplete")
    assert joined[-1].response.output_text == client.responses.retrieve(first.response.id).output_text
    assert _verifier_goes_idle(http)


def test_a_cancelled_streamed_response_ends_its_followers_streams(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    stream = _stream(client, **STORY)
    events = iter(stream)
    response_id = next(events).response.id
    while next(events).type != "response.output_text.delta":
        pass
    assert client.responses.cancel(response_id).status == "cancelled"
    rest = list(events)
    assert rest[-1].type == "error" and rest[-1].code == "response_cancelled"
    assert client.responses.retrieve(response_id).status == "cancelled"
    replayed = list(cast(Any, client.responses.retrieve(response_id, stream=True)))
    assert replayed[-1].model_dump() == rest[-1].model_dump()
    assert _verifier_goes_idle(http)  # its generation was stopped


def test_what_cannot_be_streamed_is_a_400_naming_stream(client: openai.OpenAI, http: httpx.Client) -> None:
    foreground = _respond(client, input="hi", max_output_tokens=2)
    polled = _respond(client, input="hi", max_output_tokens=2, background=True)
    for response_id in (foreground.id, polled.id):
        refused = http.get(f"/v1/responses/{response_id}", params={"stream": "true"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream", refused.text
    streamed = list(_stream(client, input="hi", max_output_tokens=2))
    response_id = streamed[-1].response.id
    negative = http.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": -1})
    assert negative.status_code == 400 and negative.json()["error"]["param"].endswith("starting_after")
    client.responses.delete(response_id)
    assert http.get(f"/v1/responses/{response_id}", params={"stream": "true"}).status_code == 404
    assert _verifier_goes_idle(http)
