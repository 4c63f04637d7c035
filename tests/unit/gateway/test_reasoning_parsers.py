"""Reasoning parsers: the thinking split off the answer for each model's convention, a marker split
across pieces, an output cut short, and the same parts however the text arrives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.unit.gateway.text_pieces import random_pieces
from treespec.gateway.config import GatewayConfig
from treespec.gateway.reasoning_parsers import REASONING_PARSERS
from treespec.gateway.reasoning_parsers.base import Part, ReasoningParser
from treespec.gateway.reasoning_parsers.think import (
    DeepSeekR1Parser,
    DeepSeekV3Parser,
    Glm45Parser,
    GraniteParser,
    MistralParser,
    Qwen3Parser,
    Qwen3ThinkingParser,
)


def _split(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str]:
    reader = parser.reader()
    parts: list[Part] = []
    for piece in pieces:
        parts += reader.feed(piece)
    parts += reader.finish()
    assert all(p.text for p in parts)
    return "".join(p.text for p in parts if p.kind == "reasoning"), "".join(
        p.text for p in parts if p.kind == "content"
    )


CASES = [
    # (text, deepseek_r1's (reasoning, content), qwen3's)
    (
        "<think>\nTwo and two.\n</think>\n\nFour.",
        ("\nTwo and two.\n", "Four."),
        ("\nTwo and two.\n", "Four."),
    ),
    ("  <think>a</think>b  ", ("a", "b  "), ("a", "b  ")),
    (
        "Thinking in the prompt's <think>.</think> Answer",
        ("Thinking in the prompt's <think>.", "Answer"),
        None,
    ),
    ("No tags at all.", ("No tags at all.", ""), ("", "No tags at all.")),
    ("<think>cut short by the lim", ("cut short by the lim", ""), ("cut short by the lim", "")),
    ("<think></think>Straight away.", ("", "Straight away."), ("", "Straight away.")),
    ("<thin", ("<thin", ""), ("", "<thin")),
    ("", ("", ""), ("", "")),
]


@pytest.mark.parametrize(("text", "deepseek", "qwen3"), CASES)
def test_the_thinking_is_split_off_the_answer(
    text: str, deepseek: tuple[str, str], qwen3: tuple[str, str] | None
) -> None:
    qwen3 = qwen3 if qwen3 is not None else ("", text)
    readings = [(p(), deepseek) for p in (DeepSeekR1Parser, DeepSeekV3Parser, Qwen3ThinkingParser)]
    mistral = _as_mistral(text)  # the same outputs with Mistral's markers read alike by its parser
    for parser, said, expected in [
        *((p, text, e) for p, e in readings),
        (Qwen3Parser(), text, qwen3),
        (Glm45Parser(), text, qwen3),
        (MistralParser(), mistral, tuple(_as_mistral(part) for part in qwen3)),
    ]:
        assert _split(parser, [said]) == expected
        for seed in range(20):
            assert _split(parser, random_pieces(said, random.Random(seed))) == expected


def _as_mistral(text: str) -> str:
    return text.replace("<think>", "[THINK]").replace("</think>", "[/THINK]").replace("<thin", "[THIN")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Here is my thought process:\nTwo and two.\nHere is my response:\nFour.",
            ("\nTwo and two.\n", "Four."),
        ),
        ("Here's my thought process: a Here's my response: b", (" a ", "b")),
        ("Here is my thought process: a Here's my response: b", (" a ", "b")),  # mixed spellings
        ("Here is my thought process: cut short", (" cut short", "")),
        ("Four.", ("", "Four.")),  # thinking off: the answer at once
        ("Here is my answer: Four.", ("", "Here is my answer: Four.")),
        ("Here", ("", "Here")),
    ],
)
def test_granite_s_plain_text_markers(text: str, expected: tuple[str, str]) -> None:
    parser = GraniteParser()
    assert _split(parser, [text]) == expected
    for seed in range(20):
        assert _split(parser, random_pieces(text, random.Random(seed))) == expected
    assert all(marker.endswith(parser.end_marker) for marker in parser.end_markers)  # the grammar's
    assert parser.grammar_starts_after("<|start_of_role|>assistant<|end_of_role|>") == "my response:"


def test_mistral_s_markers_are_special_tokens_kept_in_the_text() -> None:
    assert MistralParser.keeps_special_tokens and not Qwen3Parser.keeps_special_tokens
    assert MistralParser().grammar_starts_after("[INST]Hi[/INST]") == "[/THINK]"
    # Qwen3's markers mean nothing to it: an answer that mentions them stays the answer.
    assert _split(MistralParser(), ["<think>x</think>y"]) == ("", "<think>x</think>y")


def test_a_marker_being_written_is_held_back() -> None:
    reader = Qwen3Parser().reader()
    assert reader.feed("<thi") == []
    assert reader.feed("nk>Hmm </th") == [Part("reasoning", "Hmm ")]
    assert reader.feed("ink>\n") == []  # the answer's leading whitespace goes
    assert reader.feed(" Yes") == [Part("content", "Yes")]
    assert reader.finish() == []


def test_the_registry_and_the_config_name_each_parser() -> None:
    assert {name: type(p()) for name, p in REASONING_PARSERS.items()} == {
        "deepseek_r1": DeepSeekR1Parser,
        "deepseek_v3": DeepSeekV3Parser,
        "qwen3": Qwen3Parser,
        "qwen3_thinking": Qwen3ThinkingParser,
        "glm45": Glm45Parser,
        "mistral": MistralParser,
        "granite": GraniteParser,
    }
    assert GatewayConfig(("h:1",), Path("m"), reasoning_parser="qwen3").reasoning_parser == "qwen3"
    with pytest.raises(ValueError, match=r"unknown reasoning parser 'o1' \(known: deepseek_r1, deepseek_v3"):
        GatewayConfig(("h:1",), Path("m"), reasoning_parser="o1")


def test_sglang_s_names_for_the_parsers_are_taken() -> None:
    """SGLang's spellings (deepseek-r1, qwen25, llama3, deepseekv3...) name the same parsers."""
    from treespec.shared.cli.main import build_parser

    def parsed(*flags: str) -> tuple[str | None, str | None]:
        ns = build_parser().parse_args(["gateway", "--verifier-address", "127.0.0.1:1", *flags])
        return ns.reasoning_parser, ns.tool_call_parser

    assert parsed("--reasoning-parser", "deepseek-r1", "--tool-call-parser", "qwen25") == (
        "deepseek_r1",
        "hermes",
    )
    assert parsed("--reasoning-parser", "qwen3-thinking", "--tool-call-parser", "llama3") == (
        "qwen3_thinking",
        "llama3_json",
    )
    assert parsed("--tool-call-parser", "deepseekv31") == (None, "deepseek_v31")
    assert parsed("--reasoning-parser", "glm45", "--tool-call-parser", "glm45") == ("glm45", "glm45")
    with pytest.raises(SystemExit):
        parsed("--tool-call-parser", "o1")


@pytest.mark.parametrize("parser", [DeepSeekR1Parser(), Qwen3Parser()])
def test_a_constrained_answer_starts_after_the_reasoning_unless_the_prompt_closed_it(
    parser: ReasoningParser,
) -> None:
    # DeepSeek-R1's template opens the thinking in the prompt; Qwen3's leaves it to the model.
    for thinking_prompt in ("<|Assistant|><think>\n", "<|im_start|>assistant\n"):
        assert parser.grammar_starts_after(thinking_prompt) == "</think>"
    # Qwen3 with enable_thinking false writes an empty thinking block into the prompt.
    assert parser.grammar_starts_after("<|im_start|>assistant\n<think>\n\n</think>\n\n") is None
