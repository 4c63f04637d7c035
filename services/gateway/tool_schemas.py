"""Function calling's request bodies: the tools offered, the one chosen, and the calls an earlier
assistant message made (written back into the conversation)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from treespec.gateway.schema_types import STRICT

MAX_TOOLS = 128
FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class CalledFunction(BaseModel):
    model_config = STRICT
    name: str = Field(pattern=FUNCTION_NAME)
    arguments: str  # JSON text


class MessageToolCall(BaseModel):
    """A tool call of an earlier assistant message, written back into the conversation."""

    model_config = STRICT
    id: str
    type: Literal["function"]
    function: CalledFunction

    def template_call(self) -> dict[str, Any]:
        """As chat templates expect it: the arguments as an object where they parse."""
        try:
            arguments: Any = json.loads(self.function.arguments)
        except json.JSONDecodeError:
            arguments = self.function.arguments
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.function.name, "arguments": arguments},
        }


class FunctionDef(BaseModel):
    model_config = STRICT
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(BaseModel):
    model_config = STRICT
    type: Literal["function"]
    function: FunctionDef


class ChosenFunction(BaseModel):
    model_config = STRICT
    name: str


class NamedToolChoice(BaseModel):
    model_config = STRICT
    type: Literal["function"]
    function: ChosenFunction


def template_tools(tools: list[ToolDef] | None) -> list[dict[str, Any]] | None:
    """The tools as chat templates take them (None: no tools)."""
    return [t.model_dump(exclude_none=True) for t in tools] if tools else None
