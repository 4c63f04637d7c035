"""The speculation gate: drafting left out at a batch size where it runs slower than plain decoding,
kept where it pays (bursty gains included), tried again after doubling waits; vLLM's
disable_by_batch_size."""

from __future__ import annotations

import random
from collections.abc import Callable

from treespec.verifier.speculation_gate import (
    FIRST_WAIT,
    MAX_WAIT,
    MIN_STEPS,
    OVERDUE,
    PLAIN_FIRST,
    GatePolicy,
    SpeculationGate,
)

Rates = Callable[[bool], tuple[int, float]]  # drafted -> (tokens, seconds) of one step


def run(gate: SpeculationGate, steps: int, rates: Rates, batch_size: int = 8) -> list[bool]:
    """`steps` engine steps at one batch size: whether each asked the drafter."""
    asked = []
    for _ in range(steps):
        drafts = gate.drafts(batch(batch_size))
        gate.observe(batch_size, drafts, *rates(drafts))
        asked.append(drafts)
    return asked


def batch(size: int, first: int = 0) -> list[str]:
    return [f"r{i}" for i in range(first, first + size)]


def steady(drafting_speed: float, batch_size: int = 8) -> Rates:
    """A batch's steps: plain ones commit `batch_size` tokens in 1 s; drafting ones commit as many
    (nothing gained) at `drafting_speed` times that rate (a drafter that costs, or one cheaper than
    plain decoding, to exercise the comparison)."""
    return lambda drafted: (batch_size, 1.0 / drafting_speed if drafted else 1.0)


def gaining(tokens_per_request: int, seconds: float, batch_size: int = 8) -> Rates:
    """Drafting steps commit `tokens_per_request` tokens per request in `seconds`; plain ones one in 1 s."""
    return lambda drafted: (batch_size * tokens_per_request, seconds) if drafted else (batch_size, 1.0)


def test_drafting_that_always_gains_is_never_left_out() -> None:
    """No step is idle, so no plain step costs a drafting step's gain; with no plain figures there is
    no verdict either, until OVERDUE drafting steps have gone by."""
    gate = SpeculationGate()
    asked = run(gate, OVERDUE + 100, gaining(2, 1.2))
    assert all(asked[:OVERDUE]) and asked[OVERDUE:].count(False) == 1
    assert all(asked[OVERDUE + 1 :])


def test_plain_figures_are_taken_after_idle_drafting_steps() -> None:
    gate = SpeculationGate()
    asked = run(gate, 2000, steady(1.5))
    # A plain step after each drafting step that gained nothing, until the plain figures are in; then
    # drafting throughout (above PLAIN_NEAR times plain: no refresh needed).
    assert asked[: 2 * PLAIN_FIRST] == [True, False] * PLAIN_FIRST
    assert all(asked[2 * PLAIN_FIRST :])
    assert gate.left_out_steps == PLAIN_FIRST


def test_near_plain_drafting_keeps_its_plain_figure_current() -> None:
    gate = SpeculationGate()
    asked = run(gate, 2000, steady(1.1))
    plain = asked.count(False)
    assert PLAIN_FIRST < plain < 2000 / 32  # a plain step now and then, and drafting kept
    assert asked[-100:].count(True) >= 98


def test_drafting_slower_than_plain_is_left_out_with_doubling_waits() -> None:
    gate = SpeculationGate()
    asked = run(gate, 4000, steady(0.8))
    # The plain figures between drafting steps, then MIN_STEPS drafting steps judged against them.
    figures = 2 * PLAIN_FIRST + MIN_STEPS
    assert asked[:figures] == [True, False] * PLAIN_FIRST + [True] * MIN_STEPS
    assert not any(asked[figures : figures + FIRST_WAIT]) and asked[figures + FIRST_WAIT]
    tries = _runs(asked[figures:], True)
    waits = _runs(asked[figures:], False)
    # Every try is MIN_STEPS counted steps after an uncounted first (a deferred catch-up's); every
    # wait doubles, up to MAX_WAIT.
    assert len(tries) > 8 and tries[:-1] == [MIN_STEPS + 1] * len(tries[:-1])
    assert waits[:4] == [FIRST_WAIT, 2 * FIRST_WAIT, 4 * FIRST_WAIT, 8 * FIRST_WAIT]
    assert max(waits) == MAX_WAIT
    assert asked.count(True) / len(asked) < 0.1


def test_bursty_gains_of_a_single_request_are_not_cut_short() -> None:
    """A request whose drafts are accepted in stretches: 1 token a step (drafting 10% dearer than
    plain) for most steps, then 2-6 a step: on average well ahead of plain, at times well behind."""
    rng = random.Random(7)
    stretch = {"left": 0, "good": False}

    def rates(drafted: bool) -> tuple[int, float]:
        if not drafted:
            return 1, rng.uniform(0.95, 1.05)
        if stretch["left"] == 0:
            stretch["good"] = not stretch["good"]
            stretch["left"] = rng.randint(5, 40) if stretch["good"] else rng.randint(10, 60)
        stretch["left"] -= 1
        tokens = rng.randint(2, 6) if stretch["good"] else 1
        return tokens, 1.1 * rng.uniform(0.95, 1.05)

    gate = SpeculationGate()
    asked = run(gate, 3000, rates, batch_size=1)
    assert asked.count(False) < 0.05 * len(asked)


def test_a_try_that_pays_after_a_wait_keeps_drafting() -> None:
    gate = SpeculationGate()
    run(gate, 200, steady(0.7))  # left out, waits growing
    asked = run(gate, 2000, steady(1.6))  # the text became predictable
    assert all(asked[-1500:])


def test_a_verdict_covers_its_batch_regime() -> None:
    """Requests finishing move a batch of 8 to 7, 6, ...: within the regime 4-7 a verdict drawn at one
    size holds for the others (each still takes its own plain figures first)."""
    gate = SpeculationGate()
    run(gate, 30, steady(0.7, batch_size=6), batch_size=6)
    assert gate.leaves_out(6) and gate.leaves_out(4) and gate.leaves_out(7)
    assert not gate.leaves_out(8) and not gate.leaves_out(3)
    assert not gate.drafts(batch(5))


def test_batch_sizes_are_judged_apart() -> None:
    gate = SpeculationGate()
    run(gate, 100, steady(0.7))
    assert gate.leaves_out(8)
    assert run(gate, 100, steady(1.5, batch_size=1), batch_size=1).count(False) == PLAIN_FIRST


def test_a_verdict_ends_with_the_requests_it_was_drawn_from() -> None:
    """At batch size 1 the next request drafts at once; in a batch, once every request of the step
    that left drafting out has gone (a request of the old batch still in it keeps the wait)."""
    gate = SpeculationGate()
    run(gate, 30, steady(0.7, batch_size=1), batch_size=1)
    assert gate.leaves_out(1)
    assert gate.drafts(["next"]) and not gate.leaves_out(1)
    # The next request's try: its first step uncounted, then MIN_STEPS judged; it fails, and the wait
    # after it is the doubled one (the doubling goes on across requests while tries fail).
    gate.observe(1, True, 1, 1 / 0.7)
    asked = []
    for _ in range(MIN_STEPS + 2 * FIRST_WAIT):
        drafts = gate.drafts(["next"])
        gate.observe(1, drafts, 1, 1 / 0.7 if drafts else 1.0)
        asked.append(drafts)
    assert asked == [True] * MIN_STEPS + [False] * 2 * FIRST_WAIT
    run(gate, 30, steady(0.7))
    assert gate.leaves_out(8)
    assert not gate.drafts(batch(8, first=7))  # r7 stays
    assert gate.drafts(batch(8, first=8))
    assert not gate.leaves_out(8)


def test_disable_by_batch_size_leaves_out_that_many_decodes_and_more() -> None:
    gate = SpeculationGate(GatePolicy(adaptive=False, disable_by_batch_size=4))
    assert all(gate.drafts(batch(b)) for b in (1, 2, 3))
    assert not any(gate.drafts(batch(b)) for b in (4, 5, 64))
    assert gate.left_out_steps == 3 and gate.leaves_out(4) and not gate.leaves_out(3)


def test_without_adaptation_every_step_drafts() -> None:
    gate = SpeculationGate(GatePolicy(adaptive=False))
    assert all(run(gate, 500, steady(0.5)))
    assert gate.left_out_steps == 0


def test_steps_without_figures_teach_nothing() -> None:
    gate = SpeculationGate()
    for _ in range(100):
        drafts = gate.drafts(batch(2))
        gate.observe(2, drafts, 0, 1.0)  # nothing committed (every request finished by a stop rule)
        gate.observe(2, drafts, 2, 0.0)
    assert gate.left_out_steps == 0


def _runs(flags: list[bool], value: bool) -> list[int]:
    """Lengths of the runs of `value` in `flags`, in order."""
    out, n = [], 0
    for f in flags:
        if f == value:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out + ([n] if n else [])
