"""One token's text and exact bytes, as OpenAI's logprobs report them.

A token may hold part of a character (byte-level BPE splits emoji and CJK into byte tokens), so
its bytes are read from the vocabulary itself: ByteLevel tokenizers (GPT-2, Llama 3, SmolLM) map
each byte to a printable character, SentencePiece ones write a space as U+2581 and spell bytes as
<0xNN>. The text is those bytes decoded, with U+FFFD for a partial character.
"""

from __future__ import annotations

import functools
import re

from tokenizers import Tokenizer, decoders

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPIECE_SPACE = "\u2581"


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, inverted."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenTexts:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
        self._bytes: dict[int, bytes] = {}

    def bytes_of(self, token_id: int) -> bytes:
        cached = self._bytes.get(token_id)
        if cached is None:
            cached = self._bytes[token_id] = self._read(token_id)
        return cached

    def text_of(self, token_id: int) -> str:
        return self.bytes_of(token_id).decode("utf-8", errors="replace")

    def _read(self, token_id: int) -> bytes:
        piece = self._tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if self._byte_level:
            table = _byte_of_char()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        byte = _BYTE_TOKEN.match(piece)
        if byte is not None:
            return bytes([int(byte.group(1), 16)])
        if not self._byte_level and _SPIECE_SPACE in piece:
            return piece.replace(_SPIECE_SPACE, " ").encode("utf-8")
        return self._tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")
