"""Qwen3-Coder's XML tool calls (vLLM's and SGLang's `qwen3_coder`): between `<tool_call>` and
`</tool_call>` (tagged.py), `<function=NAME>` holds one `<parameter=KEY>VALUE</parameter>` per
argument. A value is raw text (a newline after the opening tag and before the closing one is not
part of it), so it is read by the type its tool's JSON schema gives that parameter, as vLLM reads
it: strings stay text; integers, numbers and booleans are parsed when they parse; objects and arrays
are read as JSON (or Python literals); `null` is null; a parameter the schema does not type is read
as JSON where it is JSON, else kept as text."""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader
from treespec.gateway.tool_parsers.hermes import CLOSE, OPEN
from treespec.gateway.tool_parsers.tagged import TaggedReader

_FUNCTION = re.compile(r"\s*<function=([^>\s]+)>(.*?)(?:</function>\s*)?\Z", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
TEXT_TYPES = ("string", "str", "text", "varchar", "char", "enum")


class Qwen3CoderParser(ToolCallParser):
    name = "qwen3_coder"

    def reader(self) -> ToolCallReader:
        types = {tool.function.name: _parameter_types(tool.function.parameters) for tool in self.tools}
        return TaggedReader(OPEN, CLOSE, lambda body: _call(body, types))


def _parameter_types(schema: dict[str, Any] | None) -> dict[str, str]:
    properties = (schema or {}).get("properties")
    if not isinstance(properties, dict):
        return {}
    out = {}
    for key, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, list):  # ["integer", "null"]: the first that is not null
            kind = next((k for k in kind if k != "null"), None)
        if isinstance(kind, str):
            out[key] = kind
    return out


def _call(body: str, types: dict[str, dict[str, str]]) -> ParsedCall | None:
    match = _FUNCTION.match(body)
    if match is None:
        return None
    name, inner = match.group(1), match.group(2)
    if _PARAMETER.sub("", inner).strip():  # text beside the parameters: not this format
        return None
    known = types.get(name, {})
    arguments = {
        key.strip(): _value(_unwrapped(value), known.get(key.strip()))
        for key, value in _PARAMETER.findall(inner)
    }
    try:
        return ParsedCall(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False))
    except ValueError:  # NaN or Infinity read from a value: no JSON holds it
        return None


def _unwrapped(value: str) -> str:
    return value.removeprefix("\n").removesuffix("\n")


def _value(text: str, kind: str | None) -> Any:
    if text.strip().lower() == "null":
        return None
    if kind in TEXT_TYPES:
        return text
    if kind in ("integer", "int"):
        return _parsed(text, int)
    if kind in ("number", "float"):
        number = _parsed(text, float)
        return (
            int(number) if isinstance(number, float) and number.is_integer() and "." not in text else number
        )
    if kind in ("boolean", "bool"):
        lowered = text.strip().lower()
        return {"true": True, "false": False}.get(lowered, text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if kind in ("object", "array", "dict", "list"):
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            return text
    return text


def _parsed(text: str, kind: type[int] | type[float]) -> Any:
    """The number `text` is (a finite one); else the text itself."""
    try:
        number = kind(text.strip())
    except ValueError:
        return text
    return number if math.isfinite(number) else text
