"""A draft token tree: what a drafter proposes and the verifier checks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeBudget:
    """SGLang's speculation limits: nodes (root included), depth below the root, children per node;
    and what verifying costs, as fractions of the request's share of a verify step (measured by the
    verifier; 0: free): one more node, and a tree at all on top of its nodes. Drafters weigh both
    against their nodes' chances of acceptance (see tree_value.py)."""

    num_draft_tokens: int = 8
    num_steps: int = 5
    topk: int = 4
    node_cost: float = 0.0
    tree_cost: float = 0.0

    def __post_init__(self) -> None:
        if self.num_draft_tokens < 1 or self.num_steps < 0 or self.topk < 1:
            raise ValueError(f"invalid speculation budget {self}")
        if not (math.isfinite(self.node_cost) and self.node_cost >= 0.0):
            raise ValueError(f"invalid node cost {self.node_cost} (need a finite value >= 0)")
        if not (math.isfinite(self.tree_cost) and self.tree_cost >= 0.0):
            raise ValueError(f"invalid tree cost {self.tree_cost} (need a finite value >= 0)")


@dataclass(frozen=True)
class TokenTree:
    """Node 0 is the root: the request's last token, whose K/V the verify forward computes.

    Parents come before children (parents[0] = -1, parents[i] < i). `probs`, when present, holds each
    node's draft probability among its siblings: per parent they sum to 1 and the drafter ordered the
    siblings as a draw without replacement from them (see kernels/acceptance.py). Without probs the
    draft is deterministic (point masses). `path_probs`, when present, holds the drafter's estimate
    that each node's whole path is accepted (the root's: 1; a child's never above its parent's): what
    trees from several drafters are merged by (tree_merge.py). It stays in the drafter's process.
    """

    tokens: torch.Tensor  # [n] long, CPU
    parents: torch.Tensor  # [n] long, CPU
    probs: torch.Tensor | None = None  # [n] float32, CPU
    path_probs: torch.Tensor | None = None  # [n] float32, CPU

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def chain(cls, tokens: list[int]) -> TokenTree:
        """A single path: root then each token as the child of the previous one."""
        n = len(tokens)
        return cls(torch.tensor(tokens, dtype=torch.long), torch.arange(-1, n - 1, dtype=torch.long))

    @classmethod
    def root_only(cls, token: int) -> TokenTree:
        return cls.chain([token])
