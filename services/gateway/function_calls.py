"""OpenAI's deprecated function calling (`functions`, `function_call`), whose replies older clients
still read. The request's functions are tools and its function_call a tool choice (schemas.py), so
the calls are made as tool calls are (a named function: tool_calls.py; "auto": auto_tool_calls.py);
here they go back in the legacy shape: the message's `function_call` {name, arguments} instead of
`tool_calls`, one call at most (the legacy API never made parallel calls: later ones are dropped),
and finish reason "function_call" where the tool form's is "tool_calls" (a reply that stopped by
itself with calls the model chose to make, "auto"); a call forced by name ends with "stop", as a
forced tool call does, in OpenAI's API and vLLM's.

Streamed, the deltas carry `function_call`: the name with the first piece of the arguments, then
the rest of the arguments piece by piece (a named function), or the whole call at once ("auto").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treespec.gateway.tool_calls import TOOL_CALLS, ToolCallDeltas, ToolCalling, ToolReply

FUNCTION_CALL = "function_call"  # the legacy finish reason, and the legacy message field


def legacy_finish_reason(reason: str) -> str:
    return FUNCTION_CALL if reason == TOOL_CALLS else reason


@dataclass(frozen=True)
class FunctionCalls:
    """A request's tool calling, with replies in the legacy shape."""

    tools: ToolCalling

    def reply(self, text: str, finish_reason: str) -> ToolReply:
        reply = self.tools.reply(text, finish_reason)
        return ToolReply(
            reply.content, reply.calls[:1], legacy_finish_reason(reply.finish_reason), legacy=True
        )

    def stream(self) -> FunctionCallStream:
        return FunctionCallStream(self.tools.stream())


@dataclass
class FunctionCallStream:
    """The tool-call deltas of a streamed reply, rewritten choice by choice into the legacy shape."""

    tools: ToolCallDeltas

    def text(self, index: int, text: str) -> dict[str, Any]:
        return self._legacy(self.tools.text(index, text))

    def end(self, index: int, finish_reason: str) -> tuple[dict[str, Any], str]:
        delta, reason = self.tools.end(index, finish_reason)
        return self._legacy(delta), legacy_finish_reason(reason)

    @staticmethod
    def _legacy(delta: dict[str, Any]) -> dict[str, Any]:
        """The delta with its choice's first call (tool call index 0, each of whose deltas carries
        its name or a piece of its arguments) as `function_call`, and any later call dropped."""
        legacy = {key: value for key, value in delta.items() if key != "tool_calls"}
        first = [call["function"] for call in delta.get("tool_calls", []) if call["index"] == 0]
        if first:
            legacy[FUNCTION_CALL] = first[0]
        return legacy
