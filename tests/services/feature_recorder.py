"""A test plugin that reads the target's features as EAGLE does, and records them by position.

It drafts the oracle's trees (so that verification accepts several nodes per step and the published
rows come from tree paths, not only plain decode steps) and, at each commit, copies the rows its
ring holds for the new positions. In process its ring comes from LocalTargetAccess; behind a drafter
server started with --colocate, from the verifier's shared memory. Options are JSON-able so that
`treespec drafter --option` can pass them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureRing, FeatureSlots, FeatureSpec
from treespec.shared.drafting.target_access import TargetAccess
from treespec.shared.drafting.token_tree import TokenTree

KIND = "tests.services.feature_recorder:FeatureRecordingDrafter"
Rows = dict[int, torch.Tensor]  # history position -> feature row [width]


class FeatureRecordingDrafter(Drafter):
    def __init__(
        self,
        target: TargetAccess,
        vocab_size: int,
        continuations: Sequence[tuple[Sequence[int], Sequence[int]]] = (),
        capacity: int = 512,
        aux_layer_ids: Sequence[int] = (),
        error_rate: float = 0.3,
        record_dir: str | None = None,
    ) -> None:
        hidden = target.tensors().hidden_size
        self.ring = target.feature_ring(FeatureSpec(hidden, tuple(aux_layer_ids)), capacity)
        known = {tuple(prompt): list(output) for prompt, output in continuations}
        self.oracle = OracleDrafter(known, vocab_size, error_rate=error_rate)
        self.record_dir = Path(record_dir) if record_dir else None
        self.rows: dict[str, Rows] = {}  # open requests
        self.finished: dict[str, Rows] = {}  # closed ones, by the id the verifier gave them

    @classmethod
    def create(cls, context: DrafterContext) -> FeatureRecordingDrafter:
        if context.target is None:
            raise ValueError("the feature recorder reads the target: run it in process or co-located")
        return cls(context.target, context.vocab_size, **context.options)

    @property
    def feature_ring(self) -> FeatureRing | None:
        return self.ring

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self.rows[request_id] = {}
        self.oracle.open(request_id, prompt, trace_context, cache_salt)

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self.oracle.commit(request_id, tokens)
        if features is not None and request_id in self.rows:
            for i, row in enumerate(self.ring.read(features.slots)):
                self.rows[request_id][features.start + i] = row

    def close(self, request_id: str) -> None:
        self.oracle.close(request_id)
        rows = self.rows.pop(request_id, None)
        if rows is None:
            return
        name = request_id.split("/", 1)[-1]  # behind the server: "<stream>/<request id>"
        self.finished[name] = rows
        if self.record_dir is not None:
            torch.save(rows, self.record_dir / f"{name}.pt.tmp")
            (self.record_dir / f"{name}.pt.tmp").rename(self.record_dir / f"{name}.pt")

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        return self.oracle.propose(queries)
