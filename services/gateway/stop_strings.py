"""Stop strings over streamed text: cut at the first stop string, hold back what could start one.

Text that might be the beginning of a stop string is held until the next piece decides it, so
that nothing of a stop string is ever sent, even when it is split across tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopCheck:
    text: str  # safe to send now
    stopped: bool  # a stop string was found: `text` ends right before it (or with it), generation is over
    matched: str | None = None  # the stop string found


class StopStringMatcher:
    def __init__(self, stops: Sequence[str], include_stop: bool = False) -> None:
        """`include_stop`: the text sent ends with the stop string found (vLLM's
        include_stop_str_in_output), not right before it."""
        self._stops = tuple(s for s in stops if s)
        self._include_stop = include_stop
        self._held = ""
        self.stopped = False

    def push(self, text: str, armed: bool = True) -> StopCheck:
        """Add the next piece of text; return what may be sent. Not `armed` (before `min_tokens`),
        nothing stops and nothing is held back."""
        if self.stopped:
            return StopCheck("", True)
        buffer = self._held + text
        if not armed:
            self._held = ""
            return StopCheck(buffer, False)
        found = self._first_stop(buffer)
        if found is not None:
            cut, stop = found
            self._held, self.stopped = "", True
            return StopCheck(buffer[: cut + len(stop)] if self._include_stop else buffer[:cut], True, stop)
        keep = self._partial_stop_length(buffer)
        self._held = buffer[len(buffer) - keep :]
        return StopCheck(buffer[: len(buffer) - keep], False)

    def flush(self) -> str:
        """The text held back, at the end of generation (it turned out not to be a stop string)."""
        held, self._held = self._held, ""
        return held

    def _first_stop(self, buffer: str) -> tuple[int, str] | None:
        """Where the earliest stop string starts, and which (the first listed, where several do)."""
        found = [(i, stop) for stop in self._stops if (i := buffer.find(stop)) >= 0]
        return min(found, key=lambda hit: hit[0]) if found else None

    def _partial_stop_length(self, buffer: str) -> int:
        """Length of the longest end of `buffer` that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest
