"""Weighted candidate continuations from the request's own history and from the shared memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from treespec.drafter.ngram.history_index import LocalMatch
from treespec.drafter.ngram.memory import Continuation

MAX_WINDOW_BUCKET = 6
MEMORY_BUCKET_BASE = 10  # memory buckets are 10 + window: trusted separately from local matches


@dataclass(frozen=True)
class Candidate:
    """A run of tokens that may follow the request's last token. Longer matched windows weigh more."""

    tokens: tuple[int, ...]
    weight: float
    bucket: int  # what kind of match proposed it (see calibration.py)


def local_bucket(window: int) -> int:
    return min(window, MAX_WINDOW_BUCKET)


def memory_bucket(window: int) -> int:
    return MEMORY_BUCKET_BASE + min(window, MAX_WINDOW_BUCKET)


def from_local(matches: Sequence[LocalMatch]) -> list[Candidate]:
    """Earlier occurrences in the request; among equal windows the more recent weighs a little more."""
    return [
        Candidate(m.continuation, 1.0 + m.window + 0.01 / (i + 1), local_bucket(m.window))
        for i, m in enumerate(matches)
        if m.continuation
    ]


def from_memory(windows: Sequence[int], results: Sequence[Sequence[Continuation]]) -> list[Candidate]:
    """What followed each suffix window in other requests; weight: the window times the share of counts."""
    out: list[Candidate] = []
    for window, continuations in zip(windows, results, strict=True):
        total = sum(c.count for c in continuations)
        out.extend(
            Candidate(c.tokens, (1.0 + window) * c.count / total, memory_bucket(window))
            for c in continuations
            if c.tokens and c.count > 0
        )
    return out
