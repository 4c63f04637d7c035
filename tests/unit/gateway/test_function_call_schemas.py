"""Request validation of OpenAI's deprecated function calling: `functions` and `function_call` are
tools and a tool choice, validated alike; legacy messages reach the template as tool calls and tool
messages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.gateway.schema_checks import CALL as _CALL
from tests.unit.gateway.schema_checks import MESSAGES, SDK_ASSISTANT
from tests.unit.gateway.schema_checks import chat as _chat
from tests.unit.gateway.schema_checks import refusal as _refusal
from treespec.gateway.chat_messages import template_messages
from treespec.gateway.errors import validation_error
from treespec.gateway.schemas import ChatCompletionRequest

# OpenAI's deprecated function calling: `functions` and `function_call` are tools and a tool choice.
WEATHER_FUNCTION = {"name": "get_weather", "description": "The weather", "parameters": {"type": "object"}}
WEATHER_TOOL = {"type": "function", "function": WEATHER_FUNCTION}
TIME_FUNCTION = {"name": "get_time"}


@pytest.mark.parametrize(
    ("legacy", "tools"),
    [
        ({}, {}),  # "auto", the default with functions as with tools
        ({"function_call": "auto"}, {"tool_choice": "auto"}),
        ({"function_call": "none"}, {"tool_choice": "none"}),
        (
            {"function_call": {"name": "get_time"}},
            {"tool_choice": {"type": "function", "function": TIME_FUNCTION}},
        ),
    ],
)
def test_functions_are_tools_and_function_call_a_tool_choice(
    legacy: dict[str, Any], tools: dict[str, Any]
) -> None:
    old = _chat(functions=[WEATHER_FUNCTION, TIME_FUNCTION], **legacy)
    new = _chat(tools=[WEATHER_TOOL, {"type": "function", "function": TIME_FUNCTION}], **tools)
    assert old.legacy_functions and not new.legacy_functions
    assert old.offered_tools == new.offered_tools and old.chosen_tool == new.chosen_tool
    assert old.template_tools == new.template_tools
    assert old.tool_call_mode == new.tool_call_mode and old.constraint == new.constraint
    assert old.auto_tool_choice == new.auto_tool_choice


def test_a_named_function_call_is_structured_output_over_its_parameters() -> None:
    body = _chat(functions=[WEATHER_FUNCTION, TIME_FUNCTION], function_call={"name": "get_weather"})
    assert body.constraint == ("json_schema", {"type": "object"})
    assert body.template_tools == [WEATHER_TOOL, {"type": "function", "function": TIME_FUNCTION}]
    assert _chat(functions=[TIME_FUNCTION], function_call="none").template_tools is None


@pytest.mark.parametrize(
    ("fields", "code", "param", "message"),
    [
        (
            {"functions": [WEATHER_FUNCTION], "tools": [WEATHER_TOOL]},
            "invalid_value",
            "functions",
            "Invalid value for 'functions': 'functions' and 'tools' cannot both be provided. 'functions' is"
            " deprecated; use the 'tools' parameter instead.",
        ),
        (
            {"function_call": "auto", "tool_choice": "auto"},
            "invalid_value",
            "function_call",
            "Invalid value for 'function_call': 'function_call' and 'tool_choice' cannot both be provided."
            " 'function_call' is deprecated; use the 'tool_choice' parameter instead.",
        ),
        (
            {"functions": [WEATHER_FUNCTION], "tool_choice": "none"},
            "invalid_value",
            "functions",
            "'tool_choice'",
        ),
        (  # the first deprecated field is the one named
            {"functions": [WEATHER_FUNCTION], "function_call": "auto", "tool_choice": "auto"},
            "invalid_value",
            "functions",
            "'functions' and 'tool_choice'",
        ),
        ({"tools": [WEATHER_TOOL], "function_call": "auto"}, "invalid_value", "function_call", "'tools'"),
        *(
            (
                {"function_call": choice},
                "invalid_value",
                "function_call",
                "Invalid value for 'function_call': 'function_call' is only allowed when 'functions' are"
                " specified.",  # OpenAI's words
            )
            for choice in ("none", "auto", {"name": "get_weather"})
        ),
        # Validated as tools are.
        ({"functions": [{"name": "bad name"}]}, "invalid_value", "functions.0.name", "should match pattern"),
        ({"functions": [{"description": "x"}]}, "missing_required_parameter", "functions.0.name", "required"),
        ({"functions": [{"name": "f", "parameters": []}]}, "invalid_value", "functions.0.parameters", "dict"),
        ({"functions": [{"name": "f", "type": "function"}]}, "unknown_parameter", "functions.0.type", "type"),
        ({"functions": [TIME_FUNCTION] * 129}, "invalid_value", "functions", "129"),
        (
            {"functions": [TIME_FUNCTION, TIME_FUNCTION]},
            "invalid_value",
            None,
            "'functions' must be distinct",
        ),
        (
            {"functions": [TIME_FUNCTION], "function_call": "required"},
            "invalid_value",
            "function_call",
            "'none'",
        ),
        (
            {"functions": [TIME_FUNCTION], "function_call": {"name": "nope"}},
            "invalid_value",
            None,
            "function_call names 'nope', which is not among the functions",
        ),
        (
            {"functions": [TIME_FUNCTION], "function_call": {"name": "get_time", "arguments": "{}"}},
            "invalid_value",
            "function_call",
            "'none' or 'auto'",  # as tool_choice's refusals read
        ),
        (
            {
                "functions": [TIME_FUNCTION],
                "function_call": {"name": "get_time"},
                "response_format": {"type": "json_object"},
            },
            "invalid_value",
            None,
            "combined",
        ),
    ],
)
def test_function_calling_refusals(
    fields: dict[str, Any], code: str, param: str | None, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        _chat(**fields)
    error = validation_error(caught.value.errors())
    body = error.body()["error"]
    assert (error.status, body["type"], body["code"], body["param"]) == (
        400,
        "invalid_request_error",
        code,
        param,
    )
    assert message in body["message"]


def test_null_legacy_fields_are_not_given() -> None:
    body = _chat(tools=[WEATHER_TOOL], tool_choice="none", functions=None, function_call=None)
    assert not body.legacy_functions and body.template_tools is None


LEGACY_CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        **SDK_ASSISTANT,
        "content": None,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    },
    {"role": "function", "name": "get_weather", "content": "18C"},
    {"role": "assistant", "content": "It is 18C."},
    {"role": "user", "content": "And the time there?"},
    {"role": "assistant", "content": None, "function_call": {"name": "get_time", "arguments": "not JSON"}},
    {"role": "function", "name": "get_time", "content": None},
]


def test_legacy_calls_and_their_results_are_tool_calls_and_tool_messages() -> None:
    """The template sees the conversation it would with tools: each call a tool call with an id,
    and the function's result a tool message answering that id."""
    legacy = template_messages(_chat(messages=LEGACY_CONVERSATION).messages)
    first, second = legacy[1]["tool_calls"][0]["id"], legacy[5]["tool_calls"][0]["id"]
    assert first != second
    as_tools = [
        LEGACY_CONVERSATION[0],
        {"role": "assistant", "content": None, "tool_calls": [{**_CALL, "id": first}]},
        {"role": "tool", "tool_call_id": first, "content": "18C"},
        LEGACY_CONVERSATION[3],
        LEGACY_CONVERSATION[4],
        {
            "role": "assistant",
            "tool_calls": [
                {"id": second, "type": "function", "function": {"name": "get_time", "arguments": "not JSON"}}
            ],
        },
        {"role": "tool", "tool_call_id": second, "content": ""},
    ]
    assert legacy == template_messages(_chat(messages=as_tools).messages)
    assert legacy[2] == {"role": "tool", "content": "18C", "tool_call_id": first}
    # The same ids each time the conversation is sent, and as it grows: its prompt's prefix holds.
    longer = [*LEGACY_CONVERSATION, {"role": "user", "content": "Thanks."}]
    assert template_messages(_chat(messages=longer).messages)[: len(legacy)] == legacy


def test_a_function_result_without_a_call_still_answers_an_id() -> None:
    messages = [*MESSAGES, {"role": "function", "name": "get_time", "content": "noon"}]
    (_, answer) = template_messages(_chat(messages=messages).messages)
    assert answer["role"] == "tool" and answer["content"] == "noon" and answer["tool_call_id"]


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ({"role": "function", "content": "18C"}, "missing_required_parameter", "messages.1"),
        (
            {"role": "user", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
            "invalid_value",
            "messages.1",
        ),
        ({"role": "function", "name": "f", "content": 5}, "invalid_value", "messages.1.content"),
    ],
)
def test_legacy_message_refusals(message: dict[str, Any], code: str, param: str) -> None:
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": [*MESSAGES, message]}) == (code, param)
