"""vLLM's POST /invocations (the route Amazon SageMaker calls, beside GET /ping): a chat completion
when the body has `messages`, a completion when it has a `prompt`, answered as those routes answer."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import APIError, validation_error
from treespec.gateway.routes.chat import chat_completions
from treespec.gateway.routes.completions import completions
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()
M = TypeVar("M", bound=BaseModel)


@router.post("/invocations", response_model=None)
async def invocations(request: Request, state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    body = await _json(request)
    if isinstance(body, dict) and "messages" in body:
        return await chat_completions(_parsed(ChatCompletionRequest, body), request, state)
    if isinstance(body, dict) and "prompt" in body:
        return await completions(_parsed(CompletionRequest, body), request, state)
    raise APIError(
        400,
        "An invocation is a chat completion (a body with 'messages') or a completion (a body with 'prompt').",
        code="invalid_value",
    )


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        error = {"type": "json_invalid", "loc": ("body",), "msg": f"JSON decode error: {exc}"}
        raise validation_error([error]) from exc


def _parsed(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from exc
