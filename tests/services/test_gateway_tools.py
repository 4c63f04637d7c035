"""Function calling through the OpenAI SDK against a real verifier (SmolLM2-135M on CPU, random
drafts): a named function or "required" is structured output, and the JSON becomes the message's
tool_calls; "auto" is refused by a gateway without a tool-call parser (test_gateway_auto_tools.py
starts one with a parser). Whole and streamed, and a conversation that carries the calls and the
tools' answers back. OpenAI's deprecated `functions` and `function_call` work the same way, their
call coming back as the legacy `message.function_call`, and the calls and the functions' results
(role "function") carried back the same way."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.completion_create_params import Function

from tests.services.gateway_stack import MODEL, chat_body

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


# The deprecated function calling: WEATHER's function, given as `functions`.
WEATHER_FUNCTION: Function = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": WEATHER["function"].get("parameters", {}),
}
LEGACY: dict[str, Any] = {
    "model": MODEL,
    "messages": ASK,
    "functions": [WEATHER_FUNCTION],
    "function_call": {"name": "get_weather"},
    "max_tokens": 48,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def legacy_choice(client: openai.OpenAI) -> Choice:
    """The whole reply to LEGACY, which the tests below read (one generation for all of them)."""
    return client.chat.completions.create(**LEGACY).choices[0]


def test_a_named_function_call_comes_back_in_the_legacy_shape(legacy_choice: Choice) -> None:
    choice = legacy_choice
    assert choice.finish_reason == "stop"  # forced by name, as a forced tool call ends
    assert choice.message.content is None and choice.message.tool_calls is None
    call = choice.message.function_call
    assert call is not None and call.name == "get_weather"
    _check_weather(call.arguments)


def test_a_streamed_function_call_gives_its_name_then_its_arguments(
    client: openai.OpenAI, legacy_choice: Choice
) -> None:
    whole = legacy_choice.message.function_call
    assert whole is not None
    names: list[str] = []
    arguments: list[str] = []
    reasons: list[str | None] = []
    for chunk in client.chat.completions.create(stream=True, **LEGACY):
        for choice in chunk.choices:
            assert not choice.delta.tool_calls
            reasons.append(choice.finish_reason)
            call = choice.delta.function_call
            if call is not None:
                assert call.name is None or not arguments  # the name before any arguments
                names += [call.name] if call.name else []
                arguments.append(call.arguments or "")
    assert names == ["get_weather"] and [r for r in reasons if r] == ["stop"]
    assert "".join(arguments) == whole.arguments
    _check_weather(whole.arguments)


def test_a_conversation_carries_function_calls_and_results_back(
    client: openai.OpenAI, http: httpx.Client, legacy_choice: Choice
) -> None:
    """The SDK's own dump of the reply, then the function's result as a role "function" message: the
    template sees the tool call and the tool message answering it (SmolLM2's shows the tool's role
    and content, the same as for a role "tool" message)."""
    message = legacy_choice.message
    call = message.function_call
    assert call is not None
    result = '{"temperature": 18, "sky": "clear"}'
    history: list[Any] = [
        *ASK,
        message.model_dump(exclude_none=True),
        {"role": "function", "name": "get_weather", "content": result},
    ]
    reply = client.chat.completions.create(
        **{**LEGACY, "messages": history, "function_call": "none", "max_tokens": 16}
    )
    choice = reply.choices[0]
    assert choice.message.content and choice.message.function_call is None
    assert choice.finish_reason in ("stop", "length")
    as_tools = [
        *ASK,
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": call.model_dump()}]},
        {"role": "tool", "tool_call_id": "c", "content": result},
    ]
    prompts = [http.post("/tokenize", json={"messages": m}).json()["tokens"] for m in (history, as_tools)]
    assert prompts[0] == prompts[1]


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"functions": [WEATHER_FUNCTION], "tools": [WEATHER]}, "functions", "cannot both be provided"),
        (
            {"functions": [WEATHER_FUNCTION], "tool_choice": NAMED},
            "functions",
            "'functions' and 'tool_choice' cannot both be provided",
        ),
        (
            {"tools": [WEATHER], "tool_choice": NAMED, "function_call": {"name": "get_weather"}},
            "function_call",
            "cannot both be provided",
        ),
        ({"function_call": "auto"}, "function_call", "only allowed when 'functions' are specified"),
        ({"functions": [{"name": "bad name"}]}, "functions.0.name", "pattern"),
        ({"functions": [WEATHER_FUNCTION]}, "function_call", "function_call 'auto'"),  # no parser here
    ],
)
def test_function_requests_it_cannot_serve_are_400s(
    client: openai.OpenAI, http: httpx.Client, fields: dict[str, Any], param: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **fields)
    error = caught.value
    assert (error.status_code, error.type, error.param) == (400, "invalid_request_error", param)
    assert words in error.message
    streamed = http.post("/v1/chat/completions", json=chat_body(stream=True, max_tokens=4, **fields))
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == param
