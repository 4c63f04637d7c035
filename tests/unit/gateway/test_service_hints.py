"""OpenAI's newer service fields (service_hints.py): the prompt-cache hints and stream obfuscation are
accepted as the openai SDK types them, verbosity at OpenAI's default only, and what this server does
not implement (prewarming, moderation, web search, other verbosities) is refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.gateway.schema_checks import MESSAGES
from tests.unit.gateway.schema_checks import chat as _chat
from tests.unit.gateway.schema_checks import refusal as _refusal
from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import validation_error
from treespec.gateway.responses_api.request import ResponsesRequest
from treespec.gateway.responses_api.response import response_body
from treespec.gateway.schemas import ChatCompletionRequest

BREAKPOINT = {"mode": "explicit", "ttl": "12h"}


def test_chat_takes_the_cache_hints_obfuscation_and_the_default_verbosity() -> None:
    body = _chat(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "prompt_cache_breakpoint": BREAKPOINT}],
            }
        ],
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "explicit", "ttl": "30m"},
        stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False},
        verbosity="medium",
        moderation=None,
        web_search_options=None,
    )
    assert body.include_usage
    assert body.messages[0].text == "hi"  # the breakpoint changes nothing of the prompt
    assert _chat(verbosity=None).verbosity is None


def test_completions_take_stream_obfuscation() -> None:
    body = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "stream": True, "stream_options": {"include_obfuscation": True}}
    )
    assert body.stream_options is not None and not body.include_usage


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"verbosity": "low"}, "unsupported_parameter", "verbosity"),
        ({"verbosity": "high"}, "unsupported_parameter", "verbosity"),
        ({"verbosity": "terse"}, "invalid_value", "verbosity"),
        ({"prompt_cache_retention": "1w"}, "invalid_value", "prompt_cache_retention"),
        ({"prompt_cache_options": {"ttl": "1d"}}, "invalid_value", "prompt_cache_options.ttl"),
        (
            {"prompt_cache_options": {"prewarm": True}},
            "unsupported_parameter",
            "prompt_cache_options.prewarm",
        ),
        ({"prompt_cache_options": {"size": 3}}, "unknown_parameter", "prompt_cache_options.size"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "unsupported_parameter", "moderation"),
        ({"web_search_options": {}}, "unsupported_parameter", "web_search_options"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "x", "prompt_cache_breakpoint": {}}],
                    }
                ]
            },
            "missing_required_parameter",
            "messages.0.content.0.prompt_cache_breakpoint.mode",
        ),
    ],
)
def test_chat_refuses_what_it_does_not_implement(fields: dict[str, Any], code: str, param: str) -> None:
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": MESSAGES, **fields}) == (code, param)


def test_a_refusal_names_the_verbosity_served() -> None:
    with pytest.raises(ValidationError) as caught:
        _chat(verbosity="low")
    message = validation_error(caught.value.errors()).message
    assert "'medium'" in message and "'low'" in message


def _responses(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})


def test_responses_take_the_cache_hints_and_the_default_verbosity() -> None:
    part = {"type": "input_text", "text": "hi", "prompt_cache_breakpoint": BREAKPOINT}
    request = _responses(
        input=[{"role": "user", "content": [part]}],
        prompt_cache_retention="in_memory",
        prompt_cache_options={
            "mode": "implicit",
            "ttl": "12h",
            "prewarm": False,
            "comparison_response_id": "resp_1",
        },
        stream_options={"include_obfuscation": False},
        text={"verbosity": "medium"},
        moderation=None,
        context_management=None,
    )
    assert request.chat_messages() == [{"role": "user", "content": "hi"}]
    body = response_body(request, ("resp_2", 0, "m"), [], "completed")
    assert body["text"] == {"format": {"type": "text"}, "verbosity": "medium"}


@pytest.mark.parametrize(
    "fields",
    [
        {"text": {"verbosity": "high"}},
        {"prompt_cache_options": {"prewarm": True}},
        {"moderation": {"model": "omni-moderation-latest"}},
        {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
        {"background_options": {"completion_window": "8h"}},
        {"image": {"context_compression": "enabled"}},
    ],
)
def test_responses_refuse_what_they_do_not_implement(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        _responses(**fields)
    assert validation_error(caught.value.errors()).code == "unsupported_parameter"
