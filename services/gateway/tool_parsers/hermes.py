"""Hermes' tool-call format (Qwen2.5, Qwen3, Hermes 2/3 and others): each call is a JSON object
{"name", "arguments"} between `<tool_call>` and `</tool_call>`, with text allowed around the calls
(tagged.py)."""

from __future__ import annotations

import json

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader, call_from_json
from treespec.gateway.tool_parsers.tagged import TaggedReader

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesParser(ToolCallParser):
    name = "hermes"

    def reader(self) -> ToolCallReader:
        return TaggedReader(OPEN, CLOSE, _call)


def _call(body: str) -> ParsedCall | None:
    try:
        return call_from_json(json.loads(body))
    except json.JSONDecodeError:
        return None
