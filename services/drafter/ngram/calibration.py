"""How likely is a drafted node to be accepted? Learned online from what the verifier committed.

An n-gram match carries no probability of its own, yet each extra tree node costs verify work. The
drafter therefore estimates, per kind of node, P(node accepted | its parent accepted) from past
outcomes, and keeps only nodes whose path probability is worth their cost. Kinds: the source and
strength of the match that proposed the node, its depth and its rank among its siblings.

Estimates are Beta posteriors: a drafter-wide one learns from all traffic, and a per-request one
starts from the drafter-wide mean and adapts to the request (copying text vs. free writing). The
drafter-wide prior of a kind is the estimate of the same kind one level up (depth 1: a cold mean):
with one cold mean for all depths, a chain whose nodes were accepted 90% of the time down to depth 5
fell below the node cost at depth 6, which was then never drafted, so never learned. Kinds are
many, so a request sees few outcomes of each; what it tells early is how its matches fare against the
drafter-wide estimates as a whole. So a request's prior for every kind is the drafter-wide estimate
times the request's factor: its accepted nodes over the drafter-wide estimates' sum for them (with
pseudo-outcomes at a factor of 1). A request whose matches keep failing (free writing) soon drafts
less, one that copies its context soon trusts its matches more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

NodeKind = tuple[int, int, int, int]  # (match bucket, depth, sibling rank, agreement), each capped

MAX_DEPTH_BUCKET = 8
MAX_RANK_BUCKET = 2
AGREEMENT_BUCKETS = 3  # the share of the parent's candidate weight through the node, in thirds
PRIOR_MEAN = 0.4  # before any outcome: worth trying, not trusted
PRIOR_STRENGTH = 2.0  # pseudo-outcomes behind the drafter-wide prior
REQUEST_PRIOR_STRENGTH = 6.0  # pseudo-outcomes of the drafter-wide mean behind a request's estimate
REQUEST_FACTOR_STRENGTH = 3.0  # pseudo-outcomes, at the drafter-wide estimates, behind a request's factor
MAX_PRIOR = 0.95  # a request's scaled prior stays below certainty


def node_kind(bucket: int, depth: int, rank: int, share: float = 1.0) -> NodeKind:
    """`share`: the node's part of its parent's candidate weight (1: every candidate goes on this way)."""
    agreement = min(AGREEMENT_BUCKETS - 1, int(share * AGREEMENT_BUCKETS))
    return (bucket, min(depth, MAX_DEPTH_BUCKET), min(rank, MAX_RANK_BUCKET), agreement)


def _shallower(kind: NodeKind) -> NodeKind | None:
    """The same kind of node one level up; None at depth 1."""
    bucket, depth, rank, agreement = kind
    return (bucket, depth - 1, rank, agreement) if depth > 1 else None


@dataclass
class _Counts:
    accepted: float = 0.0
    trials: float = 0.0


@dataclass
class _Factor:
    """A request's accepted nodes against what the drafter-wide estimates expected of them."""

    accepted: float = 0.0
    expected: float = 0.0

    @property
    def value(self) -> float:
        return (self.accepted + REQUEST_FACTOR_STRENGTH) / (self.expected + REQUEST_FACTOR_STRENGTH)


@dataclass
class AcceptanceModel:
    """Outcome counts per node kind; `parent` (the drafter-wide model) supplies the prior mean."""

    parent: AcceptanceModel | None = None
    prior_strength: float = PRIOR_STRENGTH
    _counts: dict[NodeKind, _Counts] = field(default_factory=dict)
    _factor: _Factor = field(default_factory=_Factor)

    def child(self) -> AcceptanceModel:
        return AcceptanceModel(parent=self, prior_strength=REQUEST_PRIOR_STRENGTH)

    def probability(self, kind: NodeKind) -> float:
        prior = self._prior(kind)
        counts = self._counts.get(kind)
        if counts is None:
            return prior
        return (counts.accepted + prior * self.prior_strength) / (counts.trials + self.prior_strength)

    def observe(self, outcomes: Iterable[tuple[NodeKind, bool]]) -> None:
        """Each outcome: a node whose parent was accepted, and whether it was accepted itself."""
        for kind, accepted in outcomes:
            if self.parent is not None:
                self._factor.expected += self.parent.probability(kind)
                self._factor.accepted += float(accepted)
            for model in self._lineage():
                counts = model._counts.setdefault(kind, _Counts())
                counts.trials += 1
                counts.accepted += float(accepted)

    def _prior(self, kind: NodeKind) -> float:
        if self.parent is not None:
            return min(MAX_PRIOR, self.parent.probability(kind) * self._factor.value)
        shallower = _shallower(kind)
        return PRIOR_MEAN if shallower is None else self.probability(shallower)

    def _lineage(self) -> Iterable[AcceptanceModel]:
        model: AcceptanceModel | None = self
        while model is not None:
            yield model
            model = model.parent
