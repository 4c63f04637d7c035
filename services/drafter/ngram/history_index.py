"""Per-request n-gram index over prompt + committed output, updated incrementally on every commit.

For each window size w in [min, max] it maps every n-gram of length w to the positions right after
its latest occurrences (where a continuation starts). Appending a token costs one dictionary update
per window size; matching the current suffix costs one lookup per window size: no rescans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LocalMatch:
    window: int  # length of the suffix that matched (longer: more trustworthy)
    start: int  # position in the history where the continuation starts
    continuation: tuple[int, ...]


@dataclass
class RequestIndex:
    min_window: int
    max_window: int
    positions_per_ngram: int = 4  # latest occurrences kept per n-gram (bounded fan-out)
    tokens: list[int] = field(default_factory=list)
    _starts: dict[tuple[int, ...], list[int]] = field(default_factory=dict)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(int(token))
            self._index_suffixes_ending_at(len(self.tokens))

    def _index_suffixes_ending_at(self, end: int) -> None:
        history = self.tokens
        for w in range(self.min_window, min(self.max_window, end) + 1):
            starts = self._starts.setdefault(tuple(history[end - w : end]), [])
            starts.append(end)
            if len(starts) > self.positions_per_ngram:
                del starts[0]

    def matches(self, length: int, limit: int = 16) -> list[LocalMatch]:
        """Earlier occurrences of the current suffix, longest window first, then most recent first.

        Each earlier position appears once, under the longest window it matches. `length` caps each
        continuation; at most `limit` matches come back.
        """
        history, end = self.tokens, len(self.tokens)
        seen: set[int] = set()
        found: list[LocalMatch] = []
        for w in range(min(self.max_window, end), self.min_window - 1, -1):
            for start in reversed(self._starts.get(tuple(history[end - w :]), ())):
                if start >= end or start in seen:
                    continue  # the suffix itself, or already matched with a longer window
                seen.add(start)
                found.append(LocalMatch(w, start, tuple(history[start : start + length])))
                if len(found) >= limit:
                    return found
        return found
