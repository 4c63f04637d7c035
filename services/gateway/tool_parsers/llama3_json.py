"""Llama 3.1+'s JSON tool calls: the whole output is one call {"name", "parameters"}, or several joined
by ";", optionally after `<|python_tag|>`. An output that starts otherwise is text; one that starts like
a call but does not parse as calls is text too. Calls are only known at the output's end."""

from __future__ import annotations

import json

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader, call_from_json
from treespec.gateway.tool_parsers.whole_output import WholeOutputReader

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonParser(ToolCallParser):
    name = "llama3_json"

    def reader(self) -> ToolCallReader:
        return WholeOutputReader("{", _calls, (PYTHON_TAG,))


def _calls(text: str) -> list[ParsedCall] | None:
    """The calls in `text`, or None unless the whole of it is calls joined by ";"."""
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    position = 0
    while True:
        position = _skip(text, position, " \t\r\n")
        if position == len(text):
            return calls or None
        if calls:
            if text[position] != ";":
                return None
            position = _skip(text, position + 1, " \t\r\n")
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return None
        call = call_from_json(value)
        if call is None:
            return None
        calls.append(call)


def _skip(text: str, position: int, characters: str) -> int:
    while position < len(text) and text[position] in characters:
        position += 1
    return position
