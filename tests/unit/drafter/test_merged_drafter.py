"""The merged drafter: every drafter hears every request, trees merge per request, and a drafter that
fails costs only its own trees (the n-gram drafter here, with its in-process memory)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest

from treespec.drafter.merged.drafter import MergedDrafter
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget

VOCAB = 50
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]  # repeats: the n-gram drafter has matches
BUDGET = TreeBudget(num_draft_tokens=6, num_steps=5, topk=2)


class BrokenDrafter(Drafter):
    """A plugin with a bug: every call raises (what the merged drafter must survive)."""

    def __init__(self) -> None:
        self.calls = 0

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self._fail()

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self._fail()

    def close(self, request_id: str) -> None:
        self._fail()

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        self._fail()
        return []

    def _fail(self) -> None:
        self.calls += 1
        raise RuntimeError("broken plugin")


def ngram() -> NgramDrafter:
    return NgramDrafter.create(DrafterContext(VOCAB, None, {"min_path_prob": 0.0}))


def test_a_failing_drafter_costs_only_its_own_trees(caplog: pytest.LogCaptureFixture) -> None:
    alone, broken = ngram(), BrokenDrafter()
    merged = MergedDrafter([broken, ngram()])
    for d in (alone, merged):
        d.open("r", PROMPT)
        d.commit("r", [8])
    with caplog.at_level(logging.WARNING):
        (want,) = alone.propose([DraftQuery("r", BUDGET)])
        for _ in range(3):
            (got,) = merged.propose([DraftQuery("r", BUDGET)])
            assert got is not None and want is not None
            assert got.tokens.tolist() == want.tokens.tolist()
            assert got.parents.tolist() == want.parents.tolist()
    merged.close("r")
    merged.shutdown()
    assert broken.calls == 6  # open, commit, 3 proposals, close (shutdown: the base class's no-op)
    warnings = [r.getMessage() for r in caplog.records if "BrokenDrafter.propose failed" in r.getMessage()]
    assert len(warnings) == 1  # once, not every step


def test_each_drafter_hears_every_request_and_trees_merge() -> None:
    a, b = ngram(), ngram()
    merged = MergedDrafter([a, b])
    merged.open("r", PROMPT)
    merged.commit("r", [8])
    (tree,) = merged.propose([DraftQuery("r", BUDGET)])
    (own,) = a.propose([DraftQuery("r", BUDGET)])
    # Two equal drafters: the merge of their equal trees is that tree (with no draft probabilities).
    assert tree is not None and own is not None and tree.tokens.tolist() == own.tokens.tolist()
    assert tree.tokens.tolist()[:2] == [8, 9]  # the root, then what followed 8 each time
    merged.close("r")
    assert "r" not in a._requests and "r" not in b._requests


def test_a_merged_drafter_needs_a_drafter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MergedDrafter([])
