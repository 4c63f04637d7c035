"""tool_choice "auto": a reply's content and calls from the parser's pieces, whole and streamed alike,
the whitespace next to calls, the calls' indexes and the finish reason."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.auto_tool_calls import AutoToolCalls
from treespec.gateway.tool_parsers.hermes import HermesParser

CALL = '<tool_call>{"name": "get_time", "arguments": {"zone": "%s"}}</tool_call>'


def _streamed(text: str, reason: str, rng: random.Random) -> tuple[str | None, list[dict[str, Any]], str]:
    """A streamed choice's content, calls and finish reason, as a client reassembles them."""
    stream = AutoToolCalls(HermesParser()).stream()
    deltas = [stream.text(3, piece) for piece in random_pieces(text, rng, longest=5)]
    last, finish = stream.end(3, reason)
    deltas.append(last)
    content = "".join(d.get("content", "") for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    return content, calls, finish


@pytest.mark.parametrize(
    ("text", "content", "zones"),
    [
        ("Plain text,\n with its spaces  \n", "Plain text,\n with its spaces  \n", []),
        (CALL % "UTC", None, ["UTC"]),
        ("Let me look.\n" + CALL % "UTC" + "\n", "Let me look.", ["UTC"]),
        ("\n" + CALL % "UTC" + "\n\n" + CALL % "CET" + "\n", None, ["UTC", "CET"]),
        ("First. " + CALL % "UTC" + "\n then more.  ", "First.then more.  ", ["UTC"]),
        ("<tool_call>{broken}</tool_call>", "<tool_call>{broken}</tool_call>", []),
    ],
)
def test_whole_and_streamed_replies_agree(text: str, content: str | None, zones: list[str]) -> None:
    whole = AutoToolCalls(HermesParser()).reply(text, "stop")
    assert whole.content == content
    assert [json.loads(c.arguments)["zone"] for c in whole.calls] == zones
    assert all(c.name == "get_time" and c.id.startswith("call_") for c in whole.calls)
    assert whole.finish_reason == ("tool_calls" if zones else "stop")
    for seed in range(25):
        streamed_content, calls, finish = _streamed(text, "stop", random.Random(seed))
        assert streamed_content == (content or "")
        assert [c["index"] for c in calls] == list(range(len(zones)))
        assert [json.loads(c["function"]["arguments"])["zone"] for c in calls] == zones
        assert all(c["type"] == "function" and c["function"]["name"] == "get_time" for c in calls)
        assert finish == whole.finish_reason


def test_a_reply_cut_by_the_limit_keeps_its_reason() -> None:
    reply = AutoToolCalls(HermesParser()).reply(CALL % "UTC" + " and <tool_call>{", "length")
    assert reply.finish_reason == "length" and len(reply.calls) == 1
    assert reply.content == "and <tool_call>{"


def test_a_call_goes_out_whole_as_soon_as_it_closes() -> None:
    stream = AutoToolCalls(HermesParser()).stream()
    assert stream.text(0, "Hi <tool_") == {"content": "Hi"}
    assert stream.text(0, 'call>{"name": "f", "arguments": {}}') == {}
    delta = stream.text(0, "</tool_call>")
    (call,) = delta["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "f", "arguments": "{}"}
    assert "content" not in delta  # the space before the call went with it
    assert stream.end(0, "stop") == ({}, "tool_calls")
    assert stream.end(1, "stop") == ({}, "stop")  # a choice that wrote nothing
