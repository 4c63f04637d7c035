"""OpenAI's input token count (POST /v1/responses/input_tokens, the SDK's
`client.responses.input_tokens.count`): how many tokens the prompt of a response would take, made as
the response's would be (its instructions, the previous response's or conversation's items, its input
and tools, through the chat template), without generating."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from treespec.gateway.errors import validation_error
from treespec.gateway.responses_api.request import (
    ConversationRef,
    FunctionChoice,
    FunctionTool,
    InputItems,
    ReasoningConfig,
    ResponsesRequest,
    TextConfig,
)
from treespec.gateway.schema_types import STRICT, UnicodeText
from treespec.gateway.tool_schemas import MAX_TOOLS


class InputTokensRequest(BaseModel):
    model_config = STRICT
    model: str | None = Field(default=None, min_length=1)  # None: the served model
    input: UnicodeText | InputItems | None = None
    instructions: UnicodeText | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    conversation: str | ConversationRef | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    truncation: Literal["disabled"] | None = None  # nothing is cut: a prompt too long is counted whole

    def response_request(self, model: str) -> ResponsesRequest:
        """The response this count is for (a 400 where it would not be one), of `model` unless the
        request names its own."""
        fields: dict[str, Any] = self.model_dump(exclude_none=True, by_alias=True)
        try:
            return ResponsesRequest.model_validate({**fields, "model": self.model or model})
        except ValidationError as exc:
            raise validation_error(exc.errors()) from None
