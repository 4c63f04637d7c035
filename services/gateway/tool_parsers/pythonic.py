"""The pythonic tool-call format (Llama 3.2 and Llama 4, ToolACE and others; vLLM's `pythonic`): the whole
output is a Python list of calls with keyword arguments, `[get_weather(city="Paris"), get_time()]`
(Llama 4 wraps it in <|python_start|> ... <|python_end|>, special tokens that add no text). It is read
with Python's own parser, never run: each argument must be a literal (strings, numbers, booleans,
None, and lists, tuples and dicts of them). Anything else is text."""

from __future__ import annotations

import ast
import json

from treespec.gateway.tool_parsers.base import ParsedCall, ToolCallParser, ToolCallReader
from treespec.gateway.tool_parsers.whole_output import WholeOutputReader

MAX_CHARS = 1 << 20  # longer outputs are not parsed as calls: Python's parser is no place for floods


class PythonicParser(ToolCallParser):
    name = "pythonic"

    def reader(self) -> ToolCallReader:
        return WholeOutputReader("[", _calls)


def _calls(text: str) -> list[ParsedCall] | None:
    if len(text) > MAX_CHARS:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    calls = [_call(node) for node in tree.body.elts]
    return None if any(call is None for call in calls) else [c for c in calls if c is not None]


def _call(node: ast.expr) -> ParsedCall | None:
    """A call by name with keyword arguments whose values are literals; None for anything else."""
    if not isinstance(node, ast.Call) or node.args or not isinstance(node.func, ast.Name):
        return None
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:  # **spread
            return None
        try:
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
    try:
        text = json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):  # a set, bytes, a complex number: no JSON for it
        return None
    return ParsedCall(node.func.id, text)
