"""Hermes' tool-call format (Qwen2.5, Qwen3, Hermes 2/3 and others): each call is a JSON object
{"name", "arguments"} between `<tool_call>` and `</tool_call>`, with text allowed before the calls.
A call left open when the output ends (some models stop at the closing tag's place) still counts when
its JSON is whole."""

from __future__ import annotations

import json

from treespec.gateway.text_markers import held_back
from treespec.gateway.tool_parsers.base import (
    ParsedCall,
    Piece,
    ToolCallParser,
    ToolCallReader,
    call_from_json,
)

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesParser(ToolCallParser):
    name = "hermes"

    def reader(self) -> ToolCallReader:
        return HermesReader()


class HermesReader(ToolCallReader):
    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        return self._settle(final=False)

    def finish(self) -> list[Piece]:
        return self._settle(final=True)

    def _settle(self, final: bool) -> list[Piece]:
        pieces: list[Piece] = []
        text = self._pending
        while text:
            start = text.find(OPEN)
            if start < 0:
                keep = 0 if final else held_back(text, OPEN)
                pieces.append(text[: len(text) - keep])
                text = text[len(text) - keep :]
                break
            pieces.append(text[:start])
            end = text.find(CLOSE, start)
            if end < 0 and not final:
                text = text[start:]
                break
            stop = len(text) if end < 0 else end + len(CLOSE)
            call = _call(text[start + len(OPEN) : len(text) if end < 0 else end])
            pieces.append(call if call is not None else text[start:stop])
            text = text[stop:]
        self._pending = text
        return [p for p in pieces if p != ""]


def _call(body: str) -> ParsedCall | None:
    try:
        return call_from_json(json.loads(body))
    except json.JSONDecodeError:
        return None
