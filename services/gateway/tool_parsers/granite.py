"""IBM Granite 3's tool calls (vLLM's `granite`): the whole output is a JSON list of {"name",
"arguments"}, after Granite 3.0's <|tool_call|> token or Granite 3.1's <tool_call> text (or neither)."""

from __future__ import annotations

from treespec.gateway.tool_parsers.base import ToolCallParser, ToolCallReader, calls_from_json_text
from treespec.gateway.tool_parsers.whole_output import WholeOutputReader

TAGS = ("<|tool_call|>", "<tool_call>")


class GraniteParser(ToolCallParser):
    name = "granite"

    def reader(self) -> ToolCallReader:
        return WholeOutputReader("[", calls_from_json_text, TAGS)
