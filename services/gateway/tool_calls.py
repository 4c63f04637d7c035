"""Function calling as vLLM serves it without a tool-call parser: `tool_choice` naming a function, or
"required", turns into structured output (the function's parameters, or a list of calls to any of the
tools), and the generated JSON into the message's `tool_calls`. "auto" would need a parser for the
model's own tool-call format, which treespec does not have: it is refused.

Named function: the output is the arguments object; finish_reason stays the generation's ("stop").
Required: the output is a JSON array of {"name", "parameters"}; finish_reason "tool_calls".
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def as_message_part(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


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

    def finish_reason(self, generation_reason: str, calls: list[ToolCall] | None) -> str:
        """vLLM's: "tool_calls" when "required" made calls, else the generation's own."""
        if self.named is None and calls and generation_reason == "stop":
            return "tool_calls"
        return generation_reason


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
