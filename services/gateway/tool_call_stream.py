"""Tool calls in a streamed chat reply, in OpenAI's delta shape.

A named function streams as it is generated: the call's id, type and name first, then its arguments
piece by piece. "required" produces a JSON list of calls, which is only known to parse at its end:
its calls go out in one delta when the choice ends.
"""

from __future__ import annotations

from typing import Any

from treespec.gateway.tool_calls import ToolCallMode, new_call_id


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
