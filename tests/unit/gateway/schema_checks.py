"""What the request-validation tests share: a chat request over one user message, an assistant's
tool call, an assistant's reply as the SDK dumps it, and the (code, param) a refused body gets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import validation_error
from treespec.gateway.schemas import ChatCompletionRequest

MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **fields})


CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}


def refusal(model: type[ChatCompletionRequest | CompletionRequest], body: dict[str, Any]) -> tuple[str, Any]:
    """The (code, param) a refused body gets."""
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    error = validation_error(caught.value.errors())
    assert error.status == 400
    return error.code or "", error.param


SDK_ASSISTANT = {  # what the openai SDK's `message.model_dump()` gives for a reply
    "role": "assistant",
    "content": "Hello",
    "refusal": None,
    "annotations": None,
    "audio": None,
    "function_call": None,
    "tool_calls": None,
}
