"""vLLM's `bad_words` as the token sequences the verifier bans (kernels/token_bans.py).

Each word is tokenized as written (its leading spaces stripped) and once more after a space, the way
it would appear inside a sentence, when that gives a different first token and as many tokens as the
first spelling: vLLM's rule, so a word is banned at the start of the output and after a space alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from treespec.gateway.errors import APIError
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.rpc.limits import MAX_BAD_WORD_TOKENS

TokenSequence = tuple[int, ...]


def bad_word_sequences(tokenizer: PromptTokenizer, words: Sequence[str]) -> tuple[TokenSequence, ...]:
    """The token sequences of `words`; a 400 naming `bad_words` for a word of too many tokens."""
    sequences: list[TokenSequence] = []
    for word in words:
        bare = tuple(tokenizer.text_prompt(word.lstrip(), add_special_tokens=False))
        spaced = tuple(tokenizer.text_prompt(" " + word.lstrip(), add_special_tokens=False))
        for sequence in (bare, spaced):
            if len(sequence) > MAX_BAD_WORD_TOKENS:
                raise APIError(
                    400,
                    f"bad_words: {word.strip()!r} makes {len(sequence)} tokens, more than the "
                    f"{MAX_BAD_WORD_TOKENS} a bad word may have",
                    code="invalid_value",
                    param="bad_words",
                )
        sequences.append(bare)
        if spaced[0] != bare[0] and len(spaced) == len(bare):
            sequences.append(spaced)
    return tuple(sequences)
