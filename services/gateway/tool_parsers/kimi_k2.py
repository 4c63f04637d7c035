"""Kimi K2's tool calls (vLLM's and SGLang's `kimi_k2`): after <|tool_calls_section_begin|>, each call
is `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>`,
the section closed by <|tool_calls_section_end|>. The markers are special tokens, so a reply read
with this parser keeps special tokens in its text, as vLLM reads it (marked_tail.py)."""

from __future__ import annotations

import json
import re

from treespec.gateway.tool_parsers.base import ParsedCall, call_from_json
from treespec.gateway.tool_parsers.marked_tail import MarkedTailParser

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
_CALL = re.compile(
    r"\s*<\|tool_call_begin\|>\s*(?:functions\.)?([^\s<:]+)(?::\d+)?\s*<\|tool_call_argument_begin\|>"
    r"(.*?)<\|tool_call_end\|>\s*",
    re.DOTALL,
)


class KimiK2Parser(MarkedTailParser):
    name = "kimi_k2"
    marker = SECTION_BEGIN

    @staticmethod
    def calls(tail: str) -> list[ParsedCall] | None:
        body, _, after = tail.partition(SECTION_END)
        if after.strip() or _CALL.sub("", body).strip():
            return None
        calls = [_call(name, arguments) for name, arguments in _CALL.findall(body)]
        return None if not calls or any(c is None for c in calls) else [c for c in calls if c is not None]


def _call(name: str, arguments: str) -> ParsedCall | None:
    try:
        return call_from_json({"name": name, "arguments": json.loads(arguments)})
    except json.JSONDecodeError:
        return None
