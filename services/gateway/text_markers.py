"""Markers in generated text (`<tool_call>`, `</think>`...): what to hold back while a stream may still
be writing one."""

from __future__ import annotations


def held_back(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the start of `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
