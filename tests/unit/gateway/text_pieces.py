"""Text cut into random pieces, as a stream would deliver it, for tests of incremental readers."""

from __future__ import annotations

import random

from treespec.gateway.tool_parsers.base import Piece, ToolCallParser


def random_pieces(text: str, rng: random.Random, longest: int = 7) -> list[str]:
    """`text` in consecutive pieces of 1 to `longest` characters."""
    pieces: list[str] = []
    position = 0
    while position < len(text):
        size = rng.randint(1, longest)
        pieces.append(text[position : position + size])
        position += size
    return pieces


def joined_texts(pieces: list[Piece]) -> list[Piece]:
    """Adjacent text pieces joined (a stream settles text in other splits than a whole reply)."""
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def streamed_pieces(parser: ToolCallParser, text: str, rng: random.Random) -> list[Piece]:
    """`parser`'s pieces of `text` fed to one reader in random small pieces."""
    reader = parser.reader()
    pieces = [piece for chunk in random_pieces(text, rng, longest=6) for piece in reader.feed(chunk)]
    return pieces + reader.finish()
