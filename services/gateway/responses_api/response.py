"""The Responses API's response object: the request's settings echoed back, the output items, the
status (incomplete when the token limit cut the output) and usage in the Responses API's names."""

from __future__ import annotations

from typing import Any

from treespec.gateway.responses import MetaInfo, Usage
from treespec.gateway.responses_api.request import ResponsesRequest
from treespec.gateway.service_hints import DEFAULT_VERBOSITY

LENGTH = "length"


def response_status(finish_reason: str) -> str:
    """ "incomplete" when the output reached its token limit, else "completed"."""
    return "incomplete" if finish_reason == LENGTH else "completed"


def response_body(
    request: ResponsesRequest,
    identity: tuple[str, int, str],
    output: list[dict[str, Any]],
    status: str,
    usage: Usage | None = None,
    meta: MetaInfo | None = None,
    stored: bool = False,
) -> dict[str, Any]:
    """`identity`: the response's id, creation time and model; `stored`: whether it is kept."""
    response_id, created, model = identity
    text_format = request.text.format if request.text is not None else None
    reasoning = request.reasoning
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "conversation": {"id": request.conversation_id} if request.conversation_id else None,
        "reasoning": {
            "effort": reasoning.effort if reasoning else None,
            "summary": reasoning.summary if reasoning else None,
        },
        "store": stored,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_logprobs": request.top_logprobs,
        "text": {
            "format": text_format.model_dump(by_alias=True, exclude_none=True)
            if text_format
            else {"type": "text"},
            "verbosity": DEFAULT_VERBOSITY,  # the only one served (service_hints.py)
        },
        "tool_choice": (
            request.tool_choice.model_dump()
            if request.tool_choice is not None and not isinstance(request.tool_choice, str)
            else request.tool_choice or "auto"
        ),
        "tools": [t.model_dump(exclude_none=True) for t in request.tools or []],
        "truncation": "disabled",
        "background": request.background is True,
        "metadata": request.metadata or {},
        "user": request.user,
        "usage": _usage(usage) if usage is not None else None,
    }
    if meta is not None:
        body["meta_info"] = meta.model_dump()
    return body


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.prompt_tokens_details.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }
