"""Preemptions are counted and told: the scheduler's total, a warning for the first and every 50th (as
vLLM logs them), and the verifier's Prometheus counter `treespec_verifier_preemptions_total`."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from treespec.shared.model.kv_cache import BlockAllocator
from treespec.verifier.request import GenerationRequest, SpeculationParams
from treespec.verifier.scheduler import PREEMPTION_LOG_EVERY, Scheduler
from treespec.verifier.server.metrics import VerifierMetrics
from treespec.verifier.server.observer import EngineSnapshot
from treespec.verifier.state import Phase, RequestState
from treespec.verifier.stats import SpecStats

BS = 4
PLAIN = SpeculationParams(enabled=False)


def _decoding(scheduler: Scheduler, name: str, arrival: int) -> RequestState:
    """A running request past its prompt: 8 tokens with K/V, one pending, two full blocks."""
    state = RequestState(GenerationRequest(name, [1] * 6), PLAIN, arrival, [1] * 9, generator=None)
    state.kv_len = 8
    state.blocks = scheduler.allocator.allocate(2)
    state.phase = Phase.RUNNING
    scheduler.running.append(state)
    return state


def _preempt_once(scheduler: Scheduler, round_: int) -> RequestState:
    """Two decodes each need a third block and one is free: the later one is preempted."""
    first = _decoding(scheduler, f"first-{round_}", 2 * round_)
    second = _decoding(scheduler, f"second-{round_}", 2 * round_ + 1)
    batch = scheduler.schedule()
    assert batch.preempted == [second]
    scheduler.remove(first)
    scheduler.remove(second)
    return second


def test_preemptions_are_counted_and_the_first_and_every_50th_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = Scheduler(BlockAllocator(5), BS, max_running=2, chunk_tokens=64)
    with caplog.at_level(logging.WARNING, logger="treespec.verifier.scheduler"):
        victims = [_preempt_once(scheduler, i) for i in range(PREEMPTION_LOG_EVERY + 1)]
    assert scheduler.num_preemptions == PREEMPTION_LOG_EVERY + 1
    assert all(v.num_preemptions == 1 for v in victims)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # the 1st and the 51st
    assert "request second-0 preempted" in warnings[0] and "1 preemptions so far" in warnings[0]
    assert f"request second-{PREEMPTION_LOG_EVERY} preempted" in warnings[1]
    assert f"{PREEMPTION_LOG_EVERY + 1} preemptions so far" in warnings[1]
    assert "5 in all" in warnings[0] and "--max-total-tokens" in warnings[0]
    assert scheduler.allocator.num_free == 5  # nothing leaked on the way


def _snapshot(preemptions: int) -> EngineSnapshot:
    return EngineSnapshot(
        running_requests=0,
        waiting_requests=0,
        kv_blocks_total=8,
        kv_blocks_free=8,
        speculation=SpecStats(),
        preemptions=preemptions,
    )


def test_the_metric_follows_the_engines_total() -> None:
    metrics = VerifierMetrics(CollectorRegistry())
    name = "treespec_verifier_preemptions_total"
    for total in (0, 2, 2, 5):
        metrics.engine_stepped(_snapshot(total))
        assert metrics.registry.get_sample_value(name) == total
