"""The conversation of a chat request: its messages (pydantic v2, strict) and how they reach the chat
template. An assistant's message may be written back as the SDK reads it; tool calls and the tools'
answers go to the template, as do OpenAI's deprecated forms of both (an assistant's `function_call`
and a role "function" message), paired by ids drawn from their places (`template_messages`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.errors import quotable
from treespec.gateway.schema_types import STRICT, UnicodeText, unsupported
from treespec.gateway.service_hints import PromptCacheBreakpoint
from treespec.gateway.tool_schemas import CalledFunction, MessageToolCall

# The roles chat templates know a message's role by ("developer" is OpenAI's new name for "system",
# and a "function" message is the deprecated form of a tool's answer).
_TEMPLATE_ROLES = {"developer": "system", "function": "tool"}


class TextPart(BaseModel):
    model_config = STRICT
    type: str
    text: UnicodeText
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None  # accepted, ignored (service_hints.py)

    @field_validator("type")
    @classmethod
    def _text_only(cls, value: str) -> str:
        if value != "text":
            raise PydanticCustomError(
                "unsupported_parameter",
                "only text content parts are supported (got '{kind}')",
                {"kind": quotable(value)},
            )
        return value


class ChatMessage(BaseModel):
    """One message of the conversation. An assistant's may be written back as the SDK reads it
    (`message.model_dump()`): content null, and its refusal, annotations and audio null (or empty);
    its tool calls, and the tools' answers (role "tool"), go to the chat template, as do the
    deprecated forms of both: an assistant's `function_call` and a role "function" message (named
    after the function) holding its result (`template_messages` pairs them)."""

    model_config = STRICT
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: UnicodeText | list[TextPart] | None = Field(default=None, validate_default=True)
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None  # an assistant's
    tool_call_id: str | None = None  # a tool's answer: the call it answers
    reasoning_content: str | None = None  # an assistant's thinking, as --reasoning-parser returned it
    function_call: CalledFunction | None = None  # an assistant's, deprecated: its one call
    # An assistant's, known to OpenAI, not implemented: accepted at their neutral value only.
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: dict[str, Any] | None = None

    _check_unsupported = field_validator("refusal", "annotations", "audio")(unsupported)

    @field_validator("content")
    @classmethod
    def _content_unless_assistant(
        cls, value: str | list[TextPart] | None, info: ValidationInfo
    ) -> str | list[TextPart] | None:
        """Only an assistant's message may go without content (OpenAI's, when it called tools), and a
        function's (the SDK's type for it allows null content)."""
        if value is None and info.data.get("role", "assistant") not in ("assistant", "function"):
            raise PydanticCustomError("missing", "Field required")
        return value

    @property
    def text(self) -> str:
        """The content as one text ("" for an assistant's without content)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text for part in self.content)

    @model_validator(mode="after")
    def _tool_fields_by_role(self) -> ChatMessage:
        if (self.tool_calls or self.function_call is not None) and self.role != "assistant":
            raise PydanticCustomError(
                "invalid_value", "only an assistant's message may hold tool_calls or function_call"
            )
        if self.tool_calls and self.function_call is not None:
            raise PydanticCustomError(
                "invalid_value", "a message holds tool_calls or the deprecated function_call, not both"
            )
        if self.reasoning_content is not None and self.role != "assistant":
            raise PydanticCustomError(
                "invalid_value", "only an assistant's message may hold reasoning_content"
            )
        if self.role == "tool" and not self.tool_call_id:
            raise PydanticCustomError("missing", "a tool's message needs its 'tool_call_id'")
        if self.role == "function" and not self.name:
            raise PydanticCustomError("missing", "a function's message needs its 'name'")
        return self

    def template_message(self, function_call_id: str = "") -> dict[str, Any]:
        """The message as chat templates expect it, in the roles they know (_TEMPLATE_ROLES).
        `function_call_id`: the id standing for the deprecated function call that this message makes
        (an assistant's `function_call`) or answers (role "function"), which names none itself."""
        message: dict[str, Any] = {"role": _TEMPLATE_ROLES.get(self.role, self.role), "content": self.text}
        calls = list(self.tool_calls or [])
        if self.function_call is not None:
            calls.append(MessageToolCall(id=function_call_id, type="function", function=self.function_call))
        if calls:
            message["tool_calls"] = [call.template_call() for call in calls]
        answered = function_call_id if self.role == "function" else self.tool_call_id
        if answered is not None:
            message["tool_call_id"] = answered
        if self.reasoning_content is not None:  # templates that show earlier thinking read it (Qwen3's)
            message["reasoning_content"] = self.reasoning_content
        return message


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation as chat templates expect it. The deprecated function calling names no call
    ids, yet templates pair a call with its answer by id: an assistant's `function_call` becomes a
    tool call whose id comes from its place in the conversation, and a role "function" message the
    tool message answering the latest such call (legacy calls are never parallel; one that answers
    no call gets an id from its own place). Drawn from places, the ids are the same each time the
    conversation is sent, so a conversation that grows keeps its prompt's prefix (and the prefix
    cache's hits) from turn to turn."""
    rendered: list[dict[str, Any]] = []
    latest_call: str | None = None
    for index, message in enumerate(messages):
        if message.function_call is not None:
            latest_call = _function_call_id(index)
        rendered.append(message.template_message(latest_call or _function_call_id(index)))
    return rendered


def _function_call_id(index: int) -> str:
    """The id of the deprecated function call made at message `index` (not shaped as the gateway's
    own random `call_` ids, so it never meets one a client kept from a reply)."""
    return f"call_function_{index}"
