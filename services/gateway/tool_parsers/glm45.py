"""GLM-4.5's and GLM-4.6's tool calls (vLLM's and SGLang's `glm45`): between `<tool_call>` and
`</tool_call>` (tagged.py), the function's name on the first line, then `<arg_key>KEY</arg_key>` and
`<arg_value>VALUE</arg_value>` per argument; a value is raw text, read by the type the request's tool
schema gives its parameter (typed_values.py)."""

from __future__ import annotations

import re

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader
from treespec.gateway.tool_parsers.hermes import CLOSE, OPEN
from treespec.gateway.tool_parsers.tagged import TaggedReader
from treespec.gateway.tool_parsers.typed_values import ParameterTypes, parameter_types, typed_call

_NAME = re.compile(r"\s*([^\s<]+)\s*")
_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>\s*", re.DOTALL)


class Glm45Parser(ToolCallParser):
    name = "glm45"

    def reader(self) -> ToolCallReader:
        types = parameter_types(self.tools)
        return TaggedReader(OPEN, CLOSE, lambda body: _call(body, types))


def _call(body: str, types: ParameterTypes) -> ParsedCall | None:
    named = _NAME.match(body)
    if named is None:
        return None
    name, rest = named.group(1), body[named.end() :]
    if _ARGUMENT.sub("", rest).strip():  # text beside the arguments: not this format
        return None
    pairs = [(key.strip(), value) for key, value in _ARGUMENT.findall(rest)]
    return typed_call(name, pairs, types.get(name, {}))
