"""Tool calls from structured output: the schema each mode asks for, parsing the output, finish
reasons, and the streamed deltas."""

from __future__ import annotations

import json
from typing import Any

from treespec.gateway.tool_calls import ToolCallMode, ToolCallStream

PARAMS: dict[str, dict[str, Any]] = {
    "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
    "b": {"type": "object"},
}


def test_a_named_function_asks_for_its_parameters() -> None:
    mode = ToolCallMode("a", PARAMS)
    assert mode.schema() == PARAMS["a"]
    (call,) = mode.parse(' {"x": 1}') or []
    assert (call.name, call.arguments) == ("a", '{"x": 1}') and call.id.startswith("call_")
    assert mode.finish_reason("stop", [call]) == "stop"  # vLLM's, for a named function
    assert mode.parse('{"x": ') is None  # cut short by the limit


def test_required_asks_for_a_list_of_calls_to_any_tool() -> None:
    mode = ToolCallMode(None, PARAMS)
    schema = mode.schema()
    assert schema["type"] == "array" and schema["minItems"] == 1
    names = [branch["properties"]["name"]["enum"] for branch in schema["items"]["anyOf"]]
    assert names == [["a"], ["b"]]
    calls = mode.parse('[{"name": "b", "parameters": {}}, {"name": "a", "parameters": {"x": 2}}]') or []
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("b", {}), ("a", {"x": 2})]
    assert len({c.id for c in calls}) == 2
    assert mode.finish_reason("stop", calls) == "tool_calls"
    assert mode.finish_reason("length", None) == "length"


def test_a_reply_holds_the_calls_or_the_text_that_does_not_parse() -> None:
    reply = ToolCallMode(None, PARAMS).reply('[{"name": "b", "parameters": {}}]', "stop")
    assert reply.content is None and reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls() or []
    assert call["type"] == "function" and call["function"] == {"name": "b", "arguments": "{}"}
    cut = ToolCallMode("a", PARAMS).reply('{"x": 1', "length")
    assert (cut.content, cut.calls, cut.finish_reason, cut.tool_calls()) == ('{"x": 1', [], "length", None)


def test_a_named_call_streams_as_it_is_generated() -> None:
    stream = ToolCallStream(ToolCallMode("a", PARAMS))
    first = stream.text(0, '{"x"')
    (call,) = first["tool_calls"]
    assert call["function"] == {"name": "a", "arguments": '{"x"'} and call["id"].startswith("call_")
    assert stream.text(0, ": 3}") == {"tool_calls": [{"index": 0, "function": {"arguments": ": 3}"}}]}
    assert stream.end(0, "stop") == ({}, "stop")


def test_required_calls_go_out_when_the_choice_ends() -> None:
    stream = ToolCallStream(ToolCallMode(None, PARAMS))
    assert stream.text(1, '[{"name": "a", ') == {}
    assert stream.text(1, '"parameters": {"x": 1}}]') == {}
    delta, reason = stream.end(1, "stop")
    assert reason == "tool_calls"
    (call,) = delta["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "a", "arguments": '{"x": 1}'}
    # Cut short: the text goes out as text.
    stream.text(2, '[{"name"')
    assert stream.end(2, "length") == ({"content": '[{"name"'}, "length")
