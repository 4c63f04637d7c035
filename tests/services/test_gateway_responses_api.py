"""OpenAI's Responses API (`client.responses`) against the real gateway and verifier (SmolLM2,
random drafts): a response is the chat reply to the same conversation, streamed as typed events
that add up to it; function calls and their outputs go both ways; `text.format` constrains the
output; what is not implemented is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import Response
from pydantic import BaseModel

from tests.services.gateway_stack import MODEL

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def _respond(client: openai.OpenAI, **fields: Any) -> Response:
    """A response, its fields unchecked by the SDK's overloads (as a client's JSON would come)."""
    return cast(Response, client.responses.create(**cast(Any, fields)))


def _events(client: openai.OpenAI, **fields: Any) -> list[Any]:
    return list(cast(Any, client.responses.create(stream=True, **cast(Any, fields))))


def _chat_text(client: openai.OpenAI, messages: list[ChatCompletionMessageParam], n: int) -> tuple[str, Any]:
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=n, temperature=0)
    return reply.choices[0].message.content or "", reply


def test_a_response_is_the_chat_reply_to_the_same_conversation(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="Say hello.", max_output_tokens=8, temperature=0, max_tool_calls=2
    )
    text, chat = _chat_text(client, [{"role": "user", "content": "Say hello."}], 8)
    assert response.max_tool_calls == 2  # echoed: no built-in tool runs here, so the bound holds
    assert response.object == "response" and response.model == MODEL and response.id.startswith("resp_")
    assert response.output_text == text
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant"
    finish = chat.choices[0].finish_reason
    assert response.status == ("incomplete" if finish == "length" else "completed")
    if response.status == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
    usage = response.usage
    assert usage is not None and chat.usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert (response.model_extra or {})["meta_info"]["spec_verify_steps"] >= 1


def test_instructions_and_items_make_the_conversation(client: openai.OpenAI) -> None:
    """Instructions first, as a system message; an assistant's earlier output written back as the
    SDK gives it; the developer role."""
    response = _respond(
        client,
        model=MODEL,
        instructions="Answer in one word.",
        input=[
            {"role": "user", "content": "What colour is the sky?"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Blue.", "annotations": []}],
            },
            {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"role": "user", "content": "And grass?"},
        ],
        max_output_tokens=6,
        temperature=0,
    )
    text, _ = _chat_text(
        client,
        [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "Blue."},
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "And grass?"},
        ],
        6,
    )
    assert response.output_text == text and response.instructions == "Answer in one word."


def test_the_stream_s_events_add_up_to_the_response(client: openai.OpenAI) -> None:
    fields: Any = {"model": MODEL, "input": "Count to five.", "max_output_tokens": 10, "temperature": 0}
    whole = _respond(client, **fields)
    events = _events(client, **fields)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        f"response.{whole.status}",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == whole.output_text
    assert final.usage is not None and whole.usage is not None  # cached tokens differ: the prefix cache
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        whole.usage.input_tokens,
        whole.usage.output_tokens,
    )
    assert events[0].response.status == "in_progress"
    done = events[-2]
    assert done.type == "response.output_item.done" and done.item.id == final.output[0].id


def test_a_named_function_is_called_and_its_output_answered(client: openai.OpenAI) -> None:
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    fields: Any = {"model": MODEL, "input": [question], "tools": [WEATHER], "temperature": 0}
    named = {**fields, "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 40}
    response = _respond(client, **named)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    assert call.call_id and response.tools[0].to_dict()["name"] == "get_weather"
    streamed = _events(client, **named)
    pieces = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
    assert pieces == call.arguments
    assert [e.type for e in streamed if e.type.startswith("response.function_call_arguments")][-1].endswith(
        ".done"
    )
    answered = _respond(
        client,
        model=MODEL,
        input=[
            question,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"celsius": 21}'},
        ],
        tools=[WEATHER],
        tool_choice="none",  # "auto" needs a tool-call parser, which this server has not
        max_output_tokens=12,
        temperature=0,
    )
    assert answered.output_text and answered.output[0].type == "message"


def test_text_format_constrains_the_output(client: openai.OpenAI) -> None:
    class City(BaseModel):
        name: str
        country: str

    parsed = client.responses.parse(
        model=MODEL, input="Name a city in France.", text_format=City, max_output_tokens=60, temperature=0
    )
    assert parsed.output_parsed is not None and isinstance(parsed.output_parsed.name, str)
    any_object = _respond(
        client,
        model=MODEL,
        input="Reply with a JSON object about a dog.",
        text={"format": {"type": "json_object"}},
        max_output_tokens=60,
        temperature=0,
    )
    assert any_object.status != "completed" or isinstance(json.loads(any_object.output_text), dict)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "conversation": {"id": 3}}, "conversation"),
        ({"input": "hi", "background": True, "store": False}, "background"),
        ({"input": "hi", "colour": "red"}, "colour"),
        ({"input": []}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
        (
            {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice",
        ),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "hi", "max_output_tokens": 8192}, "max_output_tokens"),  # beyond the context's room
        ({"input": "hi", "truncation": "auto"}, "truncation"),
        ({"input": "hi", "max_tool_calls": 0}, "max_tool_calls"),
        ({"input": "hi " * 9000}, "input"),  # beyond the context
    ],
)
def test_bad_or_unsupported_requests_are_400_naming_the_field(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = http.post("/v1/responses", json={"model": MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"] and (error["param"] or "").startswith(param), error


def test_logprobs_are_chat_s_streamed_or_whole(client: openai.OpenAI) -> None:
    fields: Any = {
        "model": MODEL,
        "input": "Name a colour.",
        "max_output_tokens": 6,
        "temperature": 0,
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 2,
    }
    whole = _respond(client, **fields)
    (part,) = cast(Any, whole.output[0].to_dict())["content"]
    tokens = part["logprobs"]
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=2,
    )  # fmt: skip
    assert chat.choices[0].logprobs is not None and chat.choices[0].logprobs.content is not None
    expected: list[Any] = [t.to_dict() for t in chat.choices[0].logprobs.content]
    assert [t["token"] for t in tokens] == [t["token"] for t in expected] and len(tokens) >= 1
    assert "".join(t["token"] for t in tokens) == part["text"]
    for got, want in zip(tokens, expected, strict=True):
        assert got["logprob"] == pytest.approx(want["logprob"], abs=1e-3)
        assert [top["token"] for top in got["top_logprobs"]] == [top["token"] for top in want["top_logprobs"]]
        assert len(got["top_logprobs"]) == 2 and got["bytes"] == want["bytes"]
    events = _events(client, **fields)
    streamed = [t for e in events if e.type == "response.output_text.delta" for t in e.to_dict()["logprobs"]]
    final = events[-1].response.output[0].to_dict()["content"][0]["logprobs"]
    assert [t["token"] for t in final] == [t["token"] for t in tokens]
    # The deltas carry the tokens with text; a token after the last text (the end) joins at the end.
    assert streamed == final[: len(streamed)] and all(t["token"] == "" for t in final[len(streamed) :])
    without = cast(Any, _respond(client, **{**fields, "include": []}).output[0].to_dict())
    assert without["content"][0]["logprobs"] == []
