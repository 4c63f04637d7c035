"""Function calling through the OpenAI SDK against a real verifier (SmolLM2-135M on CPU, random
drafts): a named function or "required" is structured output, and the JSON becomes the message's
tool_calls; "auto" is refused by a gateway without a tool-call parser (test_gateway_auto_tools.py
starts one with a parser). Whole and streamed, and a conversation that carries the calls and the
tools' answers back."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolParam,
)

from tests.services.gateway_stack import MODEL

pytestmark = pytest.mark.slow

WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED: ChatCompletionNamedToolChoiceParam = {"type": "function", "function": {"name": "get_weather"}}


def _check_weather(arguments: str) -> None:
    args = json.loads(arguments)
    assert set(args) == {"city", "unit"} and args["unit"] in ("C", "F") and isinstance(args["city"], str)


def test_a_named_function_is_called_with_arguments_that_fit(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice=NAMED, max_tokens=48, temperature=0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    _check_weather(call.function.arguments)


def test_a_streamed_named_call_reassembles_into_the_whole_one(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": NAMED,
        "max_tokens": 48,
        "temperature": 0,
    }
    whole = (client.chat.completions.create(**kwargs).choices[0].message.tool_calls or [])[0]
    names, arguments, ids, reasons = [], [], set(), []
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for call in choice.delta.tool_calls or []:
                assert call.index == 0
                if call.id:
                    ids.add(call.id)
                if call.function and call.function.name:
                    names.append(call.function.name)
                if call.function and call.function.arguments:
                    arguments.append(call.function.arguments)
    assert names == ["get_weather"] and len(ids) == 1 and reasons[-1] == "stop"
    assert "".join(arguments) == whole.function.arguments


def test_required_makes_at_least_one_call_to_the_tools(client: openai.OpenAI) -> None:
    for stream in (False, True):
        kwargs: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Weather in Oslo, and the time in Tokyo?"}],
            "tools": [WEATHER, TIME],
            "tool_choice": "required",
            "max_tokens": 96,
            "temperature": 0,
        }
        if stream:
            calls: list[Any] = []
            reason = None
            for chunk in client.chat.completions.create(stream=True, **kwargs):
                for choice in chunk.choices:
                    calls += choice.delta.tool_calls or []
                    reason = choice.finish_reason or reason
            got = [(c.function.name, c.function.arguments) for c in calls]
        else:
            choice = client.chat.completions.create(**kwargs).choices[0]
            reason = choice.finish_reason
            got = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        assert reason == "tool_calls" and got
        for name, arguments in got:
            assert name in ("get_weather", "get_time")
            if name == "get_weather":
                _check_weather(arguments)
            else:
                assert set(json.loads(arguments)) == {"zone"}


def test_a_conversation_carries_the_calls_and_the_answers_back(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice=NAMED, max_tokens=48, temperature=0
    )
    message = first.choices[0].message
    call = (message.tool_calls or [])[0]
    history: list[Any] = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18, "sky": "clear"}'},
    ]
    reply = client.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER], tool_choice="none", max_tokens=16, temperature=0
    )
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"tools": [WEATHER]}, "tool_choice 'auto'"),
        ({"tools": [WEATHER], "tool_choice": "auto"}, "tool_choice 'auto'"),
        ({"tool_choice": "required"}, "needs tools"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "not among",
        ),
        ({"tools": [WEATHER, WEATHER], "tool_choice": "required"}, "distinct"),
        ({"tools": [WEATHER], "tool_choice": NAMED, "response_format": {"type": "json_object"}}, "combined"),
    ],
)
def test_tool_requests_it_cannot_serve_are_400s(
    client: openai.OpenAI, fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **fields)
    assert words in caught.value.message
