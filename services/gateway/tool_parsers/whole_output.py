"""Formats whose calls are the whole output (Llama 3's JSON calls, the pythonic list, Granite's and
Phi-4-mini's JSON lists): an output that starts otherwise is text, streamed as it comes; one that starts
like calls (after one of the format's tags, where it has them) is held until the output ends, then read
as calls, or given back as text whole when it is not only calls."""

from __future__ import annotations

from collections.abc import Callable

from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallReader

CallsParser = Callable[[str], list[ParsedCall] | None]  # None: the text is not (only) calls


class WholeOutputReader(ToolCallReader):
    def __init__(
        self, opener: str, parse: CallsParser, tags: tuple[str, ...] = (), tag_required: bool = False
    ) -> None:
        self._opener = opener  # the character calls start with
        self._parse = parse
        self._tags = tags  # tags the calls may come after (Llama's <|python_tag|>)
        self._tag_required = tag_required  # ... or must (Phi-4-mini's functools)
        self._pending = ""
        self._calls: bool | None = None  # None: not known yet

    def feed(self, text: str) -> list[Piece]:
        if self._calls is False:
            return [text] if text else []
        self._pending += text
        head = self._pending.lstrip()
        if self._calls is None and head and not any(tag.startswith(head) for tag in self._tags):
            tag = self._tag_of(head)
            tagged = tag is not None or not self._tag_required
            self._calls = tagged and head.removeprefix(tag or "").lstrip()[:1] in (self._opener, "")
            if not self._calls:
                return self._release()
        return []

    def finish(self) -> list[Piece]:
        if self._calls is False:
            return []
        text = self._pending.strip()
        calls = self._parse(text.removeprefix(self._tag_of(text) or "").strip())
        if calls:
            self._pending = ""
            return list(calls)
        return self._release()

    def _tag_of(self, head: str) -> str | None:
        return next((tag for tag in self._tags if head.startswith(tag)), None)

    def _release(self) -> list[Piece]:
        text, self._pending = self._pending, ""
        return [text] if text else []
