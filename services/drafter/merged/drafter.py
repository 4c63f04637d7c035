"""Several drafters as one: each proposes its tree, and the request gets their merged tree.

The first drafter leads: its feature ring is the one the verifier publishes to, and where the merged
tree holds only its nodes, its draft probabilities go with the tree (shared/drafting/tree_merge.py).
Every drafter hears every request's lifecycle. A drafter that fails (raises) is left out of that call,
with a warning once, while the others go on: it costs its share of the speed-up, not the others'.
EAGLE with n-gram matches (`--speculative-eagle-ngram`) is built this way: the head predicts
open-ended text, the n-gram matches catch what the output copies from its context (extraction,
translation of names and numbers, summaries), which a small head misses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.drafting.tree_merge import merge_trees
from treespec.shared.warn_once import WarnOnce

log = logging.getLogger(__name__)


class MergedDrafter(Drafter):
    def __init__(self, drafters: Sequence[Drafter]) -> None:
        if not drafters:
            raise ValueError("a merged drafter needs at least one drafter")
        self.drafters = list(drafters)
        self._warn_once = WarnOnce(log)

    @property
    def lead(self) -> Drafter:
        return self.drafters[0]

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.lead.feature_ring

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self._each("open", lambda d: d.open(request_id, prompt, trace_context, cache_salt))

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self._each("commit", lambda d: d.commit(request_id, tokens, features))

    def close(self, request_id: str) -> None:
        self._each("close", lambda d: d.close(request_id))

    def shutdown(self) -> None:
        self._each("shutdown", lambda d: d.shutdown())

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        proposals = [self._propose(drafter, queries) for drafter in self.drafters]
        merged: list[TokenTree | None] = []
        for q, trees in zip(queries, zip(*proposals, strict=True), strict=True):
            drafted = [t for t in trees if t is not None]
            if len(drafted) <= 1:
                merged.append(drafted[0] if drafted else None)
            else:
                merged.append(merge_trees(drafted, q.budget))
        return merged

    def _propose(self, drafter: Drafter, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        try:
            trees = drafter.propose(queries)
        except Exception as exc:  # one drafter's trouble costs its trees, not the others'
            self._failed(drafter, "propose", exc)
            return [None] * len(queries)
        if len(trees) != len(queries):
            self._failed(drafter, "propose", ValueError(f"{len(trees)} trees for {len(queries)} queries"))
            return [None] * len(queries)
        return trees

    def _each(self, what: str, call: Callable[[Drafter], None]) -> None:
        for drafter in self.drafters:
            try:
                call(drafter)
            except Exception as exc:  # the other drafters still hear of it
                self._failed(drafter, what, exc)

    def _failed(self, drafter: Drafter, what: str, exc: Exception) -> None:
        name = type(drafter).__name__
        self._warn_once(f"{name}.{what}", f"{name}.{what} failed, the other drafters go on: {exc!r}")
