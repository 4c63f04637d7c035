"""Mistral's tool-call format (vLLM's `mistral`): the calls follow the [TOOL_CALLS] token, either as a
JSON list of {"name", "arguments"} (Mistral 7B v0.3 and other tokenizers before v11) or, from
tokenizer v11 on (Mistral Small 3.1+, Magistral, Devstral), as `name[ARGS]{...}` per call (a
`[CALL_ID]id` may sit after the name; some write the arguments straight after it), each call after
its own [TOOL_CALLS]. The markers are special tokens, so a reply read with this parser keeps special
tokens in its text, as vLLM reads it."""

from __future__ import annotations

import json

from treespec.gateway.tool_parsers.base import ParsedCall, call_from_json, calls_from_json_text
from treespec.gateway.tool_parsers.marked_tail import MarkedTailParser

MARKER = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"


class MistralParser(MarkedTailParser):
    name = "mistral"
    marker = MARKER

    @staticmethod
    def calls(tail: str) -> list[ParsedCall] | None:
        if tail.lstrip().startswith(("[", "{")):
            return calls_from_json_text(tail.strip())
        calls = [_named_call(part) for part in tail.split(MARKER)]
        return None if any(c is None for c in calls) else [c for c in calls if c is not None]


def _named_call(part: str) -> ParsedCall | None:
    """From v11: `name[CALL_ID]id[ARGS]{...}`, `name[ARGS]{...}` or `name{...}`."""
    part = part.strip()
    if ARGS in part:
        head, _, arguments = part.partition(ARGS)
    else:
        brace = part.find("{")
        if brace < 0:
            return None
        head, arguments = part[:brace], part[brace:]
    name = head.partition(CALL_ID)[0].strip()
    if not name or any(c.isspace() for c in name):
        return None
    return call_from_json({"name": name, "arguments": _object(arguments.strip())})


def _object(text: str) -> object:
    """The JSON object `text` is whole; None when it is not one."""
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and not text[end:].strip() else None
