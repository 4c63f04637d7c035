"""The speculation gate: drafting left out in a batch regime where its steps run slower than the plain
steps they stand for, kept where it pays (bursty gains included), tried again after doubling waits, a
verdict ending with its requests; vLLM's disable_by_batch_size."""

from __future__ import annotations

import random
from collections.abc import Callable

from treespec.verifier.speculation_gate import FIRST_WAIT, MAX_WAIT, MIN_STEPS, GatePolicy, SpeculationGate

Step = Callable[[], tuple[int, float, float]]  # one drafting step: (tokens, seconds, plain seconds)


def batch(size: int, first: int = 0) -> list[str]:
    return [f"r{i}" for i in range(first, first + size)]


def run(gate: SpeculationGate, steps: int, step: Step, batch_size: int = 8, first: int = 0) -> list[bool]:
    """`steps` engine steps of one batch: whether each asked the drafter (and was observed)."""
    asked = []
    for _ in range(steps):
        drafts = gate.drafts(batch(batch_size, first))
        if drafts:
            gate.observe(batch_size, *step())
        asked.append(drafts)
    return asked


def steady(speed: float, batch_size: int = 8) -> Step:
    """Drafting steps that commit a token a request at `speed` times their plain step's rate."""
    return lambda: (batch_size, 1.0 / speed, 1.0)


def test_drafting_that_pays_is_never_left_out() -> None:
    gate = SpeculationGate()
    assert all(run(gate, 2000, lambda: (16, 1.2, 1.0)))  # two tokens a request, 20% dearer steps
    assert all(run(gate, 2000, steady(0.99)))  # within the margin
    assert gate.left_out_steps == 0


def test_drafting_slower_than_plain_is_left_out_with_doubling_waits() -> None:
    gate = SpeculationGate()
    asked = run(gate, 4000, steady(0.8))
    assert asked[: MIN_STEPS + FIRST_WAIT + 1] == [True] * MIN_STEPS + [False] * FIRST_WAIT + [True]
    tries, waits = _runs(asked, True), _runs(asked, False)
    # Every try after the first is MIN_STEPS counted steps after an uncounted one (a deferred
    # catch-up's); every wait doubles, up to MAX_WAIT.
    assert len(tries) > 8 and tries[1:-1] == [MIN_STEPS + 1] * len(tries[1:-1])
    assert waits[:4] == [FIRST_WAIT, 2 * FIRST_WAIT, 4 * FIRST_WAIT, 8 * FIRST_WAIT]
    assert max(waits) == MAX_WAIT
    assert asked.count(True) / len(asked) < 0.1
    assert gate.left_out_steps == asked.count(False)


def test_the_first_step_after_a_wait_is_not_counted() -> None:
    gate = SpeculationGate()
    run(gate, MIN_STEPS + FIRST_WAIT, steady(0.5))
    assert run(gate, 1, lambda: (8, 100.0, 1.0)) == [True]  # the deferred catch-up: a hundred times dearer
    assert all(run(gate, 3 * MIN_STEPS, steady(1.0)))


def test_a_noisy_but_paying_drafter_is_kept() -> None:
    """A single request's gains in bursts: 1 token a step (its step 10% dearer than plain) for
    stretches of 10-60 steps, then 2-6 a step for 5-40; the step times noisy."""
    rng = random.Random(7)
    stretch = {"left": 0, "good": False}

    def step() -> tuple[int, float, float]:
        if stretch["left"] == 0:
            stretch["good"] = not stretch["good"]
            stretch["left"] = rng.randint(5, 40) if stretch["good"] else rng.randint(10, 60)
        stretch["left"] -= 1
        tokens = rng.randint(2, 6) if stretch["good"] else 1
        return tokens, 1.1 * rng.uniform(0.9, 1.1), 1.0

    gate = SpeculationGate()
    asked = run(gate, 3000, step, batch_size=1)
    assert asked.count(False) < 0.05 * len(asked)


def test_a_try_that_pays_after_a_wait_keeps_drafting() -> None:
    gate = SpeculationGate()
    run(gate, 200, steady(0.7))  # left out, waits growing
    asked = run(gate, 2000, steady(1.6))  # the text became predictable
    assert all(asked[-1700:])


def test_a_verdict_covers_its_batch_regime() -> None:
    """Requests finishing move a batch of 6 to 5, 4, ...: within the regime 4-7 a verdict drawn at
    one size holds for the others."""
    gate = SpeculationGate()
    run(gate, MIN_STEPS + 1, steady(0.7, batch_size=6), batch_size=6)
    assert gate.leaves_out(6) and gate.leaves_out(4) and gate.leaves_out(7)
    assert not gate.leaves_out(8) and not gate.leaves_out(3)
    assert not gate.drafts(batch(5))


def test_a_verdict_ends_with_the_requests_it_was_drawn_from() -> None:
    """At batch size 1 the next request drafts at once; in a batch, once every request of the step
    that left drafting out has gone (a request of the old batch still in it keeps the wait)."""
    gate = SpeculationGate()
    run(gate, MIN_STEPS + 1, steady(0.7, batch_size=1), batch_size=1)
    assert gate.leaves_out(1)
    # The next request's try: its first step uncounted, then MIN_STEPS judged; it fails, and the wait
    # after it is the doubled one (the doubling goes on across requests while tries fail).
    asked = run(gate, 1 + MIN_STEPS + 2 * FIRST_WAIT, steady(0.7, batch_size=1), batch_size=1, first=1)
    assert asked == [True] * (1 + MIN_STEPS) + [False] * 2 * FIRST_WAIT
    run(gate, MIN_STEPS + 1, steady(0.7))
    assert gate.leaves_out(8)
    assert not gate.drafts(batch(8, first=7))  # r7 stays
    assert gate.drafts(batch(8, first=8))
    assert not gate.leaves_out(8)


def test_a_new_batch_is_judged_on_its_own_steps() -> None:
    """At batch size 1, a request's steps never count toward the verdict on the next one: after a
    request whose drafting ran slow for fewer steps than a verdict needs, the next one drafts its
    first step uncounted and MIN_STEPS of its own before any verdict; so does a batch that turned
    over whole."""
    gate = SpeculationGate()
    run(gate, MIN_STEPS - 1, steady(0.5, batch_size=1), batch_size=1)
    asked = run(gate, 1 + MIN_STEPS + 4, steady(1.0, batch_size=1), batch_size=1, first=1)
    assert all(asked) and gate.left_out_steps == 0
    run(gate, MIN_STEPS - 1, steady(0.5))
    assert all(run(gate, 1 + MIN_STEPS + 4, steady(1.0), first=8))
    # Within a batch that keeps some of its requests the average goes on: slow steps before a
    # request joins (the first of a new batch uncounted) count toward the verdict that follows.
    run(gate, MIN_STEPS, steady(0.5), first=16)
    assert not gate.leaves_out(8)
    assert run(gate, 1, steady(0.5), first=17) == [True]
    assert gate.leaves_out(8)


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
        assert gate.drafts(batch(2))
        gate.observe(2, 0, 1.0, 1.0)  # nothing committed (every request finished by a stop rule)
        gate.observe(2, 2, 0.0, 1.0)
        gate.observe(2, 2, 1.0, -0.5)  # a plain estimate past the step's own time
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
