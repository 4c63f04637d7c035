"""How a chat choice's generated text becomes its message: the reasoning split off (with a reasoning
parser, given back as the request asks: reasoning_reply.py), then the tool calls read out of the
answer (a tool call mode, or "auto" with a parser; in the deprecated function-calling shape for a
request that gave `functions`), or the text as it is. Whole replies and streamed deltas go through
the same readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from treespec.gateway.reasoning_parsers.base import Part, ReasoningParser, ReasoningReader
from treespec.gateway.reasoning_reply import ReasoningReply
from treespec.gateway.tool_calls import ToolCallDeltas, ToolCalling


@dataclass(frozen=True)
class ChatReplyMessage:
    content: str | None
    reasoning: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str
    function_call: dict[str, str] | None = None  # the deprecated shape of a call (function_calls.py)


@dataclass(frozen=True)
class ChatReplies:
    reasoning: ReasoningParser | None = None
    tools: ToolCalling | None = None
    reasoning_reply: ReasoningReply = field(default_factory=ReasoningReply)

    def message(self, text: str, finish_reason: str) -> ChatReplyMessage:
        reasoning: str | None = None
        if self.reasoning is not None:
            reader = self.reasoning_reply.reader(self.reasoning)
            parts = reader.feed(text) + reader.finish()
            reasoning = "".join(p.text for p in parts if p.kind == "reasoning") or None
            text = "".join(p.text for p in parts if p.kind == "content")
        if self.tools is None:
            content = text if text or reasoning is None else None
            return ChatReplyMessage(content, reasoning, None, finish_reason)
        reply = self.tools.reply(text, finish_reason)
        content = reply.content if reply.content or reasoning is None else None
        return ChatReplyMessage(
            content, reasoning, reply.tool_calls(), reply.finish_reason, reply.function_call()
        )

    def stream(self) -> ChatReplyStream:
        tools = self.tools.stream() if self.tools is not None else None
        return ChatReplyStream(self.reasoning, tools, self.reasoning_reply)


class ChatReplyStream:
    """A streamed reply's deltas, choice by choice."""

    def __init__(
        self,
        reasoning: ReasoningParser | None,
        tools: ToolCallDeltas | None,
        reasoning_reply: ReasoningReply | None = None,
    ) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.reasoning_reply = reasoning_reply or ReasoningReply()
        self._readers: dict[int, ReasoningReader] = {}

    def text(self, index: int, text: str) -> dict[str, Any]:
        """The delta for a piece of a choice's text (empty: nothing to send yet)."""
        if self.reasoning is None:
            return self._answer(index, text)
        reader = self._readers.get(index)
        if reader is None:
            reader = self._readers[index] = self.reasoning_reply.reader(self.reasoning)
        return self._delta(index, reader.feed(text))

    def end(self, index: int, finish_reason: str) -> tuple[dict[str, Any], str]:
        """The delta that closes a choice (whatever its readers held back) and its finish reason."""
        delta: dict[str, Any] = {}
        if self.reasoning is not None:
            reader = self._readers.pop(index, None) or self.reasoning_reply.reader(self.reasoning)
            delta = self._delta(index, reader.finish())
        if self.tools is None:
            return delta, finish_reason
        last, finish_reason = self.tools.end(index, finish_reason)
        return _merged(delta, last), finish_reason

    def _delta(self, index: int, parts: list[Part]) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        for part in parts:
            if part.kind == "reasoning":
                delta = _merged(delta, {"reasoning_content": part.text})
            else:
                delta = _merged(delta, self._answer(index, part.text))
        return delta

    def _answer(self, index: int, text: str) -> dict[str, Any]:
        if self.tools is None:
            return {"content": text}
        return self.tools.text(index, text)


def _merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two deltas as one: their texts joined, their tool calls listed in order, and a function
    call's name and pieces of arguments (the deprecated `function_call`) joined field by field."""
    merged = dict(first)
    for key, value in second.items():
        if key not in merged:
            merged[key] = value
        elif isinstance(value, dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = merged[key] + value
    return merged
