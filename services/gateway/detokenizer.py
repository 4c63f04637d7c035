"""Incremental detokenization: the text each new token adds, never a partial UTF-8 character.

A thin layer over `tokenizers`' DecodeStream, which holds back byte-level pieces until they form
whole characters. It starts from the prompt's last tokens so that the first generated token
decodes as it would in context (SentencePiece decoders strip a leading space at the start).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

PREFIX_TOKENS = 4


class IncrementalDetokenizer:
    def __init__(
        self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (), *, skip_special_tokens: bool = True
    ) -> None:
        self._tokenizer = tokenizer
        self._stream = DecodeStream(
            ids=list(prompt_ids[-PREFIX_TOKENS:]), skip_special_tokens=skip_special_tokens
        )

    def step(self, token_id: int) -> str:
        """The text `token_id` completes ("" while a character is still incomplete)."""
        return self._stream.step(self._tokenizer, token_id) or ""
