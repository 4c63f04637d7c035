"""DeepSeek's tool-call formats (vLLM's `deepseek_v3` and `deepseek_v31`): the calls sit between
<｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, each between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>.
DeepSeek-V3 (and R1-0528) writes `function<｜tool▁sep｜>NAME` then the arguments in a ```json fence;
V3.1 and later write `NAME<｜tool▁sep｜>ARGUMENTS`. One reader reads both. The markers are special
tokens, so a reply read with this parser keeps special tokens in its text, as vLLM reads it."""

from __future__ import annotations

import json

from treespec.gateway.tool_parsers.base import ParsedCall, call_from_json
from treespec.gateway.tool_parsers.marked_tail import MarkedTailParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV3Parser(MarkedTailParser):
    name = "deepseek_v3"
    marker = CALLS_BEGIN

    @staticmethod
    def calls(tail: str) -> list[ParsedCall] | None:
        return _calls(tail)


class DeepSeekV31Parser(DeepSeekV3Parser):
    name = "deepseek_v31"


def _calls(tail: str) -> list[ParsedCall] | None:
    body, closed, after = tail.partition(CALLS_END)
    if after.strip():
        return None
    calls: list[ParsedCall] = []
    rest = body.strip()
    while rest:
        if not rest.startswith(CALL_BEGIN):
            return None
        inside, ended, rest = rest[len(CALL_BEGIN) :].partition(CALL_END)
        if not ended and closed:
            return None
        call = _call(inside)
        if call is None:
            return None
        calls.append(call)
        rest = rest.strip()
    return calls or None


def _call(inside: str) -> ParsedCall | None:
    head, sep, arguments = inside.partition(SEP)
    if not sep:
        return None
    if head.strip() == "function":  # V3: the name on its own line, the arguments in a ```json fence
        name, _, fenced = arguments.partition("\n")
        arguments = fenced.strip().removeprefix("```json").removesuffix("```")
    else:
        name = head
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return call_from_json({"name": name.strip(), "arguments": value})
