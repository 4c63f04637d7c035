"""Formats whose calls follow a marker to the output's end (Mistral's [TOOL_CALLS], DeepSeek's
<｜tool▁calls▁begin｜>): the text before the marker is the message's content, streamed as it comes
(what may still open the marker held back); what follows is held until the output ends, then read as
calls, or given back as text, the marker with it, when it does not hold only calls."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import ClassVar

from treespec.gateway.text_markers import held_back
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallParser, ToolCallReader

TailParser = Callable[[str], list[ParsedCall] | None]  # the text after the marker; None: not calls


class MarkedTailReader(ToolCallReader):
    def __init__(self, marker: str, parse: TailParser) -> None:
        self._marker = marker
        self._parse = parse
        self._pending = ""
        self._marked = False  # the marker has come: the rest is held to the end

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        if self._marked:
            return []
        start = self._pending.find(self._marker)
        if start >= 0:
            self._marked = True
            before, self._pending = self._pending[:start], self._pending[start:]
            return [before] if before else []
        keep = held_back(self._pending, self._marker)
        settled, self._pending = (
            self._pending[: len(self._pending) - keep],
            self._pending[len(self._pending) - keep :],
        )
        return [settled] if settled else []

    def finish(self) -> list[Piece]:
        text, self._pending = self._pending, ""
        if self._marked:
            calls = self._parse(text[len(self._marker) :])
            if calls:
                return list(calls)
        return [text] if text else []


class MarkedTailParser(ToolCallParser):
    """A parser of such a format, whose marker is a special token."""

    marker: ClassVar[str]
    keeps_special_tokens = True

    def reader(self) -> ToolCallReader:
        return MarkedTailReader(self.marker, self.calls)

    @staticmethod
    @abstractmethod
    def calls(tail: str) -> list[ParsedCall] | None:
        """The calls the text after the marker holds; None unless it holds only calls."""
