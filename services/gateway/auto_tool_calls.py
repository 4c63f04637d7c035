"""tool_choice "auto" with a tool-call parser (`--tool-call-parser`): the model writes free text, and
the calls in it, in the model's own format, become the message's tool_calls; the rest stays its content.

Text next to a call loses its whitespace on the call's side, whole and streamed alike: the whole reply
is read through the same per-choice state the stream uses, so both give the same content and calls.
Streamed text goes out as it is settled; a call goes out whole (id, type, name and arguments in one
delta) once the parser has read it. The finish reason is "tool_calls" when calls were made and the
generation stopped by itself.
"""

from __future__ import annotations

from typing import Any

from treespec.gateway.tool_calls import ToolCall, ToolReply, calls_finish_reason, new_call_id
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallParser, ToolCallReader


class AutoToolCalls:
    def __init__(self, parser: ToolCallParser) -> None:
        self.parser = parser

    def reply(self, text: str, finish_reason: str) -> ToolReply:
        choice = _ChoiceCalls(self.parser.reader())
        content, calls = choice.take(choice.reader.feed(text) + choice.reader.finish(), final=True)
        if not calls:
            return ToolReply(content, [], finish_reason)
        return ToolReply(content or None, calls, calls_finish_reason(finish_reason, made_calls=True))

    def stream(self) -> AutoToolCallStream:
        return AutoToolCallStream(self.parser)


class AutoToolCallStream:
    def __init__(self, parser: ToolCallParser) -> None:
        self.parser = parser
        self._choices: dict[int, _ChoiceCalls] = {}

    def text(self, index: int, text: str) -> dict[str, Any]:
        """The delta for a piece of a choice's text (empty: nothing settled yet)."""
        choice = self._choices.setdefault(index, _ChoiceCalls(self.parser.reader()))
        return choice.delta(*choice.take(choice.reader.feed(text)))

    def end(self, index: int, finish_reason: str) -> tuple[dict[str, Any], str]:
        """The delta that closes a choice (what its parser held back) and its finish reason."""
        choice = self._choices.pop(index, None) or _ChoiceCalls(self.parser.reader())
        delta = choice.delta(*choice.take(choice.reader.finish(), final=True))
        return delta, calls_finish_reason(finish_reason, made_calls=choice.calls > 0)


class _ChoiceCalls:
    """One choice's reader and what it has given out: its calls, and whitespace held back from the
    content until the next piece shows whether a call follows it."""

    def __init__(self, reader: ToolCallReader) -> None:
        self.reader = reader
        self.calls = 0
        self._held = ""  # trailing whitespace of the content, not given out yet
        self._after_call = False  # the next text's leading whitespace goes

    def take(self, pieces: list[Piece], final: bool = False) -> tuple[str, list[ToolCall]]:
        content: list[str] = []
        calls: list[ToolCall] = []
        for piece in pieces:
            if isinstance(piece, ParsedCall):
                calls.append(ToolCall(new_call_id(), piece.name, piece.arguments))
                self.calls += 1
                self._held, self._after_call = "", True
                continue
            if self._after_call:
                piece = piece.lstrip()
                if not piece:
                    continue
                self._after_call = False
            text = self._held + piece
            kept = text.rstrip()
            self._held = text[len(kept) :]
            content.append(kept)
        if final:
            content.append(self._held)
            self._held = ""
        return "".join(content), calls

    def delta(self, content: str, calls: list[ToolCall]) -> dict[str, Any]:
        delta: dict[str, Any] = {"content": content} if content else {}
        if calls:
            first = self.calls - len(calls)
            delta["tool_calls"] = [{"index": first + i, **c.as_message_part()} for i, c in enumerate(calls)]
        return delta
