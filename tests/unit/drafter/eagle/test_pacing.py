"""Pacing: a request whose drafts do not pay is left out of drafting for growing waits and probed
again; one whose drafts pay is never left out; after a wait the head catches up over the waiting
features and drafts the tree it would have drafted without the wait."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.engine_runs import EAGLE, grown_request, make_drafter
from treespec.shared.drafting.draft_pacing import MAX_WAIT, MIN_STEPS, DraftPacing
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.model.causal_lm import CausalLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TREE = TokenTree(torch.tensor([1, 2, 3, 4]), torch.tensor([-1, 0, 0, 1]))  # root 1: 2 and 3, 4 under 2
COST = (0.2, 0.0, 0.05)  # head passes, tree, per node: 0.35 for TREE


def _step(pacing: DraftPacing, committed: list[int]) -> bool:
    """One engine step: whether it drafted, and the commit that follows."""
    drafts = pacing.drafts_now()
    if drafts:
        pacing.drafted(TREE, *COST)
    pacing.committed(committed)
    return drafts


def test_the_gain_is_how_far_the_committed_tokens_follow_the_tree() -> None:
    pacing = DraftPacing()
    pacing.drafted(TREE, *COST)
    pacing.committed([2, 4, 9])  # two drafted tokens, then the bonus
    assert pacing.gain == 2 and pacing.cost == pytest.approx(0.35)
    pacing.drafted(TREE, *COST)
    pacing.committed([4])  # 4 is no child of the root
    assert pacing.gain == pytest.approx(2 - 0.1 * 2)
    pacing.committed([2])  # no proposal before it: nothing learnt
    assert pacing.steps == 2


def test_a_request_whose_drafts_fail_waits_longer_and_longer() -> None:
    pacing = DraftPacing()
    drafted = [_step(pacing, [9]) for _ in range(200)]
    assert all(drafted[:MIN_STEPS])
    assert not all(drafted)
    gaps, run = [], 0
    for d in drafted[MIN_STEPS:]:
        if d:
            gaps.append(run)
            run = 0
        else:
            run += 1
    waits = [g for g in gaps if g]
    assert waits[:5] == [1, 2, 4, 8, 16] and set(waits[5:]) == {MAX_WAIT}


def test_a_probe_that_pays_ends_the_waits() -> None:
    pacing = DraftPacing()
    while _step(pacing, [9]):
        pass
    while not pacing.drafts_now():
        pass
    pacing.drafted(TREE, *COST)
    pacing.committed([2, 4, 7])
    assert pacing.gain == 2 and pacing.wait == 0
    assert all(_step(pacing, [3, 7]) for _ in range(20))  # one token a step pays for 0.35


def test_free_drafts_are_never_held_back() -> None:
    """No costs (SGLang's fixed trees: level and node costs 0): drafting never loses, however it fares."""
    pacing = DraftPacing()
    for _ in range(50):
        assert pacing.drafts_now()
        pacing.drafted(TREE, 0.0, 0.0, 0.0)
        pacing.committed([9])
    assert pacing.steps == 50 and pacing.gain == 0.0


def test_after_a_wait_the_head_drafts_as_if_it_had_not_waited(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    trees = []
    for wait in (0, 3):
        drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path)
        grown_request(drafter, tiny_path, tiny_model)
        budget = TreeBudget(EAGLE.num_draft_tokens, EAGLE.num_steps, EAGLE.eagle_topk)
        query = DraftQuery("r", budget)
        state = drafter._requests["r"]
        state.pacing.wait = wait
        for _ in range(wait):
            assert drafter.propose([query]) == [None]  # left out: no head pass at all
        assert state.pending  # the features wait for the next catch-up
        (tree,) = drafter.propose([query])
        assert tree is not None
        trees.append((tree.tokens.tolist(), tree.parents.tolist()))
    assert trees[0] == trees[1]
