"""The n-gram drafter's settings: SGLang's `--speculative-ngram-*` names and defaults, plus the memory's."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from treespec.shared.drafting.options import config_from_options
from treespec.shared.drafting.token_tree import TreeBudget

MATCH_TYPES = ("BFS", "PROB")


@dataclass(frozen=True)
class NgramConfig:
    # SGLang's flags (without the `--speculative-ngram-` prefix) and defaults.
    min_match_window_size: int = 1
    max_match_window_size: int = 12
    min_bfs_breadth: int = 1
    max_bfs_breadth: int = 10
    match_type: str = "BFS"  # BFS: breadth shrinking with depth; PROB: the most frequent paths first
    branch_length: int = 18  # tokens remembered after each context
    capacity: int = 10_000_000  # contexts the shared memory keeps
    # treespec's own.
    redis_url: str | None = None  # None: an in-process memory (the embedded default)
    tenant: str = ""  # a separate memory per tenant within one model's namespace
    namespace: str | None = None  # default: derived from the model and its tokenizer
    ttl_s: float = 86_400.0  # forget contexts not seen for this long
    fanout: int = 8  # continuations kept per context
    learn_from_prompts: bool = False  # also record prompts' n-grams in the shared memory
    min_path_prob: float = 0.05  # leave out nodes whose estimated acceptance is lower (verify cost)
    redis_timeout_ms: float = 20.0  # a memory read waits at most this long, else drafts locally

    def __post_init__(self) -> None:
        if not 1 <= self.min_match_window_size <= self.max_match_window_size:
            raise ValueError("need 1 <= min_match_window_size <= max_match_window_size")
        if not 1 <= self.min_bfs_breadth <= self.max_bfs_breadth:
            raise ValueError("need 1 <= min_bfs_breadth <= max_bfs_breadth")
        if self.match_type.upper() not in MATCH_TYPES:
            raise ValueError(f"match_type must be one of {MATCH_TYPES}, got {self.match_type!r}")
        if self.branch_length < 1 or self.capacity < 1 or self.fanout < 1 or self.ttl_s <= 0:
            raise ValueError("branch_length, capacity, fanout and ttl_s must be positive")
        if not 0.0 <= self.min_path_prob < 1.0:
            raise ValueError("min_path_prob must lie in [0, 1)")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> NgramConfig:
        """From plugin options (`--option key=value`); unknown keys are an error, not ignored."""
        values = dict(options)
        if "match_type" in values:
            values["match_type"] = str(values["match_type"]).upper()
        return config_from_options(cls, values, "n-gram")

    def as_options(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v != getattr(NgramConfig, k)}

    def default_budget(self) -> TreeBudget:
        """SGLang's n-gram budget: num_draft_tokens defaults to the max match window; the depth may use
        the whole budget (a chain) and the breadth is the max BFS breadth."""
        nodes = self.max_match_window_size
        return TreeBudget(num_draft_tokens=nodes, num_steps=nodes - 1, topk=self.max_bfs_breadth)
