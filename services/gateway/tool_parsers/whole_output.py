"""Formats whose calls are the whole output (Llama 3's JSON calls, the pythonic list): an output that
starts otherwise is text, streamed as it comes; one that starts like calls is held until the output
ends, then read as calls, or given back as text whole when it is not only calls."""

from __future__ import annotations

from collections.abc import Callable

from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallReader

CallsParser = Callable[[str], list[ParsedCall] | None]  # None: the text is not (only) calls


class WholeOutputReader(ToolCallReader):
    def __init__(self, opener: str, parse: CallsParser, tag: str = "") -> None:
        self._opener = opener  # the character calls start with
        self._parse = parse
        self._tag = tag  # a tag the calls may come after (Llama's <|python_tag|>)
        self._pending = ""
        self._calls: bool | None = None  # None: not known yet

    def feed(self, text: str) -> list[Piece]:
        if self._calls is False:
            return [text] if text else []
        self._pending += text
        head = self._pending.lstrip()
        if self._calls is None and head and not (self._tag and self._tag.startswith(head)):
            self._calls = head.removeprefix(self._tag).lstrip()[:1] in (self._opener, "")
            if not self._calls:
                return self._release()
        return []

    def finish(self) -> list[Piece]:
        if self._calls is False:
            return []
        calls = self._parse(self._pending.strip().removeprefix(self._tag).strip())
        if calls:
            self._pending = ""
            return list(calls)
        return self._release()

    def _release(self) -> list[Piece]:
        text, self._pending = self._pending, ""
        return [text] if text else []
