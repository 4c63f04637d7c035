"""Tool-call arguments written as raw text (Qwen3-Coder's and GLM-4.5's XML formats), read by the type
the request's tool schema gives each parameter, as vLLM reads them: strings stay text (a "007" path
stays "007"); integers, numbers and booleans are parsed when they parse (finite numbers only); objects
and arrays are read as JSON (or Python literals); `null` is null; a parameter the schema does not
type is read as JSON where it is JSON, else kept as text."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Sequence
from typing import Any

from treespec.gateway.tool_parsers.base import ParsedCall
from treespec.gateway.tool_schemas import ToolDef

TEXT_TYPES = ("string", "str", "text", "varchar", "char", "enum")
ParameterTypes = dict[str, dict[str, str]]  # function name -> parameter -> its schema's type


def parameter_types(tools: Sequence[ToolDef]) -> ParameterTypes:
    return {tool.function.name: _types(tool.function.parameters) for tool in tools}


def typed_call(name: str, pairs: Sequence[tuple[str, str]], types: dict[str, str]) -> ParsedCall | None:
    """The call with each (parameter, raw text) read by its type; None where a value has no JSON
    (NaN or Infinity)."""
    arguments = {key: typed_value(value, types.get(key)) for key, value in pairs}
    try:
        return ParsedCall(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False))
    except ValueError:
        return None


def _types(schema: dict[str, Any] | None) -> dict[str, str]:
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


def typed_value(text: str, kind: str | None) -> Any:
    if text.strip().lower() == "null":
        return None
    if kind in TEXT_TYPES:
        return text
    if kind in ("integer", "int"):
        return _parsed(text, int)
    if kind in ("number", "float"):
        whole = _parsed(text, int)
        return whole if isinstance(whole, int) else _parsed(text, float)
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
