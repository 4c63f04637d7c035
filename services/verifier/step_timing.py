"""Where an engine step's wall time goes: drafting against the rest (forward, verify, commit).

Drafting is what speculation adds to a step: the drafter's proposal in process, or its round trip to a
drafter service. The engine keeps the last step's split (for the verifier's Prometheus histograms) and
running totals (for the benchmarks: drafting time per verify step and its share of the time).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTimes:
    """One engine step that ran a batch, in seconds."""

    step_s: float  # the whole step: draft, forward, verify, commit
    draft_s: float | None  # asking the drafter for trees; None without one, or when the gate left it out
    gated: bool = False  # the speculation gate left the drafter out of this step (speculation_gate.py)
    told_s: float = 0.0  # telling the drafter what was committed, and publishing its features

    @property
    def drafting_s(self) -> float:
        """All of the step's time spent on the drafter's behalf, which a plain step would not take."""
        return (self.draft_s or 0.0) + self.told_s


@dataclass
class StepTimings:
    """Totals over the steps that ran a batch."""

    steps: int = 0
    step_s: float = 0.0
    draft_s: float = 0.0  # over the steps with a drafter
    told_s: float = 0.0  # telling the drafter what was committed, over every step (gated ones too)
    gated_steps: int = 0  # steps the speculation gate ran without asking the drafter

    def add(self, times: StepTimes) -> None:
        self.steps += 1
        self.step_s += times.step_s
        self.draft_s += times.draft_s or 0.0
        self.told_s += times.told_s
        self.gated_steps += times.gated

    @property
    def drafting_s(self) -> float:
        """All the time spent on the drafter's behalf: asking it for trees and telling it commits."""
        return self.draft_s + self.told_s
