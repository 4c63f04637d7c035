"""A chat choice's message from its text: reasoning split off, then tool calls read from the answer,
whole and streamed alike; plain text untouched without parsers. The reasoning given back as the
request asks (vLLM's include_reasoning, SGLang's separate_reasoning and stream_reasoning)."""

from __future__ import annotations

import json
import random
from typing import Any

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.auto_tool_calls import AutoToolCalls
from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.reasoning_parsers.think import DeepSeekR1Parser, Qwen3Parser
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.tool_parsers.hermes import HermesParser

MINIMAL: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "2 + 2?"}]}
CALL = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'


def _streamed(replies: ChatReplies, text: str, rng: random.Random) -> dict[str, Any]:
    """What a client reassembles from the deltas of one choice."""
    stream = replies.stream()
    deltas = [stream.text(0, piece) for piece in random_pieces(text, rng)]
    last, reason = stream.end(0, "stop")
    deltas.append(last)
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    return {
        "content": "".join(d.get("content", "") for d in deltas) or None,
        "reasoning": "".join(d.get("reasoning_content", "") for d in deltas) or None,
        "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in calls] or None,
        "finish_reason": reason,
    }


def _whole(replies: ChatReplies, text: str) -> dict[str, Any]:
    message = replies.message(text, "stop")
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.tool_calls or []]
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "calls": calls or None,
        "finish_reason": message.finish_reason,
    }


def _agree(replies: ChatReplies, text: str, expected: dict[str, Any]) -> None:
    assert _whole(replies, text) == expected
    for seed in range(20):
        assert _streamed(replies, text, random.Random(seed)) == expected


def test_plain_text_is_the_content() -> None:
    replies = ChatReplies()
    text = " <think>kept</think> as it is\n"
    expected = {"content": text, "reasoning": None, "calls": None, "finish_reason": "stop"}
    _agree(replies, text, expected)
    assert replies.message("", "length").content == ""


def test_reasoning_then_an_answer() -> None:
    text = "<think>\nLet me see.\n</think>\n\nIt is 4."
    expected = {"content": "It is 4.", "reasoning": "\nLet me see.\n", "calls": None, "finish_reason": "stop"}
    _agree(ChatReplies(Qwen3Parser()), text, expected)
    cut = {"content": None, "reasoning": "Still thinking", "calls": None, "finish_reason": "stop"}
    _agree(ChatReplies(DeepSeekR1Parser()), "Still thinking", cut)


def test_calls_are_read_from_the_answer_alone() -> None:
    replies = ChatReplies(Qwen3Parser(), AutoToolCalls(HermesParser()))
    text = f"<think>I could write {CALL} here</think>\nCalling.\n{CALL}"
    expected = {
        "content": "Calling.",
        "reasoning": f"I could write {CALL} here",
        "calls": [("f", json.dumps({"x": 1}))],
        "finish_reason": "tool_calls",
    }
    _agree(replies, text, expected)
    only_call = {**expected, "content": None, "reasoning": "r"}
    _agree(replies, f"<think>r</think>{CALL}", only_call)


def _reasoning_deltas(replies: ChatReplies, text: str, rng: random.Random) -> list[tuple[str, str]]:
    """The streamed deltas that carry anything, as (kind, text) in order."""
    stream = replies.stream()
    deltas = [stream.text(0, piece) for piece in random_pieces(text, rng)] + [stream.end(0, "stop")[0]]
    return [(kind, d[kind]) for d in deltas for kind in ("reasoning_content", "content") if d.get(kind)]


def test_include_reasoning_false_leaves_the_reasoning_out() -> None:
    """vLLM's include_reasoning: the answer alone, whole and streamed."""
    request = ChatCompletionRequest.model_validate({**MINIMAL, "include_reasoning": False})
    replies = ChatReplies(request.reply_parser(Qwen3Parser()), None, request.reasoning_reply)
    text = "<think>\nLet me see.\n</think>\n\nIt is 4."
    _agree(replies, text, {"content": "It is 4.", "reasoning": None, "calls": None, "finish_reason": "stop"})
    assert replies.message("<think>cut short", "length").content == ""


def test_stream_reasoning_false_sends_the_reasoning_once_it_has_ended() -> None:
    """SGLang's stream_reasoning: the reasoning in one delta before the answer's first, or at the end
    of a choice cut short in it; the reply whole is the same as with it streamed."""
    request = ChatCompletionRequest.model_validate({**MINIMAL, "stream_reasoning": False})
    held = ChatReplies(Qwen3Parser(), None, request.reasoning_reply)
    text = "<think>\nLet me see, step by step.\n</think>\n\nIt is 4, surely."
    expected = {
        "content": "It is 4, surely.",
        "reasoning": "\nLet me see, step by step.\n",
        "calls": None,
        "finish_reason": "stop",
    }
    _agree(held, text, expected)
    streamed_at_once = 0
    for seed in range(20):
        deltas = _reasoning_deltas(held, text, random.Random(seed))
        assert deltas[0] == ("reasoning_content", expected["reasoning"])
        assert all(kind == "content" for kind, _ in deltas[1:])
        streamed_at_once += len(_reasoning_deltas(ChatReplies(Qwen3Parser()), text, random.Random(seed))) > 3
    assert streamed_at_once  # by default the same pieces stream the reasoning as it comes
    cut = _reasoning_deltas(held, "<think>Still thinking about it", random.Random(0))
    assert cut == [("reasoning_content", "Still thinking about it")]


def test_separate_reasoning_false_leaves_the_reasoning_in_the_content() -> None:
    """SGLang's separate_reasoning: no parser reads the reply; the text is the content, markers and all."""
    request = ChatCompletionRequest.model_validate({**MINIMAL, "separate_reasoning": False})
    assert request.reply_parser(Qwen3Parser()) is None
    replies = ChatReplies(request.reply_parser(Qwen3Parser()), None, request.reasoning_reply)
    text = "<think>\nLet me see.\n</think>\n\nIt is 4."
    _agree(replies, text, {"content": text, "reasoning": None, "calls": None, "finish_reason": "stop"})
    default = ChatCompletionRequest.model_validate({**MINIMAL, "separate_reasoning": None})
    assert isinstance(default.reply_parser(Qwen3Parser()), Qwen3Parser)
