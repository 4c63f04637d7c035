"""vLLM's priority scheduling policy in the scheduler: admission in order of priority then arrival,
decodes grown in that order, and the last in that order preempted when KV blocks run short; first
come, first served otherwise. (Through the engine: test_engine_priority.py.)"""

from __future__ import annotations

from treespec.shared.model.kv_cache import BlockAllocator
from treespec.verifier.request import GenerationRequest, SpeculationParams
from treespec.verifier.scheduler import Scheduler
from treespec.verifier.state import Phase, RequestState

BS = 4
PLAIN = SpeculationParams(enabled=False)


def _state(name: str, priority: int, arrival: int, prompt: int = 6) -> RequestState:
    request = GenerationRequest(name, [1] * prompt, priority=priority)
    return RequestState(request, PLAIN, arrival, [1] * prompt, generator=None)


def _decoding(scheduler: Scheduler, state: RequestState) -> RequestState:
    """A running request past its prompt: 8 tokens with K/V, one pending, two full blocks."""
    state.tokens = [1] * 9
    state.kv_len = 8
    state.blocks = scheduler.allocator.allocate(2)
    state.phase = Phase.RUNNING
    scheduler.running.append(state)
    return state


def _admitted(by_priority: bool) -> list[str]:
    scheduler = Scheduler(BlockAllocator(64), BS, max_running=1, chunk_tokens=64, by_priority=by_priority)
    for arrival, (name, priority) in enumerate([("a", 3), ("b", 0), ("c", 1), ("d", 0)]):
        scheduler.add(_state(name, priority if by_priority else 0, arrival))
    order = []
    while scheduler.waiting:
        (work,) = scheduler.schedule().prefills
        order.append(work.state.request_id)
        scheduler.remove(work.state)
    return order


def test_requests_are_admitted_by_priority_then_arrival() -> None:
    assert _admitted(by_priority=True) == ["b", "d", "c", "a"]
    assert _admitted(by_priority=False) == ["a", "b", "c", "d"]


def test_the_last_in_order_is_preempted_when_blocks_run_short() -> None:
    """Two decodes each need a third block and one is free: the first in order grows, the other is
    preempted. By priority the earlier, low-priority request goes; first come, first served the later."""
    for by_priority, preempted in ((True, "early-low"), (False, "late-high")):
        scheduler = Scheduler(BlockAllocator(5), BS, max_running=2, chunk_tokens=64, by_priority=by_priority)
        _decoding(scheduler, _state("early-low", 9 if by_priority else 0, 0))
        _decoding(scheduler, _state("late-high", 0, 1))
        batch = scheduler.schedule()
        assert [s.request_id for s in batch.preempted] == [preempted]
        assert [s.request_id for s in batch.decodes] == [
            s for s in ("early-low", "late-high") if s != preempted
        ]
        (waiting,) = scheduler.waiting
        assert waiting.request_id == preempted and waiting.phase is Phase.WAITING and waiting.kv_len == 0
