"""vLLM's bad_words as token sequences with the bundled SmolLM2 tokenizer (bad_words.py): a word as
written and after a space, where that spelling is another token sequence of the same length."""

from __future__ import annotations

import pytest

from treespec.gateway.bad_words import bad_word_sequences
from treespec.gateway.errors import APIError
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.rpc.limits import MAX_BAD_WORD_TOKENS


def _ids(tokenizer: PromptTokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.text_prompt(text, add_special_tokens=False))


def test_a_word_is_banned_as_written_and_after_a_space(prompt_tokenizer: PromptTokenizer) -> None:
    bare, spaced = _ids(prompt_tokenizer, "hello"), _ids(prompt_tokenizer, " hello")
    assert len(bare) == len(spaced) == 1 and bare != spaced
    assert bad_word_sequences(prompt_tokenizer, ["hello"]) == (bare, spaced)
    assert bad_word_sequences(prompt_tokenizer, ["  hello"]) == (bare, spaced)  # leading spaces stripped


def test_a_spelling_of_another_length_is_left_out(prompt_tokenizer: PromptTokenizer) -> None:
    word = next(
        w
        for w in ("Xylophonist", "qwertyuiop", "Zyzzyva", "ßtraße")
        if len(_ids(prompt_tokenizer, w)) != len(_ids(prompt_tokenizer, " " + w))
    )
    assert bad_word_sequences(prompt_tokenizer, [word]) == (_ids(prompt_tokenizer, word),)


def test_a_word_of_too_many_tokens_is_a_400(prompt_tokenizer: PromptTokenizer) -> None:
    with pytest.raises(APIError) as caught:
        bad_word_sequences(prompt_tokenizer, ["a b", "x " * MAX_BAD_WORD_TOKENS])
    assert (caught.value.status, caught.value.param) == (400, "bad_words")
