"""Tool-call parsers for tool_choice "auto", by the names `--tool-call-parser` takes."""

from __future__ import annotations

from treespec.gateway.tool_parsers.base import ToolCallParser
from treespec.gateway.tool_parsers.hermes import HermesParser
from treespec.gateway.tool_parsers.llama3_json import Llama3JsonParser

TOOL_CALL_PARSERS: dict[str, type[ToolCallParser]] = {
    parser.name: parser for parser in (HermesParser, Llama3JsonParser)
}
