"""Qwen3-Coder's XML tool calls (vLLM's and SGLang's `qwen3_coder`): between `<tool_call>` and
`</tool_call>` (tagged.py), `<function=NAME>` holds one `<parameter=KEY>VALUE</parameter>` per
argument. A value is raw text (a newline after the opening tag and before the closing one is not
part of it), so it is read by the type its tool's JSON schema gives that parameter (typed_values.py)."""

from __future__ import annotations

import re

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader
from treespec.gateway.tool_parsers.hermes import CLOSE, OPEN
from treespec.gateway.tool_parsers.tagged import TaggedReader
from treespec.gateway.tool_parsers.typed_values import ParameterTypes, parameter_types, typed_call

_FUNCTION = re.compile(r"\s*<function=([^>\s]+)>(.*?)(?:</function>\s*)?\Z", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


class Qwen3CoderParser(ToolCallParser):
    name = "qwen3_coder"

    def reader(self) -> ToolCallReader:
        types = parameter_types(self.tools)
        return TaggedReader(OPEN, CLOSE, lambda body: _call(body, types))


def _call(body: str, types: ParameterTypes) -> ParsedCall | None:
    match = _FUNCTION.match(body)
    if match is None:
        return None
    name, inner = match.group(1), match.group(2)
    if _PARAMETER.sub("", inner).strip():  # text beside the parameters: not this format
        return None
    known = types.get(name, {})
    pairs = [
        (key.strip(), value.removeprefix("\n").removesuffix("\n")) for key, value in _PARAMETER.findall(inner)
    ]
    return typed_call(name, pairs, known)
