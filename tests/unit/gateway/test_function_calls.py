"""OpenAI's deprecated function calling: the calls made for `functions` (a named function, or "auto"
with a parser) come back as the message's `function_call`, one call at most, finish reason
"function_call"; streamed, as `function_call` deltas (the name first, then pieces of the arguments)
that reassemble into the whole reply's, through a reasoning parser too. And a conversation's earlier
function calls and their results (role "function") reach the chat template as tool calls and the
tool messages answering them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.auto_tool_calls import AutoToolCalls
from treespec.gateway.chat_messages import template_messages
from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.function_calls import FunctionCalls
from treespec.gateway.reasoning_parsers.base import Part, ReasoningParser, ReasoningReader
from treespec.gateway.reasoning_parsers.think import Qwen3Parser
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.gateway.tool_calls import ToolCalling, ToolCallMode
from treespec.gateway.tool_parsers.hermes import HermesParser
from treespec.shared.model.store import models_dir, resolve_model_path

PARAMS: dict[str, dict[str, Any]] = {"get_time": {"type": "object"}, "other": {"type": "object"}}
NAMED = ToolCallMode("get_time", PARAMS)
CALL = '<tool_call>{"name": "get_time", "arguments": {"zone": "%s"}}</tool_call>'


class _CharByChar(ReasoningReader):
    """All content, settled one character per part: a feed's parts become one merged delta."""

    def feed(self, text: str) -> list[Part]:
        return [Part("content", char) for char in text]

    def finish(self) -> list[Part]:
        return []


class _CharByCharParser(ReasoningParser):
    name = "char-by-char"
    end_marker = "</think>"

    def reader(self) -> ReasoningReader:
        return _CharByChar()


def _streamed(replies: ChatReplies, text: str, reason: str, rng: random.Random) -> dict[str, Any]:
    """One streamed choice as a client reassembles it: the deltas' function_call fields joined."""
    stream = replies.stream()
    deltas = [stream.text(2, piece) for piece in random_pieces(text, rng)]
    last, finish = stream.end(2, reason)
    calls = [d["function_call"] for d in [*deltas, last] if "function_call" in d]
    assert not any("tool_calls" in d for d in [*deltas, last])
    names = [call["name"] for call in calls if "name" in call]
    return {
        "content": "".join(d.get("content", "") for d in [*deltas, last]) or None,
        "function_call": {"name": names[0], "arguments": "".join(c["arguments"] for c in calls)}
        if calls
        else None,
        "names": names,
        "finish_reason": finish,
    }


def _whole(replies: ChatReplies, text: str, reason: str) -> dict[str, Any]:
    message = replies.message(text, reason)
    assert message.tool_calls is None  # the legacy shape only
    names = [message.function_call["name"]] if message.function_call else []
    return {
        "content": message.content,
        "function_call": message.function_call,
        "names": names,
        "finish_reason": message.finish_reason,
    }


def _agree(tools: ToolCalling, text: str, reason: str, expected: dict[str, Any]) -> None:
    parsers: list[ReasoningParser | None] = [None, Qwen3Parser(), _CharByCharParser()]
    for replies in (ChatReplies(parser, tools) for parser in parsers):
        assert _whole(replies, text, reason) == expected
        for seed in range(20):
            assert _streamed(replies, text, reason, random.Random(seed)) == expected


def test_a_named_function_comes_back_as_the_function_call() -> None:
    """Forced by name, the call ends with "stop", as a forced tool call does (OpenAI, vLLM)."""
    arguments = '{"zone": "UTC"}'
    expected = {
        "content": None,
        "function_call": {"name": "get_time", "arguments": arguments},
        "names": ["get_time"],  # once, first
        "finish_reason": "stop",
    }
    _agree(FunctionCalls(NAMED), arguments, "stop", expected)


def test_a_named_call_cut_short_is_text_with_the_generations_reason() -> None:
    reply = FunctionCalls(NAMED).reply('{"zone": "U', "length")
    assert (reply.content, reply.function_call(), reply.tool_calls(), reply.finish_reason) == (
        '{"zone": "U',
        None,
        None,
        "length",
    )
    stream = FunctionCalls(NAMED).stream()
    first = stream.text(0, '{"zone"')
    assert first == {"function_call": {"name": "get_time", "arguments": '{"zone"'}}
    assert stream.text(0, ': "U') == {"function_call": {"arguments": ': "U'}}
    assert stream.end(0, "length") == ({}, "length")


def test_auto_gives_back_the_first_call_only() -> None:
    """The legacy API never made parallel calls: a second call the model wrote is dropped."""
    text = "Let me look.\n" + CALL % "UTC" + "\n" + CALL % "CET"
    expected = {
        "content": "Let me look.",
        "function_call": {"name": "get_time", "arguments": json.dumps({"zone": "UTC"})},
        "names": ["get_time"],
        "finish_reason": "function_call",
    }
    _agree(FunctionCalls(AutoToolCalls(HermesParser())), text, "stop", expected)


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_a_reply_without_a_call_keeps_its_text_and_reason(reason: str) -> None:
    expected: dict[str, Any] = {
        "content": "No call.",
        "function_call": None,
        "names": [],
        "finish_reason": reason,
    }
    _agree(FunctionCalls(AutoToolCalls(HermesParser())), "No call.", reason, expected)


# A template that shows the calls and what each tool message answers (on SmolLM2's ChatML tokens).
TOOLS_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% for c in m.tool_calls or [] %}[call {{ c.id }} {{ c.function.name }}"
    " {{ c.function.arguments | tojson }}]{% endfor %}"
    "{% if m.tool_call_id %}[answers {{ m.tool_call_id }}] {% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tools_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> PromptTokenizer:
    source = resolve_model_path(None, models_dir())
    target = tmp_path_factory.mktemp("tools-template")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, target / name)
    (target / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    return PromptTokenizer(Path(target))


def test_function_results_reach_the_template_answering_their_calls(tools_tokenizer: PromptTokenizer) -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Time in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_time", "arguments": '{"zone": "CET"}'},
                },
                {"role": "function", "name": "get_time", "content": "12:00"},
            ],
            "functions": [{"name": "get_time"}],
        }
    )
    ids = tools_tokenizer.chat_prompt(template_messages(body.messages), body.template_options(None))
    prompt = tools_tokenizer.decode(ids, skip_special_tokens=False)
    assert prompt == (
        "<|im_start|>user\nTime in Oslo?<|im_end|>\n"
        '<|im_start|>assistant\n[call call_function_1 get_time {"zone": "CET"}]<|im_end|>\n'
        "<|im_start|>tool\n[answers call_function_1] 12:00<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
