"""Tokens and seconds per method and category, summed so that rates are total tokens / total time."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    verify_steps: int = 0
    committed: int = 0  # tokens committed in verify steps (acceptance length numerator)
    draft_seconds: float = 0.0  # of `seconds`, spent asking the drafter for trees
    first_token_seconds: float = 0.0  # of `seconds`, until the first token (the prefill, mostly)
    drafted: int = 0  # draft nodes verified
    gated_steps: int = 0  # of the engine's steps, those the speculation gate left plain

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def accept_len(self) -> float:
        return self.committed / self.verify_steps if self.verify_steps else 0.0

    @property
    def nodes_per_step(self) -> float:
        """Draft nodes verified per verify step."""
        return self.drafted / self.verify_steps if self.verify_steps else 0.0

    @property
    def gated_share(self) -> float:
        """The share of verify steps the speculation gate left plain (batch size 1: one step each)."""
        return self.gated_steps / self.verify_steps if self.verify_steps else 0.0

    @property
    def draft_ms_per_step(self) -> float:
        return 1e3 * self.draft_seconds / self.verify_steps if self.verify_steps else 0.0

    @property
    def draft_share(self) -> float:
        """The share of the time spent drafting."""
        return self.draft_seconds / self.seconds if self.seconds else 0.0

    @property
    def first_token_share(self) -> float:
        """The share of the time spent until each request's first token: what drafting cannot speed up."""
        return self.first_token_seconds / self.seconds if self.seconds else 0.0

    def add(
        self,
        tokens: int,
        seconds: float,
        verify_steps: int = 0,
        committed: int = 0,
        draft_seconds: float = 0.0,
        first_token_seconds: float = 0.0,
        drafted: int = 0,
        gated_steps: int = 0,
    ) -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.verify_steps += verify_steps
        self.committed += committed
        self.draft_seconds += draft_seconds
        self.first_token_seconds += first_token_seconds
        self.drafted += drafted
        self.gated_steps += gated_steps

    def since(self, earlier: Tally) -> Tally:
        """What was added after `earlier`, a copy of this tally taken before."""
        return Tally(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


@dataclass
class Throughput:
    """method -> category -> Tally, plus the overall tally per method."""

    by_category: dict[str, dict[str, Tally]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Tally))
    )
    overall: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))

    def add(
        self,
        method: str,
        category: str,
        tokens: int,
        seconds: float,
        steps: int = 0,
        committed: int = 0,
        draft_seconds: float = 0.0,
        first_token_seconds: float = 0.0,
        drafted: int = 0,
        gated_steps: int = 0,
    ) -> None:
        figures = (
            tokens,
            seconds,
            steps,
            committed,
            draft_seconds,
            first_token_seconds,
            drafted,
            gated_steps,
        )
        self.by_category[method][category].add(*figures)
        self.overall[method].add(*figures)

    def categories(self) -> list[str]:
        return sorted({c for per in self.by_category.values() for c in per})
