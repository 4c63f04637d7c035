"""What the engine loop reports as it runs: engine figures after each step, each finished request."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol

from treespec.verifier.engine import Engine
from treespec.verifier.request import RequestOutput
from treespec.verifier.stats import SpecStats
from treespec.verifier.step_timing import StepTimes


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's figures between two steps (taken on the engine thread, read anywhere)."""

    running_requests: int
    waiting_requests: int
    kv_blocks_total: int
    kv_blocks_free: int
    speculation: SpecStats  # a copy of the engine's totals
    last_step: StepTimes | None = None  # the step just run, None when it ran no batch
    prefix_cache_blocks: int = 0
    prefix_cache_query_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    # What the engine prices one more draft node and a tree at (verify_cost.py), for one request: what
    # drafters weigh their trees against; near 1 they draft next to nothing.
    node_cost: float = 0.0
    tree_cost: float = 0.0
    preemptions: int = 0  # since the start: requests whose K/V was dropped for lack of KV blocks

    @property
    def kv_blocks_used(self) -> int:
        return self.kv_blocks_total - self.kv_blocks_free

    @classmethod
    def of(cls, engine: Engine) -> EngineSnapshot:
        cost = engine.verify_cost
        return cls(
            running_requests=engine.num_running,
            waiting_requests=engine.num_waiting,
            kv_blocks_total=engine.config.num_blocks,
            kv_blocks_free=engine.num_free_blocks,
            speculation=copy.deepcopy(engine.stats),
            last_step=engine.last_step,
            **_prefix_cache_figures(engine),
            node_cost=cost.node_cost(1),
            tree_cost=cost.tree_cost(1),
            preemptions=engine.scheduler.num_preemptions,
        )


def _prefix_cache_figures(engine: Engine) -> dict[str, int]:
    cache = engine.prefix_cache
    if cache is None:
        return {}
    return {
        "prefix_cache_blocks": cache.num_cached_blocks,
        "prefix_cache_query_tokens": cache.query_tokens,
        "prefix_cache_hit_tokens": cache.hit_tokens,
    }


@dataclass(frozen=True)
class FinishedRequest:
    """A request's last output with its latencies (seconds; None where there is nothing to measure)."""

    output: RequestOutput
    num_output_tokens: int
    time_to_first_token_s: float | None
    time_per_output_token_s: float | None  # after the first token


class LoopObserver(Protocol):
    """Called on the engine thread: implementations must be quick and thread-safe."""

    def engine_stepped(self, snapshot: EngineSnapshot) -> None: ...

    def request_finished(self, record: FinishedRequest) -> None: ...
