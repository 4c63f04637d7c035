"""Tool-call parsers for tool_choice "auto": the calls each model format holds, the text around them,
markup that holds no well-formed call, and the same pieces however the text arrives."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.config import GatewayConfig
from treespec.gateway.text_markers import held_back
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallParser, call_from_json
from treespec.gateway.tool_parsers.hermes import HermesParser
from treespec.gateway.tool_parsers.llama3_json import Llama3JsonParser

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}'


def _call(name: str, **arguments: object) -> ParsedCall:
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Adjacent text pieces joined (a stream settles text in other splits than a whole reply)."""
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def _streamed(parser: ToolCallParser, text: str, rng: random.Random) -> list[Piece]:
    reader = parser.reader()
    pieces = [piece for chunk in random_pieces(text, rng, longest=6) for piece in reader.feed(chunk)]
    return pieces + reader.finish()


def test_the_registry_names_each_parser() -> None:
    assert {name: type(p()) for name, p in TOOL_CALL_PARSERS.items()} == {
        "hermes": HermesParser,
        "llama3_json": Llama3JsonParser,
    }


def test_a_call_is_a_name_and_an_arguments_object() -> None:
    assert call_from_json({"name": "f", "arguments": {"a": "é"}}) == ParsedCall("f", '{"a": "é"}')
    assert call_from_json({"name": "f", "parameters": {"a": 1}}) == _call("f", a=1)
    assert call_from_json({"name": "f"}) == ParsedCall("f", "{}")
    assert call_from_json({"name": "f", "arguments": '{"a": 1}'}) == _call("f", a=1)  # JSON text already
    not_a_call: object
    for not_a_call in ([], {"arguments": {}}, {"name": ""}, {"name": 3}, {"name": "f", "arguments": [1]}):
        assert call_from_json(not_a_call) is None
    assert call_from_json({"name": "f", "arguments": "{not json"}) is None


def test_held_back_is_what_could_still_open_the_marker() -> None:
    assert held_back("text <tool", "<tool_call>") == 5
    assert held_back("text <", "<tool_call>") == 1
    assert held_back("text", "<tool_call>") == 0
    assert held_back("<tool_call>", "<tool_call>") == 0  # a whole marker is not held back, it is found


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Just text.", ["Just text."]),
        (f"<tool_call>\n{WEATHER}\n</tool_call>", [_call("get_weather", city="Paris", unit="C")]),
        (
            f"Let me look.\n<tool_call>{WEATHER}</tool_call>\n<tool_call>"
            '{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>',
            [
                "Let me look.\n",
                _call("get_weather", city="Paris", unit="C"),
                "\n",
                _call("get_time", zone="UTC"),
            ],
        ),
        # Left open at the output's end: a whole JSON call still counts.
        (f"<tool_call>\n{WEATHER}\n", [_call("get_weather", city="Paris", unit="C")]),
        # Markup around what is not a call stays text.
        ("<tool_call>{not json}</tool_call> done", ["<tool_call>{not json}</tool_call> done"]),
        ('<tool_call>{"arguments": {}}</tool_call>', ['<tool_call>{"arguments": {}}</tool_call>']),
        (f"<tool_call>{WEATHER} and more", [f"<tool_call>{WEATHER} and more"]),
        ("a < b, <tool not a tag", ["a < b, <tool not a tag"]),
    ],
)
def test_hermes_reads_the_calls_between_its_tags(text: str, pieces: list[Piece]) -> None:
    parser = HermesParser()
    assert _merged(parser.parse(text)) == pieces
    for seed in range(20):
        assert _merged(_streamed(parser, text, random.Random(seed))) == pieces


def test_hermes_holds_back_only_what_may_open_a_call() -> None:
    reader = HermesParser().reader()
    assert reader.feed("Sure <tool") == ["Sure "]
    assert reader.feed("s are fun") == ["<tools are fun"]
    assert reader.feed(f" <tool_call>{WEATHER}") == [" "]  # the call is open: held until it closes
    assert reader.feed("</tool_call>!") == [_call("get_weather", city="Paris", unit="C"), "!"]
    assert reader.finish() == []


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Paris is sunny.", ["Paris is sunny."]),
        ('{"name": "get_time", "parameters": {"zone": "UTC"}}', [_call("get_time", zone="UTC")]),
        (
            '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1, 2]}}',
            [_call("a"), _call("b", x=[1, 2])],
        ),
        ('  {"name": "a", "parameters": {}}\n', [_call("a")]),
        # Starts like a call but is not one (or not only calls): text, whole.
        ('{"name": "a", "parameters": {}} and then', ['{"name": "a", "parameters": {}} and then']),
        ('{"answer": 42}', ['{"answer": 42}']),
        ('{"name": "a", "parameters": {', ['{"name": "a", "parameters": {']),
        ("I will write {braces} later", ["I will write {braces} later"]),
    ],
)
def test_llama3_json_reads_an_output_made_of_calls(text: str, pieces: list[Piece]) -> None:
    parser = Llama3JsonParser()
    assert _merged(parser.parse(text)) == pieces
    for seed in range(20):
        assert _merged(_streamed(parser, text, random.Random(seed))) == pieces


def test_llama3_json_streams_text_once_it_cannot_be_a_call() -> None:
    reader = Llama3JsonParser().reader()
    assert reader.feed("  ") == []
    assert reader.feed("It") == ["  It"]
    assert reader.feed(' is {"name": "a"}') == [' is {"name": "a"}']
    assert reader.finish() == []
    calls = Llama3JsonParser().reader()
    assert calls.feed("<|python") == [] and calls.feed('_tag|>{"name": "a"}') == []
    assert calls.finish() == [_call("a")]


def test_a_gateway_config_names_a_known_parser() -> None:
    assert GatewayConfig(("h:1",), Path("m"), tool_call_parser="hermes").tool_call_parser == "hermes"
    with pytest.raises(ValueError, match=r"unknown tool-call parser 'qwen'.*hermes, llama3_json"):
        GatewayConfig(("h:1",), Path("m"), tool_call_parser="qwen")
