"""A test drafter that hands every call to another one; tests override the calls they watch or change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree


class PassThroughDrafter(Drafter):
    def __init__(self, inner: Drafter) -> None:
        self.inner = inner

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self.inner.open(request_id, prompt, trace_context, cache_salt)

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self.inner.commit(request_id, tokens, features)

    def close(self, request_id: str) -> None:
        self.inner.close(request_id)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        return self.inner.propose(queries)

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.inner.feature_ring

    def shutdown(self) -> None:
        self.inner.shutdown()
