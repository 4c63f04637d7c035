"""A chat choice's message from its text: reasoning split off, then tool calls read from the answer,
whole and streamed alike; plain text untouched without parsers."""

from __future__ import annotations

import json
import random
from typing import Any

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.auto_tool_calls import AutoToolCalls
from treespec.gateway.chat_reply import ChatReplies
from treespec.gateway.reasoning_parsers.think import DeepSeekR1Parser, Qwen3Parser
from treespec.gateway.tool_parsers.hermes import HermesParser

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
