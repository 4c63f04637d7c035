"""Several drafters as one: each proposes its tree, and the request gets their merged tree.

The first drafter leads: its feature ring is the one the verifier publishes to, and where the merged
tree holds only its nodes, its draft probabilities go with the tree (shared/drafting/tree_merge.py).
Every drafter hears every request's lifecycle. EAGLE with n-gram matches (`--speculative-eagle-ngram`)
is built this way: the head predicts open-ended text, the n-gram matches catch what the output copies
from its context (extraction, translation of names and numbers, summaries), which a small head misses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.drafting.tree_merge import merge_trees


class MergedDrafter(Drafter):
    def __init__(self, drafters: Sequence[Drafter]) -> None:
        if not drafters:
            raise ValueError("a merged drafter needs at least one drafter")
        self.drafters = list(drafters)

    @property
    def lead(self) -> Drafter:
        return self.drafters[0]

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.lead.feature_ring

    def open(
        self, request_id: str, prompt: Sequence[int], trace_context: Mapping[str, str] | None = None
    ) -> None:
        for drafter in self.drafters:
            drafter.open(request_id, prompt, trace_context)

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        for drafter in self.drafters:
            drafter.commit(request_id, tokens, features)

    def close(self, request_id: str) -> None:
        for drafter in self.drafters:
            drafter.close(request_id)

    def shutdown(self) -> None:
        for drafter in self.drafters:
            drafter.shutdown()

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        proposals = [drafter.propose(queries) for drafter in self.drafters]
        merged: list[TokenTree | None] = []
        for q, trees in zip(queries, zip(*proposals, strict=True), strict=True):
            drafted = [t for t in trees if t is not None]
            if len(drafted) <= 1:
                merged.append(drafted[0] if drafted else None)
            else:
                merged.append(merge_trees(drafted, q.budget))
        return merged
