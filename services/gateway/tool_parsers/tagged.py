"""Formats that put each call between an opening and a closing tag (Hermes' `<tool_call>...</tool_call>`,
Qwen3-Coder's XML inside the same tags), with text allowed around the calls. The text streams as it
comes (what may still open a tag held back); a call is held until its tag closes. A call left open
when the output ends (some models stop at the closing tag's place) still counts when its body is
whole; a body that holds no call stays text, tags and all."""

from __future__ import annotations

from collections.abc import Callable

from treespec.gateway.text_markers import held_back
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallReader

BodyParser = Callable[[str], ParsedCall | None]  # what is between the tags; None: no call


class TaggedReader(ToolCallReader):
    def __init__(self, opening: str, closing: str, parse: BodyParser) -> None:
        self._opening = opening
        self._closing = closing
        self._parse = parse
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
            start = text.find(self._opening)
            if start < 0:
                keep = 0 if final else held_back(text, self._opening)
                pieces.append(text[: len(text) - keep])
                text = text[len(text) - keep :]
                break
            pieces.append(text[:start])
            end = text.find(self._closing, start)
            if end < 0 and not final:
                text = text[start:]
                break
            stop = len(text) if end < 0 else end + len(self._closing)
            call = self._parse(text[start + len(self._opening) : len(text) if end < 0 else end])
            pieces.append(call if call is not None else text[start:stop])
            text = text[stop:]
        self._pending = text
        return [p for p in pieces if p != ""]
