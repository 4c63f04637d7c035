"""Request validation: what OpenAI accepts is accepted, the rest is refused with a clear error."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.gateway.schema_checks import CALL as _CALL
from tests.unit.gateway.schema_checks import MESSAGES, SDK_ASSISTANT
from tests.unit.gateway.schema_checks import chat as _chat
from tests.unit.gateway.schema_checks import refusal as _refusal
from treespec.gateway.completion_request import CompletionRequest
from treespec.gateway.errors import validation_error
from treespec.gateway.schemas import ChatCompletionRequest


def test_a_typical_chat_request() -> None:
    body = _chat(
        max_completion_tokens=5,
        max_tokens=9,
        temperature=0.7,
        top_p=0.9,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        stop=["a", "", "b"],
        seed=-3,
        presence_penalty=0,
        frequency_penalty=0.0,
        logprobs=False,
        tool_choice="none",
        response_format={"type": "text"},
        user="u",
        safety_identifier="user-hash",  # OpenAI's newer hints, accepted and ignored
        prompt_cache_key="conversation-7",
        store=False,
        metadata={"team": "a"},
        top_k=-1,
        min_p=0.1,
        ignore_eos=True,
        stop_token_ids=[2],
        speculation={"enabled": True, "num_steps": 3},
    )
    assert body.token_limit == 5  # max_completion_tokens wins
    assert body.stop_strings == ("a", "b")
    assert body.include_usage


def test_content_parts_and_developer_role() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {
                    "role": "developer",
                    "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "nice"}],
                }
            ],
        }
    )
    assert body.messages[0].template_message() == {"role": "system", "content": "be nice"}


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"frobnicate": 1}, "unknown_parameter", "frobnicate"),
        ({"max_tokens": 0}, "invalid_value", "max_tokens"),
        ({"max_tokens": 10**40}, "invalid_value", "max_tokens"),
        ({"max_tokens": "5"}, "invalid_value", "max_tokens"),
        ({"temperature": 2.5}, "invalid_value", "temperature"),
        ({"top_p": 0}, "invalid_value", "top_p"),
        ({"n": 129}, "invalid_value", "n"),
        ({"stop": [str(i) for i in range(65)]}, "invalid_value", "stop"),
        ({"stop": 7}, "invalid_value", "stop"),
        ({"presence_penalty": 2.5}, "invalid_value", "presence_penalty"),
        ({"frequency_penalty": -2.1}, "invalid_value", "frequency_penalty"),
        ({"repetition_penalty": 0}, "invalid_value", "repetition_penalty"),
        ({"logit_bias": {"x": 1}}, "invalid_value", "logit_bias"),
        ({"logit_bias": {"5": 101}}, "invalid_value", "logit_bias"),
        ({"top_logprobs": 3}, "invalid_value", None),  # without logprobs: true
        ({"logprobs": True, "top_logprobs": 21}, "invalid_value", "top_logprobs"),
        ({"logprobs": True, "top_logprobs": -1}, "invalid_value", "top_logprobs"),
        ({"tools": [{"type": "function"}]}, "missing_required_parameter", "tools.0.function"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "invalid_value", None),
        ({"tool_choice": "sometimes"}, "invalid_value", None),
        ({"response_format": {"type": "json_schema"}}, "missing_required_parameter", "response_format"),
        ({"response_format": {"type": "xml"}}, "invalid_value", "response_format.type"),
        (
            {"response_format": {"type": "json_object", "json_schema": {"name": "x"}}},
            "invalid_value",
            "response_format",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "missing_required_parameter",
            "response_format.json_schema.name",
        ),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "invalid_value", None),
        ({"guided_choice": []}, "invalid_value", "guided_choice"),
        ({"guided_choice": ["a", ""]}, "invalid_value", None),
        ({"guided_regex": ""}, "invalid_value", "guided_regex"),
        ({"guided_json": 5}, "invalid_value", "guided_json"),
        # A field's "off" value of the wrong type is a mistake, not "off".
        ({"presence_penalty": "none"}, "invalid_value", "presence_penalty"),
        ({"frequency_penalty": ""}, "invalid_value", "frequency_penalty"),
        ({"logit_bias": False}, "invalid_value", "logit_bias"),
        ({"logprobs": 0}, "invalid_value", "logprobs"),
        ({"tools": {}}, "invalid_value", "tools"),
        ({"response_format": "text"}, "invalid_value", "response_format"),
        ({"stream_options": {"include_usage": True}}, "invalid_value", None),
        ({"speculation": {"num_draft_tokens": 0}}, "invalid_value", "speculation.num_draft_tokens"),
        ({"speculation": {"depth": 2}}, "unknown_parameter", "speculation.depth"),
        ({"stop_token_ids": [-1]}, "invalid_value", "stop_token_ids.0"),
        ({"seed": 2**63}, "invalid_value", "seed"),
        ({"cache_salt": ""}, "invalid_value", "cache_salt"),  # vLLM: a non-empty string if given
        ({"cache_salt": 7}, "invalid_value", "cache_salt"),
        ({"cache_salt": "tenant\ud800"}, "invalid_value", "cache_salt"),
        ({"messages": []}, "invalid_value", "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "invalid_value", "messages.0.role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "missing_required_parameter", None),
        (
            {"messages": [{"role": "user", "content": "x", "tool_calls": [_CALL]}]},
            "invalid_value",
            None,
        ),
        ({"messages": [{"role": "user"}]}, "missing_required_parameter", "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": None}]},
            "missing_required_parameter",
            "messages.0.content",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "unsupported_parameter", None),
    ],
)
def test_chat_refusals(fields: dict[str, Any], code: str, param: str | None) -> None:
    got_code, got_param = _refusal(ChatCompletionRequest, {"model": "m", "messages": MESSAGES, **fields})
    assert got_code == code
    if param is not None:
        assert got_param == param


def test_image_parts_are_unsupported() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "text": ""}]}]}
    assert _refusal(ChatCompletionRequest, body) == ("unsupported_parameter", "messages.0.content.0.type")


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("hi", ["hi"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_completion_prompt_forms(prompt: Any, expected: list[Any]) -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": prompt})
    assert body.prompts == expected
    assert body.token_limit == 16  # OpenAI's default for completions


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"prompt": []}, "invalid_value"),
        ({"prompt": [[]]}, "invalid_value"),
        ({"prompt": [1, "a"]}, "invalid_value"),
        ({"prompt": [-5]}, "invalid_value"),
        ({"prompt": ["x"] * 257}, "invalid_value"),
        ({"prompt": ["x"] * 5, "n": 64}, "invalid_value"),
        ({"prompt": "x", "logprobs": 21}, "invalid_value"),
        ({"prompt": "x", "suffix": "y"}, "unsupported_parameter"),
        ({"prompt": "x", "best_of": 2}, "unsupported_parameter"),
        ({"prompt": "x", "echo": 0}, "invalid_value"),
        ({"prompt": "x", "logprobs": False}, "invalid_value"),
        ({}, "missing_required_parameter"),
    ],
)
def test_completion_refusals(fields: dict[str, Any], code: str) -> None:
    assert _refusal(CompletionRequest, {"model": "m", **fields})[0] == code


def test_body_that_is_not_an_object() -> None:
    error = validation_error([{"type": "model_attributes_type", "loc": ("body",), "msg": "x"}])
    assert (error.status, error.param, error.message) == (
        400,
        None,
        "The request body must be a JSON object.",
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "user", "content": "bad \ud800"}]}, "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
            "messages.0.content.0.text",
        ),
        ({"stop": "end\ud800"}, "stop"),
        ({"stop": ["ok", "end\ud800"]}, "stop.1"),
    ],
)
def test_chat_text_with_a_lone_surrogate_is_refused(fields: dict[str, Any], param: str) -> None:
    body = {"model": "m", "messages": MESSAGES, **fields}
    assert _refusal(ChatCompletionRequest, body) == ("invalid_value", param)


@pytest.mark.parametrize(("prompt", "param"), [("bad \ud83d", "prompt"), (["ok", "bad \ud83d"], "prompt.1")])
def test_a_prompt_with_a_lone_surrogate_is_refused(prompt: Any, param: str) -> None:
    assert _refusal(CompletionRequest, {"model": "m", "prompt": prompt}) == ("invalid_value", param)


def test_a_refusal_may_quote_a_lone_surrogate() -> None:
    part = {"type": "image\ud800", "text": ""}  # its refusal quotes the type: pydantic must render it
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    assert _refusal(ChatCompletionRequest, body) == ("unsupported_parameter", "messages.0.content.0.type")


def test_surrogate_pairs_are_valid_text() -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": "sushi 🍣", "stop": "🍣"})
    assert body.prompts == ["sushi 🍣"] and body.stop_strings == ("🍣",)


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (SDK_ASSISTANT, "Hello"),
        ({**SDK_ASSISTANT, "tool_calls": [], "annotations": []}, "Hello"),
        ({"role": "assistant", "content": None}, ""),
        ({"role": "assistant"}, ""),
        ({**SDK_ASSISTANT, "reasoning_content": None}, "Hello"),  # a gateway's reply without reasoning
    ],
)
def test_assistant_messages_as_the_sdk_writes_them(message: dict[str, Any], text: str) -> None:
    body = _chat(messages=[*MESSAGES, message, *MESSAGES])
    assert body.messages[1].template_message() == {"role": "assistant", "content": text}


def test_an_assistants_reasoning_reaches_the_template() -> None:
    body = _chat(messages=[*MESSAGES, {**SDK_ASSISTANT, "reasoning_content": "Hmm."}, *MESSAGES])
    assert body.messages[1].template_message() == {
        "role": "assistant",
        "content": "Hello",
        "reasoning_content": "Hmm.",
    }
    user = {"role": "user", "content": "x", "reasoning_content": "no"}
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": [user]}) == (
        "invalid_value",
        "messages.0",
    )


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        (
            {"tool_calls": [{"id": "c", "type": "function"}]},
            "missing_required_parameter",
            "messages.1.tool_calls.0.function",
        ),
        (
            {"function_call": {"name": "f"}},
            "missing_required_parameter",
            "messages.1.function_call.arguments",
        ),
        (
            {"function_call": {"name": "bad name", "arguments": "{}"}},
            "invalid_value",
            "messages.1.function_call.name",
        ),
        ({"function_call": _CALL["function"], "tool_calls": [_CALL]}, "invalid_value", "messages.1"),
        ({"audio": {"id": "a"}}, "unsupported_parameter", "messages.1.audio"),
        ({"refusal": "no"}, "unsupported_parameter", "messages.1.refusal"),
    ],
)
def test_assistant_message_refusals(fields: dict[str, Any], code: str, param: str) -> None:
    messages = [*MESSAGES, {**SDK_ASSISTANT, **fields}]
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": messages}) == (code, param)


def test_tool_calls_and_answers_reach_the_template() -> None:
    body = _chat(
        messages=[
            *MESSAGES,
            {**SDK_ASSISTANT, "content": None, "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
    }
    assert body.messages[1].template_message() == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert body.messages[2].template_message() == {"role": "tool", "content": "18C", "tool_call_id": "call_1"}
    assert body.constraint == ("json_schema", {"type": "object"})
    assert body.template_tools == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert _chat(tools=body.template_tools, tool_choice="none").template_tools is None
    assert not body.auto_tool_choice
    for choice in ({}, {"tool_choice": "auto"}):  # the model decides (the gateway's parser reads its calls)
        auto = _chat(tools=body.template_tools, **choice)
        assert auto.auto_tool_choice and auto.tool_call_mode is None and auto.constraint is None
        assert auto.template_tools == body.template_tools
    assert not _chat(tool_choice="auto").auto_tool_choice  # no tools: nothing to call


def test_null_means_the_default() -> None:
    body = _chat(n=None, stream=None, ignore_eos=None)
    assert (body.n, body.stream, body.ignore_eos) == (1, False, False)
    streamed = _chat(stream=True, stream_options={"include_usage": None})
    assert streamed.stream and not streamed.include_usage
    completion = CompletionRequest.model_validate({"model": "m", "prompt": "x", "n": None, "best_of": None})
    assert completion.n == 1


def test_the_prompt_opens_the_assistant_s_turn_unless_the_final_message_is_continued() -> None:
    assert _chat().opens_turn and not _chat().continue_final_message
    assert not _chat(add_generation_prompt=False).opens_turn
    assert not _chat(continue_final_message=True).opens_turn
    assert not _chat(continue_final_message=True, add_generation_prompt=False).opens_turn
    assert _chat(continue_final_message=False, add_generation_prompt=None).opens_turn
    both = {"model": "m", "messages": MESSAGES, "continue_final_message": True, "add_generation_prompt": True}
    assert _refusal(ChatCompletionRequest, both)[0] == "invalid_value"


def test_echo_repeats_only_an_assistant_s_final_message() -> None:
    begun = [*MESSAGES, {"role": "assistant", "content": [{"type": "text", "text": "Sure"}]}]
    assert _chat(messages=begun, echo=True).echoed == "Sure"
    assert _chat(messages=begun).echoed == "" and _chat(messages=begun, echo=None).echoed == ""
    assert _chat(echo=True).echoed == ""  # the final message is the user's


def test_reasoning_effort_reaches_the_template_as_a_variable() -> None:
    assert _chat().template_kwargs is None
    thinking = {"enable_thinking": False}
    assert _chat(chat_template_kwargs=thinking).template_kwargs == thinking
    effort = _chat(reasoning_effort="low", chat_template_kwargs={"enable_thinking": False})
    assert effort.template_kwargs == {"enable_thinking": False, "reasoning_effort": "low"}
    assert _chat(reasoning_effort="high").template_kwargs == {"reasoning_effort": "high"}
    same = {"reasoning_effort": "high", "chat_template_kwargs": {"reasoning_effort": "high"}}
    assert _chat(**same).template_kwargs == {"reasoning_effort": "high"}
    # chat_template_kwargs alone may set it as any other template variable
    own = {"reasoning_effort": "max"}
    assert _chat(chat_template_kwargs=own).template_kwargs == own
    body = {"model": "m", "messages": MESSAGES}
    for fields in ({"reasoning_effort": "extreme"}, {"reasoning_effort": 2}):
        assert _refusal(ChatCompletionRequest, {**body, **fields}) == ("invalid_value", "reasoning_effort")
    differ = {"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high"}}
    assert _refusal(ChatCompletionRequest, {**body, **differ})[0] == "invalid_value"


def test_chat_template_kwargs_are_accepted_but_not_the_template_s_own_arguments() -> None:
    assert _chat(chat_template_kwargs={"enable_thinking": False}).chat_template_kwargs == {
        "enable_thinking": False
    }
    body = {"model": "m", "messages": MESSAGES}
    reserved_kwargs: list[dict[str, Any]] = [
        {"tokenize": True},
        {"add_generation_prompt": False},
        {"messages": []},
    ]
    for reserved in reserved_kwargs:
        refused = _refusal(ChatCompletionRequest, {**body, "chat_template_kwargs": reserved})
        assert refused == ("invalid_value", "chat_template_kwargs")


def test_sglang_names_stand_for_vllm_s_fields() -> None:
    """A client written for SGLang runs unchanged: `rid` names the response as `request_id` does,
    `no_stop_trim` keeps the stop string as `include_stop_str_in_output` does, and `regex`, `ebnf`
    and `json_schema` constrain the output as vLLM's guided fields do."""
    body = _chat(rid="job-1", no_stop_trim=True)
    assert (body.request_id, body.include_stop_str_in_output) == ("job-1", True)
    assert _chat(rid="job-1", request_id="job-1").request_id == "job-1"
    assert _chat(no_stop_trim=None, include_stop_str_in_output=True).include_stop_str_in_output
    assert not _chat().include_stop_str_in_output
    assert _chat(regex="[0-9]+").constraint == _chat(guided_regex="[0-9]+").constraint == ("regex", "[0-9]+")
    grammar = 'root ::= "yes" | "no"'
    assert _chat(ebnf=grammar).constraint == _chat(guided_grammar=grammar).constraint == ("grammar", grammar)
    completion = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "json_schema": '{"type": "object"}'}
    )
    assert completion.constraint == ("json_schema", '{"type": "object"}')
    assert _refusal(
        ChatCompletionRequest, {"model": "m", "messages": MESSAGES, "rid": "a", "request_id": "b"}
    ) == (
        "invalid_value",
        None,
    )
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": MESSAGES, "rid": ""}) == (
        "invalid_value",
        "rid",
    )
    both = {"model": "m", "messages": MESSAGES, "regex": "a", "guided_json": {}}
    assert _refusal(ChatCompletionRequest, both) == ("invalid_value", None)


def test_vllm_s_switches_are_taken_where_they_change_nothing() -> None:
    """Beam search is not served: `use_beam_search` false and `length_penalty` 1 are taken, other
    values refused as unsupported; `spaces_between_special_tokens` either way (the fast tokenizers'
    decoding does not read it); `guided_decoding_backend` any of vLLM's backends, and
    `guided_whitespace_pattern` its default only."""
    body = _chat(
        use_beam_search=False,
        length_penalty=1,
        spaces_between_special_tokens=False,
        guided_decoding_backend="xgrammar",
        guided_whitespace_pattern=None,
        guided_choice=["yes", "no"],
    )
    assert body.constraint == ("choice", ["yes", "no"])
    assert _chat(use_beam_search=None, length_penalty=None).length_penalty == 1.0
    for fields, param in (
        ({"use_beam_search": True}, "use_beam_search"),
        ({"length_penalty": 0.8}, "length_penalty"),
        ({"guided_whitespace_pattern": r"[ \n]*"}, "guided_whitespace_pattern"),
    ):
        assert _refusal(ChatCompletionRequest, {"model": "m", "messages": MESSAGES, **fields}) == (
            "unsupported_parameter",
            param,
        )
    unknown = {"model": "m", "messages": MESSAGES, "guided_decoding_backend": "regex-engine-9"}
    assert _refusal(ChatCompletionRequest, unknown) == ("invalid_value", "guided_decoding_backend")
    assert _refusal(ChatCompletionRequest, {"model": "m", "messages": MESSAGES, "beam_width": 2}) == (
        "unknown_parameter",
        "beam_width",
    )


def test_max_tokens_0_scores_the_prompt_with_echo_only() -> None:
    scoring = CompletionRequest.model_validate({"model": "m", "prompt": "hi", "max_tokens": 0, "echo": True})
    assert scoring.echo_only and scoring.token_limit == 0
    assert not CompletionRequest.model_validate({"model": "m", "prompt": "hi"}).echo_only
    for body in ({"max_tokens": 0}, {"max_tokens": 0, "echo": False}, {"max_tokens": -1, "echo": True}):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate({"model": "m", "prompt": "hi", **body})
