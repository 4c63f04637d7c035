"""Tool-call parsers for tool_choice "auto": the calls each model format holds, the text around them,
markup that holds no well-formed call, and the same pieces however the text arrives."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.unit.gateway.text_pieces import joined_texts, streamed_pieces
from treespec.gateway.config import GatewayConfig
from treespec.gateway.text_markers import held_back
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS
from treespec.gateway.tool_parsers.base import ParsedCall, Piece, ToolCallParser, call_from_json
from treespec.gateway.tool_parsers.deepseek import DeepSeekV3Parser, DeepSeekV31Parser
from treespec.gateway.tool_parsers.glm45 import Glm45Parser
from treespec.gateway.tool_parsers.granite import GraniteParser
from treespec.gateway.tool_parsers.hermes import HermesParser
from treespec.gateway.tool_parsers.kimi_k2 import KimiK2Parser
from treespec.gateway.tool_parsers.llama3_json import Llama3JsonParser
from treespec.gateway.tool_parsers.mistral import MistralParser
from treespec.gateway.tool_parsers.phi4_mini import Phi4MiniJsonParser
from treespec.gateway.tool_parsers.pythonic import PythonicParser
from treespec.gateway.tool_parsers.qwen3_coder import Qwen3CoderParser
from treespec.gateway.tool_schemas import ToolDef

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}'


def _call(name: str, **arguments: object) -> ParsedCall:
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def test_the_registry_names_each_parser() -> None:
    assert {name: type(p()) for name, p in TOOL_CALL_PARSERS.items()} == {
        "hermes": HermesParser,
        "llama3_json": Llama3JsonParser,
        "mistral": MistralParser,
        "pythonic": PythonicParser,
        "qwen3_coder": Qwen3CoderParser,
        "deepseek_v3": DeepSeekV3Parser,
        "deepseek_v31": DeepSeekV31Parser,
        "glm45": Glm45Parser,
        "kimi_k2": KimiK2Parser,
        "granite": GraniteParser,
        "phi4_mini_json": Phi4MiniJsonParser,
    }
    assert [n for n, p in TOOL_CALL_PARSERS.items() if p.keeps_special_tokens] == [
        "mistral",
        "deepseek_v3",
        "deepseek_v31",
        "kimi_k2",
    ]


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
    assert joined_texts(parser.parse(text)) == pieces
    for seed in range(20):
        assert joined_texts(streamed_pieces(parser, text, random.Random(seed))) == pieces


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
    assert joined_texts(parser.parse(text)) == pieces
    for seed in range(20):
        assert joined_texts(streamed_pieces(parser, text, random.Random(seed))) == pieces


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
    with pytest.raises(ValueError, match=r"unknown tool-call parser 'qwen'.*hermes, kimi_k2, llama3_json"):
        GatewayConfig(("h:1",), Path("m"), tool_call_parser="qwen")


def _reads_alike(parser: ToolCallParser, text: str, pieces: list[Piece]) -> None:
    """Whole, and streamed in random splits, the same pieces."""
    assert joined_texts(parser.parse(text)) == pieces
    for seed in range(20):
        assert joined_texts(streamed_pieces(parser, text, random.Random(seed))) == pieces


def _text(text: str) -> tuple[str, list[Piece]]:
    """A case whose output is no call: the text, whole."""
    return text, [text]


WEATHER_CALL = _call("get_weather", city="Paris", unit="C")
TIME_CALL = _call("get_time", zone="UTC")


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Just text [TOOL", ["Just text [TOOL"]),
        # Before tokenizer v11: a JSON list after the marker.
        (f"[TOOL_CALLS] [{WEATHER}]", [WEATHER_CALL]),
        (
            f'Looking.[TOOL_CALLS][{WEATHER}, {{"name": "get_time", "arguments": {{"zone": "UTC"}}}}]',
            ["Looking.", WEATHER_CALL, TIME_CALL],
        ),
        # From v11: name[ARGS]{...} per call, a [CALL_ID] allowed, or the arguments straight after.
        (
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "C"}[TOOL_CALLS]get_time{"zone": "UTC"}',
            [WEATHER_CALL, TIME_CALL],
        ),
        ('[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{"zone": "UTC"}', [TIME_CALL]),
        # Not calls: the marker and all after it stay text.
        ("[TOOL_CALLS] [{broken", ["[TOOL_CALLS] [{broken"]),
        ('[TOOL_CALLS]get time[ARGS]{"zone": "UTC"}', ['[TOOL_CALLS]get time[ARGS]{"zone": "UTC"}']),
        (
            '[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"} and more',
            ['[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"} and more'],
        ),
    ],
)
def test_mistral_reads_the_calls_after_its_marker(text: str, pieces: list[Piece]) -> None:
    _reads_alike(MistralParser(), text, pieces)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("The sky is blue.", ["The sky is blue."]),
        ('[get_weather(city="Paris", unit="C"), get_time(zone="UTC")]', [WEATHER_CALL, TIME_CALL]),
        (
            '  [f(x=[1, 2.5], y={"a": None}, z=True, w=(1, "b"))]\n',
            [_call("f", x=[1, 2.5], y={"a": None}, z=True, w=[1, "b"])],
        ),
        ("[ping()]", [_call("ping")]),
        # Not only literal keyword calls by name: text, whole, and never run.
        ("[f(1)]", ["[f(1)]"]),
        ('[os.system(cmd="ls")]', ['[os.system(cmd="ls")]']),
        ("[f(x=open('/etc/passwd'))]", ["[f(x=open('/etc/passwd'))]"]),
        ("[f(**kw)]", ["[f(**kw)]"]),
        ("[f(x={1, 2})]", ["[f(x={1, 2})]"]),
        ("[1, 2, 3]", ["[1, 2, 3]"]),
        ("[f(x=1)] and then", ["[f(x=1)] and then"]),
        ("[]", ["[]"]),
    ],
)
def test_pythonic_reads_an_output_made_of_calls(text: str, pieces: list[Piece]) -> None:
    _reads_alike(PythonicParser(), text, pieces)


BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("No tools needed.", ["No tools needed."]),
        # V3: function<sep>NAME, the arguments in a json fence.
        (
            f'Checking.{BEGIN}{CALL}function{SEP}get_weather\n```json\n{{"city": "Paris", "unit": "C"}}\n```'
            f'{CALL_END}{CALL}function{SEP}get_time\n```json\n{{"zone": "UTC"}}\n```{CALL_END}{END}',
            ["Checking.", WEATHER_CALL, TIME_CALL],
        ),
        # V3.1: NAME<sep>ARGUMENTS.
        (f'{BEGIN}{CALL}get_time{SEP}{{"zone": "UTC"}}{CALL_END}{END}', [TIME_CALL]),
        (f'{BEGIN}{CALL}get_time{SEP}{{"zone": "UTC"}}{CALL_END}', [TIME_CALL]),  # cut before the end
        (
            f"{BEGIN}{CALL}get_time{SEP}{{broken{CALL_END}{END}",
            [f"{BEGIN}{CALL}get_time{SEP}{{broken{CALL_END}{END}"],
        ),
        (
            f"{BEGIN}{CALL}get_time{SEP}{{}}{CALL_END}{END} then text",
            [f"{BEGIN}{CALL}get_time{SEP}{{}}{CALL_END}{END} then text"],
        ),
    ],
)
def test_deepseek_reads_both_its_formats(text: str, pieces: list[Piece]) -> None:
    for parser in (DeepSeekV3Parser(), DeepSeekV31Parser()):
        _reads_alike(parser, text, pieces)


def test_a_marked_tail_streams_the_text_before_its_marker() -> None:
    reader = MistralParser().reader()
    assert reader.feed("Let me check [TO") == ["Let me check "]
    assert reader.feed("OL_CALLS]get_time") == []  # the marker: held from here on
    assert reader.feed('[ARGS]{"zone": "UTC"}') == []
    assert reader.finish() == [TIME_CALL]


EDIT_TOOL = ToolDef.model_validate(
    {
        "type": "function",
        "function": {
            "name": "edit",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer"},
                    "scale": {"type": "number"},
                    "dry_run": {"type": "boolean"},
                    "options": {"type": "object"},
                    "lines": {"type": "array"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    }
)


def _xml(name: str, **values: str) -> str:
    parameters = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Plain answer.", ["Plain answer."]),
        # Each value read by its parameter's type in the tool's schema.
        (
            "I will edit it.\n"
            + _xml(
                "edit",
                path="007.py",
                line="12",
                scale="2.5",
                dry_run="True",
                options='{"a": 1}',
                lines="['x', 'y']",
                note="null",
            ),
            [
                "I will edit it.\n",
                _call(
                    "edit",
                    path="007.py",
                    line=12,
                    scale=2.5,
                    dry_run=True,
                    options={"a": 1},
                    lines=["x", "y"],
                    note=None,
                ),
            ],
        ),
        # What does not parse as its type stays text; untyped parameters are JSON where they are JSON.
        (_xml("edit", line="twelve", scale="nan"), [_call("edit", line="twelve", scale="nan")]),
        (_xml("other", count="42", word="hello"), [_call("other", count=42, word="hello")]),
        # Code keeps its lines, inner newlines included; two calls in a row.
        (
            _xml("edit", path="a.py", note="def f():\n    return 1") + "\n" + _xml("edit", path="b.py"),
            [_call("edit", path="a.py", note="def f():\n    return 1"), "\n", _call("edit", path="b.py")],
        ),
        # Left open at the output's end: a whole call still counts.
        ("<tool_call>\n<function=edit>\n<parameter=line>\n3\n</parameter>\n", [_call("edit", line=3)]),
        _text("<tool_call>no function here</tool_call>"),
        _text("<tool_call>\n<function=edit>\nstray text\n</function>\n</tool_call>"),
    ],
)
def test_qwen3_coder_reads_its_xml_calls_by_the_tools_schemas(text: str, pieces: list[Piece]) -> None:
    _reads_alike(Qwen3CoderParser([EDIT_TOOL]), text, pieces)


def _glm(name: str, **values: str) -> str:
    arguments = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in values.items())
    return f"<tool_call>{name}\n{arguments}</tool_call>"


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Plain answer.", ["Plain answer."]),
        (
            "Editing.\n" + _glm("edit", path="007.py", line="12", scale="1e3", lines='["x"]') + _glm("ping"),
            ["Editing.\n", _call("edit", path="007.py", line=12, scale=1000.0, lines=["x"]), _call("ping")],
        ),
        (_glm("edit", note="two\nlines", dry_run="false"), [_call("edit", note="two\nlines", dry_run=False)]),
        _text("<tool_call>edit\nstray text</tool_call>"),
        _text("<tool_call></tool_call>"),
    ],
)
def test_glm45_reads_its_argument_pairs_by_the_tools_schemas(text: str, pieces: list[Piece]) -> None:
    _reads_alike(Glm45Parser([EDIT_TOOL]), text, pieces)


SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
WEATHER_ARGS, TIME_ARGS = '{"city": "Paris", "unit": "C"}', '{"zone": "UTC"}'


def _kimi(index: int, name: str, arguments: str) -> str:
    head = f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>"
    return f"{head}{arguments}<|tool_call_end|>"


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("No call.", ["No call."]),
        (
            f"Checking.{SECTION}{_kimi(0, 'get_weather', WEATHER_ARGS)}{_kimi(1, 'get_time', TIME_ARGS)}"
            + SECTION_END,
            ["Checking.", WEATHER_CALL, TIME_CALL],
        ),
        (f"{SECTION}\n{_kimi(0, 'get_time', TIME_ARGS)}\n", [TIME_CALL]),  # the section left open
        _text(f"{SECTION}{_kimi(0, 'get_time', '{broken')}{SECTION_END}"),
        _text(f"{SECTION}{_kimi(0, 'get_time', '{}')}{SECTION_END} and more"),
        _text(f"{SECTION}nothing{SECTION_END}"),
    ],
)
def test_kimi_k2_reads_its_call_section(text: str, pieces: list[Piece]) -> None:
    _reads_alike(KimiK2Parser(), text, pieces)
