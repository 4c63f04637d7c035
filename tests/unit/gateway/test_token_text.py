"""A token's exact bytes and text, for ByteLevel (SmolLM2's) and SentencePiece-style vocabularies."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from treespec.gateway.token_text import TokenTexts


def test_byte_level_tokens_spell_the_text_byte_for_byte(tokenizer: Tokenizer) -> None:
    texts = TokenTexts(tokenizer)
    text = "Hello wörld 😀 日本\n\tend"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert b"".join(texts.bytes_of(i) for i in ids) == text.encode()
    assert texts.text_of(ids[0]) == "Hello"
    partial = [i for i in ids if texts.text_of(i) == "\ufffd"]
    assert partial  # the emoji's bytes are split: a lone piece reads as U+FFFD, its bytes stay exact


def test_sentencepiece_spaces_and_byte_fallback() -> None:
    vocab = {"<unk>": 0, "\u2581hello": 1, "<0x0A>": 2, "<0xE4>": 3, "world": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    texts = TokenTexts(tokenizer)
    assert texts.bytes_of(1) == b" hello"
    assert texts.bytes_of(2) == b"\n" and texts.bytes_of(3) == b"\xe4"
    assert texts.text_of(3) == "\ufffd" and texts.text_of(4) == "world"
    assert texts.bytes_of(99) == b""  # no such token
