"""The engine's configuration: one frozen dataclass, built from CLI flags at the edge."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from treespec.shared.model.loader import LoadOptions
from treespec.verifier.request import SpeculationParams

SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class EngineConfig:
    model_path: Path
    device: str = "cpu"
    dtype: str = "auto"
    page_size: int = 16  # tokens per KV block
    max_total_tokens: int = 32768  # KV pool capacity, in tokens
    max_running_requests: int = 64
    chunked_prefill_size: int = 512  # prompt tokens per engine step, over all requests
    context_length: int | None = None  # None: the model's max_position_embeddings
    speculative_algorithm: str | None = None  # a drafter registry name; None: plain decoding
    speculation: SpeculationParams = field(default_factory=SpeculationParams)
    torch_threads: int | None = None  # None: torch's default
    node_cost: float | None = None  # a draft node's verify cost for drafters; None: measured at start
    tree_cost: float = 0.0  # a tree's fixed verify cost, used with a configured node_cost only
    # Reuse the K/V of cached prompt prefixes (with an EAGLE drafter, their features too).
    prefix_caching: bool = True
    # On a CPU with the panel kernel: each weight in the narrowest form that holds it exactly (LoadOptions).
    exact_weight_forms: bool = True
    # vLLM's: "fcfs" (first come, first served) or "priority" (by each request's priority first).
    scheduling_policy: str = "fcfs"
    # The most rows (root included) a chain drafted from a request's predicted output verifies; 1:
    # requests' predictions are not drafted from (prediction.py).
    prediction_draft_tokens: int = 32
    # Leave the drafter out of steps where drafting runs slower than plain decoding at that batch size,
    # as measured (speculation_gate.py); never changes an output.
    adaptive_speculation: bool = True
    # vLLM's: steps of this many decoding requests or more never draft; None: no such limit.
    speculative_disable_by_batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"scheduling_policy must be one of {', '.join(SCHEDULING_POLICIES)}")
        if self.prediction_draft_tokens < 1:
            raise ValueError("prediction_draft_tokens must be >= 1")
        if self.speculative_disable_by_batch_size is not None and self.speculative_disable_by_batch_size < 1:
            raise ValueError("speculative_disable_by_batch_size must be >= 1")

    def load_options(self) -> LoadOptions:
        """How the target model loads for this engine."""
        return LoadOptions(self.device, self.dtype, exact_forms=self.exact_weight_forms)

    @property
    def max_tree_rows(self) -> int:
        """The most rows one request's decode step verifies: a tree of the speculation budget, or a
        chain from its predicted output."""
        return max(self.speculation.num_draft_tokens, self.prediction_draft_tokens)

    @property
    def num_blocks(self) -> int:
        return -(-self.max_total_tokens // self.page_size)
