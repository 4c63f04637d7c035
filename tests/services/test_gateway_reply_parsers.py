"""Replies read by parsers, through the OpenAI SDK: a gateway started with `--tool-call-parser hermes`
and `--reasoning-parser qwen3` in front of a real verifier (SmolLM2-135M on CPU, random drafts).
SmolLM2 was trained neither for function calling nor for thinking, and its template does not render
tools, so earlier turns show it the formats, which it then follows. With tool_choice "auto" its calls
come back as tool_calls and the text around them as content (for the deprecated `functions`, as the
legacy function_call); its `<think>` text comes back as
reasoning_content (or as the request asks: left out, left in the content, sent once it has ended);
whole and streamed alike. A reply without either is plain text, and structured
output holds on the answer after the thinking."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from tests.services.gateway_stack import KEY, MODEL, healthy, start_gateway
from tests.unit.gateway.test_template_kwargs import THINKING_TEMPLATE
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        },
    },
}


def _hermes_call(city: str) -> str:
    call = {"name": "get_weather", "arguments": {"city": city, "unit": "C"}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _asking(preface: str = "") -> list[ChatCompletionMessageParam]:
    """A conversation whose earlier turn answered with a call in Hermes' format."""
    return [
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am a helpful assistant."},
        {"role": "user", "content": "What is the weather in Rome?"},
        {"role": "assistant", "content": preface + _hermes_call("Rome")},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]


@pytest.fixture(scope="module")
def auto_client(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    port = free_port()
    flags = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
    service = start_gateway(model_path, verifier, port, tmp_path_factory.mktemp("parsers"), (KEY,), flags)
    url = f"http://127.0.0.1:{port}"
    service.wait_until(lambda: healthy(url), timeout_s=60)
    yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120)
    service.stop()


def _kwargs(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "tools": [WEATHER], "max_tokens": 48, "temperature": 0, **fields}


def test_a_call_in_the_models_format_becomes_a_tool_call(auto_client: openai.OpenAI) -> None:
    reply = auto_client.chat.completions.create(messages=_asking(), **_kwargs())
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "C"}


def test_text_before_a_call_stays_content_and_streams_as_whole(auto_client: openai.OpenAI) -> None:
    messages = _asking("Let me look.\n")
    whole = auto_client.chat.completions.create(messages=messages, **_kwargs()).choices[0]
    assert whole.message.content == "Let me look." and whole.finish_reason == "tool_calls"
    (call,) = whole.message.tool_calls or []
    content: list[str] = []
    calls: list[ChoiceDeltaToolCall] = []
    reasons: list[str | None] = []
    for chunk in auto_client.chat.completions.create(messages=messages, stream=True, **_kwargs()):
        for streamed in chunk.choices:
            content.append(streamed.delta.content or "")
            calls += streamed.delta.tool_calls or []
            reasons.append(streamed.finish_reason)
    assert "".join(content) == "Let me look."
    (streamed_call,) = calls
    assert streamed_call.index == 0 and streamed_call.id and streamed_call.function
    assert (streamed_call.function.name, streamed_call.function.arguments) == (
        call.function.name,
        call.function.arguments,
    )
    assert [r for r in reasons if r] == ["tool_calls"]


def test_a_call_for_functions_comes_back_as_the_legacy_function_call(auto_client: openai.OpenAI) -> None:
    """OpenAI's deprecated `functions`, whose function_call is "auto" by default: the call the parser
    reads comes back as the message's function_call, whole and streamed, finish reason "function_call"."""
    kwargs: dict[str, Any] = {
        **_kwargs(tools=None),
        "messages": _asking(),
        "functions": [WEATHER["function"]],
    }
    whole = auto_client.chat.completions.create(**kwargs).choices[0]
    assert whole.finish_reason == "function_call" and whole.message.tool_calls is None
    call = whole.message.function_call
    assert call is not None and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "unit": "C"}
    streamed: list[tuple[str | None, str | None]] = []
    reasons: list[str | None] = []
    for chunk in auto_client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            assert not choice.delta.tool_calls
            if choice.delta.function_call is not None:
                streamed.append((choice.delta.function_call.name, choice.delta.function_call.arguments))
            reasons.append(choice.finish_reason)
    assert streamed == [(call.name, call.arguments)]  # one delta: "auto" sends a call whole
    assert [r for r in reasons if r] == ["function_call"]


def test_a_reply_without_calls_is_text(auto_client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    plain = auto_client.chat.completions.create(messages=messages, **_kwargs(max_tokens=12, tools=None))
    reply = auto_client.chat.completions.create(
        messages=messages, **_kwargs(max_tokens=12, tool_choice="auto")
    )
    choice = reply.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")
    assert choice.message.content == plain.choices[0].message.content  # SmolLM2's template drops the tools


THINKING: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "<think>\nFrance's capital is Paris.\n</think>\n\nParis."},
    {"role": "user", "content": "What is the capital of Italy?"},
]


def test_the_thinking_comes_back_as_reasoning_content(auto_client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "messages": THINKING, "max_tokens": 40, "temperature": 0}
    whole = auto_client.chat.completions.create(**kwargs).choices[0]
    reasoning = (whole.message.model_extra or {}).get("reasoning_content")
    assert isinstance(reasoning, str) and "Italy" in reasoning and "<think>" not in reasoning
    assert whole.message.content and "</think>" not in whole.message.content and whole.finish_reason == "stop"
    streamed_reasoning, streamed_content = [], []
    for chunk in auto_client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            streamed_reasoning.append((choice.delta.model_extra or {}).get("reasoning_content") or "")
            streamed_content.append(choice.delta.content or "")
    assert "".join(streamed_reasoning) == reasoning
    assert "".join(streamed_content) == whole.message.content
    # The reply goes back into the conversation as the SDK dumps it, its reasoning included.
    history: list[Any] = [*THINKING, whole.message.model_dump(), {"role": "user", "content": "And Spain?"}]
    follow_up = auto_client.chat.completions.create(model=MODEL, messages=history, max_tokens=4)
    assert follow_up.choices[0].finish_reason in ("stop", "length")


def test_the_reasoning_comes_back_as_the_request_asks(auto_client: openai.OpenAI) -> None:
    """vLLM's include_reasoning false: the answer alone; SGLang's separate_reasoning false: the text
    as written, in the content; its stream_reasoning false: the reasoning in one delta, then the
    answer streamed as before."""
    kwargs: dict[str, Any] = {"model": MODEL, "messages": THINKING, "max_tokens": 40, "temperature": 0}
    whole = auto_client.chat.completions.create(**kwargs).choices[0].message
    reasoning = (whole.model_extra or {}).get("reasoning_content")
    assert reasoning and whole.content
    answer_only = auto_client.chat.completions.create(extra_body={"include_reasoning": False}, **kwargs)
    message = answer_only.choices[0].message
    assert message.content == whole.content and not (message.model_extra or {}).get("reasoning_content")
    as_written = auto_client.chat.completions.create(extra_body={"separate_reasoning": False}, **kwargs)
    assert as_written.choices[0].message.content == f"<think>{reasoning}</think>\n\n{whole.content}"
    deltas = []
    for chunk in auto_client.chat.completions.create(
        stream=True, extra_body={"stream_reasoning": False}, **kwargs
    ):
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            deltas += [("reasoning", extra["reasoning_content"])] if extra.get("reasoning_content") else []
            deltas += [("content", choice.delta.content)] if choice.delta.content else []
    assert deltas[0] == ("reasoning", reasoning) and {kind for kind, _ in deltas[1:]} == {"content"}
    assert "".join(text for _, text in deltas[1:]) == whole.content


THINKING_JSON: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France? Answer in JSON."},
    {
        "role": "assistant",
        "content": '<think>\nFrance\'s capital is Paris.\n</think>\n\n{"capital": "Paris"}',
    },
    {"role": "user", "content": "What is the capital of Italy? Answer in JSON."},
]


PLACE = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def test_structured_output_holds_on_the_answer_after_the_thinking(auto_client: openai.OpenAI) -> None:
    """As in vLLM and SGLang: the thinking is free text, the grammar holds from `</think>` on (the
    schema's keys, not the "capital" the conversation showed)."""
    schema = {"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE, "strict": True}}
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": THINKING_JSON,
        "max_tokens": 60,
        "temperature": 0,
        "response_format": schema,
    }
    whole = auto_client.chat.completions.create(**kwargs).choices[0]
    reasoning = (whole.message.model_extra or {}).get("reasoning_content")
    assert isinstance(reasoning, str) and "Italy" in reasoning and "{" not in reasoning
    assert whole.finish_reason == "stop" and whole.message.content is not None
    assert set(json.loads(whole.message.content)) == {"city", "country"}
    streamed_reasoning, streamed_content = [], []
    for chunk in auto_client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            streamed_reasoning.append((choice.delta.model_extra or {}).get("reasoning_content") or "")
            streamed_content.append(choice.delta.content or "")
    assert ("".join(streamed_reasoning), "".join(streamed_content)) == (reasoning, whole.message.content)
    # vLLM's chat_template_kwargs are accepted (SmolLM2's template reads no enable_thinking; with a
    # template that does, test_template_kwargs.py, the grammar then holds from the first token).
    same = auto_client.chat.completions.create(
        extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kwargs
    ).choices[0]
    assert same.message.content == whole.message.content


def _parser_gateway(
    flags: tuple[str, ...], model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    """A gateway reading replies as `flags` say, with its SDK client."""
    port = free_port()
    service = start_gateway(model_path, verifier, port, tmp_path_factory.mktemp("parsing"), (KEY,), flags)
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=120)
    service.stop()


@pytest.fixture(scope="module")
def mistral_client(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    yield from _parser_gateway(("--tool-call-parser", "mistral"), model_path, verifier, tmp_path_factory)


def test_a_parser_whose_markers_are_special_tokens_reads_them(
    mistral_client: openai.OpenAI, auto_client: openai.OpenAI
) -> None:
    """Mistral's [TOOL_CALLS] is a special token: with tool_choice "auto" its parser reads the reply
    with special tokens kept (vLLM's rule), so a special token the model writes (here SmolLM2's
    <|im_start|>, forced by logit_bias) is in the text it reads; Hermes' parser reads text without
    them; and without tools the request's own skip_special_tokens holds."""
    forced: Any = {"model": MODEL, "max_tokens": 2, "temperature": 0, "logit_bias": {"1": 100}}
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi."}]
    kept = mistral_client.chat.completions.create(messages=ask, tools=[WEATHER], **forced).choices[0]
    assert kept.message.content == "<|im_start|><|im_start|>" and not kept.message.tool_calls
    skipped = auto_client.chat.completions.create(messages=ask, tools=[WEATHER], **forced).choices[0]
    assert skipped.message.content == ""
    plain = mistral_client.chat.completions.create(messages=ask, **forced).choices[0]
    assert plain.message.content == ""


@pytest.fixture(scope="module")
def mistral_thinking_client(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    yield from _parser_gateway(("--reasoning-parser", "mistral"), model_path, verifier, tmp_path_factory)


def test_a_reasoning_parser_whose_markers_are_special_tokens_reads_them(
    mistral_thinking_client: openai.OpenAI,
) -> None:
    """Mistral's [THINK] is a special token: with `--reasoning-parser mistral` every chat reply is
    read with special tokens kept, so the special tokens SmolLM2 is forced to write stay in the text
    (an output that does not open with [THINK] is the answer)."""
    forced: Any = {"model": MODEL, "max_tokens": 2, "temperature": 0, "logit_bias": {"1": 100}}
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi."}]
    reply = mistral_thinking_client.chat.completions.create(messages=ask, **forced).choices[0].message
    assert reply.content == "<|im_start|><|im_start|>"
    assert (reply.model_extra or {}).get("reasoning_content") is None


@pytest.fixture(scope="module")
def coder_client(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    yield from _parser_gateway(("--tool-call-parser", "qwen3_coder"), model_path, verifier, tmp_path_factory)


def _coder_call(city: str, days: int) -> str:
    return (
        f"<tool_call>\n<function=get_forecast>\n<parameter=city>\n{city}\n</parameter>\n"
        f"<parameter=days>\n{days}\n</parameter>\n</function>\n</tool_call>"
    )


def test_qwen3_coder_calls_are_read_by_the_request_s_tool_schemas(coder_client: openai.OpenAI) -> None:
    """The model imitates the XML call of the conversation's earlier turn; its values are raw text,
    read by the types the request's tool gives them (a number for `days`, text for `city`)."""
    forecast: ChatCompletionToolParam = {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Forecast for Rome, 3 days?"},
        {"role": "assistant", "content": _coder_call("Rome", 3)},
        {"role": "user", "content": "Forecast for Paris, 5 days?"},
    ]
    kwargs: Any = {"model": MODEL, "tools": [forecast], "max_tokens": 64, "temperature": 0}
    choice = coder_client.chat.completions.create(messages=messages, **kwargs).choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_forecast"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 5}


@pytest.fixture(scope="module")
def r1_client(
    model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    template = tmp_path_factory.mktemp("template") / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    flags = ("--reasoning-parser", "deepseek_r1", "--chat-template", str(template))
    yield from _parser_gateway(flags, model_path, verifier, tmp_path_factory)


def test_reasoning_the_template_closed_in_the_prompt_is_not_split_off(r1_client: openai.OpenAI) -> None:
    """deepseek_r1 reads an output without </think> as reasoning (its template opens <think> in the
    prompt); where the template closed the thinking in the prompt instead (enable_thinking false, as
    Qwen3's and DeepSeek V3.1's do), the whole output is the answer."""
    kwargs: Any = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6}
    thinking = r1_client.chat.completions.create(temperature=0, **kwargs).choices[0].message
    assert thinking.content is None and (thinking.model_extra or {}).get("reasoning_content")
    off: Any = {"chat_template_kwargs": {"enable_thinking": False}}
    answer = r1_client.chat.completions.create(temperature=0, extra_body=off, **kwargs).choices[0].message
    assert answer.content and not (answer.model_extra or {}).get("reasoning_content")
    streamed = r1_client.chat.completions.create(temperature=0, stream=True, extra_body=off, **kwargs)
    deltas = [c.choices[0].delta for c in streamed if c.choices]
    assert "".join(d.content or "" for d in deltas) == answer.content
    assert not any((d.model_extra or {}).get("reasoning_content") for d in deltas)
