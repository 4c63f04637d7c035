"""Text cut into random pieces, as a stream would deliver it, for tests of incremental readers."""

from __future__ import annotations

import random


def random_pieces(text: str, rng: random.Random, longest: int = 7) -> list[str]:
    """`text` in consecutive pieces of 1 to `longest` characters."""
    pieces: list[str] = []
    position = 0
    while position < len(text):
        size = rng.randint(1, longest)
        pieces.append(text[position : position + size])
        position += size
    return pieces
