"""Granite's and Phi-4-mini's tool calls: a JSON list of calls as the whole output, after the
format's tag (optional for Granite, required for Phi-4-mini); anything else is text, whole or
streamed in any split."""

from __future__ import annotations

import json
import random

import pytest

from tests.unit.gateway.text_pieces import joined_texts, streamed_pieces
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallParser
from treespec.gateway.tool_parsers.granite import GraniteParser
from treespec.gateway.tool_parsers.phi4_mini import Phi4MiniJsonParser

CALLS = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}}]'
PARSED = [ParsedCall("get_weather", json.dumps({"city": "Paris"})), ParsedCall("now", "{}")]


def _pieces(parser: ToolCallParser, text: str) -> list[list[Piece]]:
    """The reply read whole, then streamed in twenty random splits (adjacent texts joined)."""
    outs = [parser.parse(text)] + [streamed_pieces(parser, text, random.Random(seed)) for seed in range(20)]
    return [joined_texts(out) for out in outs]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("<|tool_call|>" + CALLS, PARSED),  # Granite 3.0: its special token
        ("<tool_call>" + CALLS, PARSED),  # Granite 3.1: the tag as text
        ("  " + CALLS + "\n", PARSED),  # no tag
        # One call not in a list: text, as vLLM reads it (Granite writes lists).
        ('<tool_call>{"name": "now", "arguments": {}}', ['<tool_call>{"name": "now", "arguments": {}}']),
        ("It is sunny in Paris.", ["It is sunny in Paris."]),
        ("[1, 2, 3]", ["[1, 2, 3]"]),  # a list, but not of calls: text
        ("<tool_call>" + CALLS + " done", ["<tool_call>" + CALLS + " done"]),  # more than calls
        ("<tool_call>[{", ["<tool_call>[{"]),  # cut short
    ],
)
def test_granite_reads_an_output_made_of_calls(text: str, pieces: list[Piece]) -> None:
    assert all(out == pieces for out in _pieces(GraniteParser(), text))


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("functools" + CALLS, PARSED),
        (" functools" + CALLS + "\n", PARSED),
        (CALLS, [CALLS]),  # without its tag: text
        ("functions are fun", ["functions are fun"]),  # starts like the tag, is not it
        ("functools[not json]", ["functools[not json]"]),
    ],
)
def test_phi4_mini_reads_calls_after_functools_only(text: str, pieces: list[Piece]) -> None:
    assert all(out == pieces for out in _pieces(Phi4MiniJsonParser(), text))


def test_text_streams_as_soon_as_it_cannot_be_calls() -> None:
    reader = Phi4MiniJsonParser().reader()
    assert reader.feed("func") == []  # may still open `functools`
    assert reader.feed("tion") == ["function"]
    granite = GraniteParser().reader()
    assert granite.feed("<tool") == [] and granite.feed("_call>[") == []
    assert granite.feed('{"name": "now"}]') == [] and granite.finish() == [ParsedCall("now", "{}")]
