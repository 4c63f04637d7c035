"""Incremental detokenization with the bundled SmolLM2 tokenizer: never a broken character."""

from __future__ import annotations

from tokenizers import Tokenizer

from treespec.gateway.detokenizer import IncrementalDetokenizer
from treespec.gateway.stop_strings import StopStringMatcher

MULTIBYTE = "Grüße, 世界! 🎉🚀 naïve café"


def _pieces(tokenizer: Tokenizer, ids: list[int], prompt: list[int] | None = None) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, prompt or [])
    return [detokenizer.step(i) for i in ids]


def test_multibyte_characters_split_across_tokens_come_out_whole(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(MULTIBYTE, add_special_tokens=False).ids
    pieces = _pieces(tokenizer, ids)
    assert len(ids) > len(MULTIBYTE.split())  # the emoji and CJK take several byte tokens each
    assert "" in pieces  # some tokens completed no character
    assert "".join(pieces) == MULTIBYTE
    assert all("\ufffd" not in piece for piece in pieces)
    for piece in pieces:
        piece.encode("utf-8")  # each piece is valid text on its own


def test_an_unfinished_character_at_the_end_is_never_sent(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("ok 🎉", add_special_tokens=False).ids
    text = "".join(_pieces(tokenizer, ids[:-1]))  # the emoji's last byte never comes
    assert "\ufffd" not in text
    assert text.startswith("ok")


def test_special_tokens_are_skipped(tokenizer: Tokenizer) -> None:
    end = tokenizer.token_to_id("<|im_end|>")
    assert end is not None
    ids = [*tokenizer.encode("Hi there", add_special_tokens=False).ids, end]
    assert "".join(_pieces(tokenizer, ids)) == "Hi there"


def test_continues_the_prompt_without_repeating_it(tokenizer: Tokenizer) -> None:
    prompt = tokenizer.encode("The answer:", add_special_tokens=False).ids
    ids = tokenizer.encode(" forty-two", add_special_tokens=False).ids
    assert "".join(_pieces(tokenizer, ids, prompt)) == " forty-two"


def test_stop_string_inside_a_multibyte_run(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("Hello 世界 and more", add_special_tokens=False).ids
    detokenizer, stops = IncrementalDetokenizer(tokenizer), StopStringMatcher(["界"])
    sent = []
    for token in ids:
        check = stops.push(detokenizer.step(token))
        sent.append(check.text)
        if check.stopped:
            break
    assert "".join(sent) == "Hello 世"
