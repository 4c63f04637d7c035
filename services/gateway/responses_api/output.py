"""A response's output items, built from a chat reply's deltas, with the streaming events that tell
a client about them as they grow.

A reply's parts become items in the order they come: reasoning (a `reasoning` item), text (a
`message` item holding one `output_text` part), each tool call (a `function_call` item). An item is
added when its first piece arrives and done when the next item starts or the reply ends, so a
stream opens and closes items one at a time, as OpenAI's does. A whole reply is fed as one delta and
gives the same items.

Log-probabilities, when asked for, are those of every token the reply generated (reasoning and
markers too, as chat completions gives them), held on the message's `output_text`: each text delta
carries the tokens generated since the one before, and tokens after the message's last text (the
reply's end, a tool call after it) join it when the reply ends. So a streamed response's final
object holds the same log-probabilities as a whole one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Event = dict[str, Any]
Logprob = dict[str, Any]  # a token's log-probability in chat's shape (token, logprob, bytes, top_logprobs)
ItemKind = Literal["reasoning", "message", "function_call"]
_ID_PREFIXES = {"reasoning": "rs", "message": "msg", "function_call": "fc"}


@dataclass
class _Item:
    kind: ItemKind
    index: int  # its place in the output
    id: str
    text: str = ""  # reasoning, message text, or a call's arguments
    name: str = ""  # a call's function
    call_id: str = ""
    call_index: int = -1  # the tool call's index in the chat deltas
    done: bool = False
    logprobs: list[Logprob] = field(default_factory=list)  # a message's tokens, when asked for

    def body(self, status: str) -> dict[str, Any]:
        if self.kind == "reasoning":
            content = [{"type": "reasoning_text", "text": self.text}]
            return {"type": "reasoning", "id": self.id, "summary": [], "content": content, "status": status}
        if self.kind == "message":
            return {
                "type": "message",
                "id": self.id,
                "role": "assistant",
                "status": status,
                "content": [self.text_part()] if status != "in_progress" else [],
            }
        return {
            "type": "function_call",
            "id": self.id,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.text if status != "in_progress" else "",
            "status": status,
        }

    def text_part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": self.text, "annotations": [], "logprobs": list(self.logprobs)}


@dataclass
class ResponseOutput:
    """The items of one response; `feed` and `finish` return the stream's events for them."""

    items: list[_Item] = field(default_factory=list)
    pending: list[Logprob] = field(default_factory=list)  # tokens not yet on the message's text

    def feed(self, delta: dict[str, Any], logprobs: Sequence[Logprob] = ()) -> list[Event]:
        """A chat delta: `reasoning_content`, `content` and `tool_calls` pieces, in that order;
        `logprobs`: those of the tokens that made it."""
        self.pending += logprobs
        events: list[Event] = []
        if delta.get("reasoning_content"):
            events += self._grow("reasoning", delta["reasoning_content"])
        if delta.get("content"):
            events += self._grow("message", delta["content"])
        for call in delta.get("tool_calls") or []:
            events += self._call(call)
        return events

    def finish(self, status: str) -> list[Event]:
        """Close the open item; `status`: "completed", or "incomplete" (cut at the token limit). The
        tokens after the message's last text join its log-probabilities."""
        messages = [item for item in self.items if item.kind == "message"]
        if messages:
            messages[-1].logprobs += self.pending
        self.pending = []
        return self._close(status)

    def output(self, status: str) -> list[dict[str, Any]]:
        """The items as the response lists them (the last one with the response's status)."""
        return [item.body(status if item is self.items[-1] else "completed") for item in self.items]

    def _grow(self, kind: ItemKind, text: str) -> list[Event]:
        events: list[Event] = []
        item = self._open_item
        if item is None or item.kind != kind:
            events += self._close("completed")
            item = self._open(kind, -1)
            events += self._added(item)
        item.text += text
        logprobs: list[Logprob] = []
        if kind == "message":
            logprobs, self.pending = self.pending, []
            item.logprobs += logprobs
        events.append(self._delta(item, text, logprobs))
        return events

    def _call(self, call: dict[str, Any]) -> list[Event]:
        function = call.get("function") or {}
        index = int(call.get("index", 0))
        events: list[Event] = []
        current = self._open_item
        if current is None or current.kind != "function_call" or current.call_index != index:
            events += self._close("completed")
            current = self._open("function_call", index)
            current.call_id = str(call.get("id") or current.id)
            current.name = str(function.get("name") or "")
            events += self._added(current)
        arguments = str(function.get("arguments") or "")
        if arguments:
            current.text += arguments
            events.append(self._delta(current, arguments))
        return events

    def _open(self, kind: ItemKind, call_index: int) -> _Item:
        item = _Item(kind, len(self.items), f"{_ID_PREFIXES[kind]}_{uuid.uuid4().hex}", call_index=call_index)
        self.items.append(item)
        return item

    def _added(self, item: _Item) -> list[Event]:
        events = [
            {
                "type": "response.output_item.added",
                "output_index": item.index,
                "item": item.body("in_progress"),
            }
        ]
        if item.kind == "message":
            part = {**item.text_part(), "text": ""}
            events.append({"type": "response.content_part.added", **self._where(item), "part": part})
        return events

    def _delta(self, item: _Item, text: str, logprobs: list[Logprob] | None = None) -> Event:
        if item.kind == "function_call":
            return {
                "type": "response.function_call_arguments.delta",
                "item_id": item.id,
                "output_index": item.index,
                "delta": text,
            }
        kind = "response.reasoning_text.delta" if item.kind == "reasoning" else "response.output_text.delta"
        extra: dict[str, Any] = {"logprobs": logprobs or []} if item.kind == "message" else {}
        return {"type": kind, **self._where(item), "delta": text, **extra}

    def _close(self, status: str) -> list[Event]:
        item = self._open_item
        if item is None:
            return []
        item.done = True
        events: list[Event] = []
        if item.kind == "reasoning":
            events.append({"type": "response.reasoning_text.done", **self._where(item), "text": item.text})
        elif item.kind == "message":
            events.append(
                {
                    "type": "response.output_text.done",
                    **self._where(item),
                    "text": item.text,
                    "logprobs": list(item.logprobs),
                }
            )
            events.append(
                {"type": "response.content_part.done", **self._where(item), "part": item.text_part()}
            )
        else:
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item.id,
                    "output_index": item.index,
                    "name": item.name,
                    "arguments": item.text,
                }
            )
        events.append(
            {"type": "response.output_item.done", "output_index": item.index, "item": item.body(status)}
        )
        return events

    @property
    def _open_item(self) -> _Item | None:
        """The item still growing (None: none, or the last one is done)."""
        return self.items[-1] if self.items and not self.items[-1].done else None

    @staticmethod
    def _where(item: _Item) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": item.index, "content_index": 0}
