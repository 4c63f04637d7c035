"""The copy ceiling (bench/copy_ceiling.py): exact replays of crafted outputs, and the bound it is meant
to be: the n-gram drafter, replaying the same output, never needs fewer steps."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from treespec.bench.copy_ceiling import CopyCeiling, copy_ceiling
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget

VOCAB = 12


def test_a_copied_run_is_drafted_whole_in_one_step() -> None:
    # After the first output token (1), the prompt's 2 3 4 5 follows the earlier 1: one step drafts
    # all four and commits them with the token after (9).
    assert copy_ceiling([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 9], 1, 8) == CopyCeiling(1, 4, 1)


def test_the_depth_caps_each_step() -> None:
    # Depth 2: 2 3 drafted (4 committed after them), then 5 after the earlier 4, then 9 after it.
    ceiling = copy_ceiling([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 9], 1, 2)
    assert ceiling == CopyCeiling(steps=2, drafted=3, trees=2)
    assert ceiling.committed == 5  # every token after the first


def test_a_longer_match_window_finds_less() -> None:
    prompt, output = [5, 1, 2, 3, 4], [6, 1, 2, 3, 9]
    # Window 1: nothing follows 6; then 2 3 follow the earlier 1.
    assert copy_ceiling(prompt, output, 1, 8) == CopyCeiling(2, 2, 1)
    # Window 2: (6, 1) never occurred; (1, 2) did, and 3 follows it.
    assert copy_ceiling(prompt, output, 2, 8) == CopyCeiling(3, 1, 1)


def test_the_best_of_several_earlier_places_counts() -> None:
    # Two earlier 7s: 7 8 9 and 7 8 3 4; the output goes on as the second, which the ceiling picks.
    assert copy_ceiling([7, 8, 9, 0, 7, 8, 3, 4], [7, 8, 3, 4, 6], 1, 8) == CopyCeiling(1, 3, 1)


def test_text_never_seen_drafts_nothing() -> None:
    assert copy_ceiling([1, 2], [3, 4, 5, 6], 1, 8) == CopyCeiling(3, 0, 0)
    assert copy_ceiling([1, 2], [], 1, 8) == CopyCeiling(0, 0, 0)
    assert copy_ceiling([1, 2], [3], 1, 8) == CopyCeiling(0, 0, 0)


def test_decode_steps_price_nodes_and_trees() -> None:
    assert CopyCeiling(steps=3, drafted=4, trees=2).decode_steps(0.1, 0.5) == pytest.approx(4.4)
    assert CopyCeiling(steps=3, drafted=4, trees=2).decode_steps(0.0) == 3


@pytest.mark.parametrize(("window", "depth"), [(0, 4), (1, -1)])
def test_bad_settings_are_refused(window: int, depth: int) -> None:
    with pytest.raises(ValueError):
        copy_ceiling([1], [1, 2], window, depth)


@pytest.mark.parametrize("seed", range(6))
def test_the_ngram_drafter_never_needs_fewer_steps(seed: int) -> None:
    """Outputs that copy spans of their prompt and of themselves, with edits, replayed by the real
    n-gram drafter (free nodes, so that it drafts all it finds) under greedy verification."""
    rng = random.Random(seed)
    prompt = [rng.randrange(VOCAB) for _ in range(120)]
    output = _copying_output(rng, prompt, 90)
    config = NgramConfig(min_path_prob=0.0)
    budget = config.default_budget()
    ceiling = copy_ceiling(
        prompt, output, config.min_match_window_size, min(config.branch_length, budget.num_steps)
    )
    drafter = create_drafter("ngram", DrafterContext(VOCAB, options={"min_path_prob": 0.0}))
    try:
        steps, drafted = _replay(drafter, prompt, output, budget)
    finally:
        drafter.shutdown()
    assert drafted > 0  # not vacuous: the drafter found copies too
    assert ceiling.committed == len(output) - 1
    assert steps >= ceiling.steps, (steps, ceiling)


def _copying_output(rng: random.Random, prompt: list[int], n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        source = prompt + out
        start = rng.randrange(len(source))
        out += source[start : start + rng.randrange(1, 10)]
        out += [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 3))]
    return out[:n]


def _replay(drafter: Drafter, prompt: list[int], output: list[int], budget: TreeBudget) -> tuple[int, int]:
    """Steps the drafter's trees take to commit `output` after its first token under greedy
    verification, and the nodes they drafted."""
    drafter.open("r", prompt)
    drafter.commit("r", output[:1])
    position, steps, drafted = 1, 0, 0
    while position < len(output):
        tree = drafter.propose([DraftQuery("r", budget)])[0]
        accepted = _accepted(tree, output[position:]) if tree is not None else 0
        accepted = min(accepted, len(output) - position - 1)
        drafter.commit("r", output[position : position + accepted + 1])
        position += accepted + 1
        steps += 1
        drafted += tree.num_nodes - 1 if tree is not None else 0
    drafter.close("r")
    return steps, drafted


def _accepted(tree: TokenTree, truth: Sequence[int]) -> int:
    """How far down the tree the true continuation goes."""
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    node, depth = 0, 0
    while depth < len(truth):
        child = next(
            (c for c in range(1, len(tokens)) if parents[c] == node and tokens[c] == truth[depth]), None
        )
        if child is None:
            break
        node, depth = child, depth + 1
    return depth
