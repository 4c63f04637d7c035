"""Function calling as vLLM serves it: `tool_choice` naming a function, or "required", turns into
structured output (the function's parameters, or a list of calls to any of the tools), and the
generated JSON into the message's `tool_calls`. "auto" reads the calls out of free text with the
model's own tool-call parser (auto_tool_calls.py); without one it is refused.

Named function: the output is the arguments object; finish_reason stays the generation's ("stop").
Required: the output is a JSON array of {"name", "parameters"}; finish_reason "tool_calls".

Streamed, a named function goes out as it is generated: the call's id, type and name first, then its
arguments piece by piece. "required" produces a JSON list of calls, which is only known to parse at
its end: its calls go out in one delta when the choice ends.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

ANY_OBJECT: dict[str, Any] = {"type": "object"}
TOOL_CALLS = "tool_calls"  # the finish reason of a reply that stopped by itself with calls it chose


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def as_message_part(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": self.as_function_call()}

    def as_function_call(self) -> dict[str, str]:
        """The called function, as a tool call holds it and as the deprecated `function_call` is."""
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class ToolReply:
    """A whole choice's message: its text, or the calls it made, and its finish reason; `legacy`:
    its call goes out as the deprecated `function_call` (function_calls.py), not as `tool_calls`."""

    content: str | None
    calls: list[ToolCall]
    finish_reason: str
    legacy: bool = False

    def tool_calls(self) -> list[dict[str, Any]] | None:
        if self.legacy:
            return None
        return [call.as_message_part() for call in self.calls] or None

    def function_call(self) -> dict[str, str] | None:
        if not self.legacy or not self.calls:
            return None
        return self.calls[0].as_function_call()


class ToolCallDeltas(Protocol):
    """A streamed reply's deltas, choice by choice."""

    def text(self, index: int, text: str) -> dict[str, Any]: ...

    def end(self, index: int, finish_reason: str) -> tuple[dict[str, Any], str]: ...


class ToolCalling(Protocol):
    """How a chat request's tools are called: a reply's calls, whole or streamed."""

    def reply(self, text: str, finish_reason: str) -> ToolReply: ...

    def stream(self) -> ToolCallDeltas: ...


@dataclass(frozen=True)
class ToolCallMode:
    """How a chat request calls its tools: one named function, or at least one call to any of them."""

    named: str | None  # the function's name; None: "required"
    parameters: dict[str, dict[str, Any]]  # each tool's parameters schema

    def schema(self) -> dict[str, Any]:
        """What the output must match."""
        if self.named is not None:
            return self.parameters[self.named]
        calls = [
            {
                "type": "object",
                "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for name, params in self.parameters.items()
        ]
        return {"type": "array", "minItems": 1, "items": {"anyOf": calls}}

    def parse(self, text: str) -> list[ToolCall] | None:
        """The calls in a finished output; None when it does not parse (cut short by the token limit)."""
        if self.named is not None:
            try:
                json.loads(text)
            except json.JSONDecodeError:
                return None
            return [ToolCall(new_call_id(), self.named, text.strip())]
        try:
            calls = json.loads(text)
        except json.JSONDecodeError:
            return None
        return [ToolCall(new_call_id(), c["name"], json.dumps(c["parameters"])) for c in calls]

    def reply(self, text: str, finish_reason: str) -> ToolReply:
        """A whole reply: its calls, or its text where it does not parse."""
        calls = self.parse(text)
        if calls is None:
            return ToolReply(text, [], finish_reason)
        return ToolReply(None, calls, self.finish_reason(finish_reason, calls))

    def stream(self) -> ToolCallStream:
        return ToolCallStream(self)

    def finish_reason(self, generation_reason: str, calls: list[ToolCall] | None) -> str:
        """vLLM's: "tool_calls" when "required" made calls, else the generation's own."""
        return calls_finish_reason(generation_reason, made_calls=self.named is None and bool(calls))


def calls_finish_reason(generation_reason: str, made_calls: bool) -> str:
    """ "tool_calls" when a reply that stopped by itself made calls; else the generation's reason."""
    return TOOL_CALLS if made_calls and generation_reason == "stop" else generation_reason


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallStream:
    def __init__(self, mode: ToolCallMode) -> None:
        self.mode = mode
        self._texts: dict[int, list[str]] = {}  # choice -> its text so far

    def text(self, index: int, text: str) -> dict[str, Any]:
        """The delta for a piece of a choice's text (empty: nothing to send yet)."""
        started = index in self._texts
        self._texts.setdefault(index, []).append(text)
        if self.mode.named is None:
            return {}
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if not started:
            call = {
                "index": 0,
                "id": new_call_id(),
                "type": "function",
                "function": {"name": self.mode.named, "arguments": text},
            }
        return {"tool_calls": [call]}

    def end(self, index: int, finish_reason: str) -> tuple[dict[str, Any], str]:
        """The delta that closes a choice (its calls, for "required") and its finish reason."""
        text = "".join(self._texts.pop(index, []))
        if self.mode.named is not None:
            return {}, finish_reason
        calls = self.mode.parse(text)
        if calls is None:  # cut short: what was generated goes out as text
            return ({"content": text} if text else {}), finish_reason
        parts = [{"index": i, **call.as_message_part()} for i, call in enumerate(calls)]
        return {"tool_calls": parts}, self.mode.finish_reason(finish_reason, calls)
