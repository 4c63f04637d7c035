"""Phi-4-mini's tool calls (vLLM's `phi4_mini_json`): the whole output is `functools` and a JSON list
of {"name", "arguments"}; the same list without `functools` is text."""

from __future__ import annotations

from treespec.gateway.tool_parsers.base import ToolCallParser, ToolCallReader, calls_from_json_text
from treespec.gateway.tool_parsers.whole_output import WholeOutputReader

TAG = "functools"


class Phi4MiniJsonParser(ToolCallParser):
    name = "phi4_mini_json"

    def reader(self) -> ToolCallReader:
        return WholeOutputReader("[", calls_from_json_text, (TAG,), tag_required=True)
