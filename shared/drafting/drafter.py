"""The drafter plugin interface: propose a token tree per request, hear about commits."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treespec.shared.drafting.features import FeatureRing, FeatureSlots
from treespec.shared.drafting.target_access import TargetAccess
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget


@dataclass(frozen=True)
class DraftQuery:
    """One request of the batch that wants a tree this step; its root is its last committed token."""

    request_id: str
    budget: TreeBudget


@dataclass(frozen=True)
class DrafterContext:
    """What a drafter built by name (CLI, drafter server) learns about the target."""

    vocab_size: int
    target_path: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # The target's tensors and feature ring, for drafters that read them (EAGLE); None where the
    # host has no such access (a drafter server that is not co-located).
    target: TargetAccess | None = None


def salt_argument(cache_salt: str) -> tuple[str, ...]:
    """`open`'s cache_salt argument, passed only when there is a salt: a plugin written before the
    parameter existed keeps drafting for unsalted requests, and fails to open a salted one (which is
    then decoded plainly) rather than mixing its text with other requests' unawares."""
    return (cache_salt,) if cache_salt else ()


class Drafter(ABC):
    """A drafting method. The verifier calls it once per engine step with the whole batch.

    Lifecycle per request: `open` with the prompt, `commit` with every run of tokens the verifier
    commits (the first one is the token sampled after the prompt), `close` when the request ends.
    The history a drafter sees is therefore prompt + committed tokens, and the root of the tree it
    proposes is the last of them. Implementations must tolerate `close` for an unknown request.
    """

    @classmethod
    def create(cls, context: DrafterContext) -> Drafter:
        """Build from a context; plugins that need more than the defaults override this."""
        return cls(**context.options)

    @abstractmethod
    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        """Start tracking a request. `trace_context`: the request's W3C trace context (traceparent ...),
        for drafters that record spans of their own. `cache_salt` (vLLM's; passed only when the
        request has one, see `salt_argument`): a drafter that learns from other requests' text must
        keep a salted request's text apart, for requests of the same salt only, and draft for it from
        nothing else."""

    @abstractmethod
    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        """`tokens` were committed. `features` (only for a drafter with a `feature_ring`): where the
        target's features of the positions new since the last commit lie in that ring."""

    @abstractmethod
    def close(self, request_id: str) -> None: ...

    @abstractmethod
    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        """One tree (or None: no proposal, plain decoding) per query, in order."""

    @property
    def feature_ring(self) -> FeatureRing | None:
        """Where the verifier publishes the target's features for this drafter (None: it reads none).
        Read every step: a co-located drafter's ring appears once its process has connected."""
        return None

    def shutdown(self) -> None:  # noqa: B027 (a hook: most drafters hold nothing to release)
        """Release background resources (threads, connections) when the host stops."""
