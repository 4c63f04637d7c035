"""Trees from candidates: exact shapes for crafted inputs, budgets, parents before children."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from treespec.drafter.ngram.calibration import AcceptanceModel, NodeKind, node_kind
from treespec.drafter.ngram.candidates import Candidate, local_bucket, memory_bucket
from treespec.drafter.ngram.outcomes import tree_outcomes
from treespec.drafter.ngram.tree_builder import (
    DraftedTree,
    TreeShape,
    _select_bfs,
    _select_prob,
    _trie,
    _TrieNode,
    build_tree,
)
from treespec.kernels.tree_mask import validate_tree
from treespec.shared.drafting.token_tree import TreeBudget


def always(p: float) -> Callable[[NodeKind], float]:
    return lambda kind: p


def shape(match_type: str = "BFS", min_b: int = 1, max_b: int = 10, min_prob: float = 0.0) -> TreeShape:
    return TreeShape(match_type, min_b, max_b, min_prob)


def edges(drafted: DraftedTree | None) -> list[tuple[int, int]]:
    assert drafted is not None
    tokens, parents = drafted.tree.tokens.tolist(), drafted.tree.parents.tolist()
    return [(tokens[p] if p >= 0 else -1, t) for t, p in zip(tokens, parents, strict=True)]


def test_single_match_is_a_chain_cut_by_depth() -> None:
    drafted = build_tree(9, [Candidate((1, 2, 3, 4, 5), 3.0, 2)], TreeBudget(8, 3, 4), shape(), always(0.9))
    assert edges(drafted) == [(-1, 9), (9, 1), (1, 2), (2, 3)]


def test_shared_prefixes_merge_and_heavier_branches_come_first() -> None:
    candidates = [Candidate((1, 2, 3), 2.0, 1), Candidate((1, 4), 5.0, 4), Candidate((6, 7), 1.0, 1)]
    drafted = build_tree(0, candidates, TreeBudget(8, 3, 4), shape(), always(0.9))
    # level 1: 1 (weight 7) then 6; level 2: under 1: 4 (5.0) then 2 (2.0), under 6: 7; level 3: 3
    assert edges(drafted) == [(-1, 0), (0, 1), (0, 6), (1, 4), (1, 2), (6, 7), (2, 3)]
    assert drafted is not None and drafted.kinds[1] == node_kind(4, 1, 0)  # strongest match through it


def test_a_node_only_the_memory_proposed_is_of_its_memory_bucket() -> None:
    # Local matches rank above memory ones; a node no local match reaches keeps the memory's kind (it
    # once took the kind of an empty local match, so memory outcomes were learned under another kind).
    candidates = [Candidate((5, 6), 2.0, memory_bucket(2)), Candidate((5, 7), 1.0, local_bucket(1))]
    drafted = build_tree(0, candidates, TreeBudget(8, 3, 4), shape(), always(0.9))
    assert edges(drafted) == [(-1, 0), (0, 5), (5, 6), (5, 7)]
    assert drafted is not None
    assert [kind[0] for kind in drafted.kinds[1:] if kind is not None] == [
        local_bucket(1),
        memory_bucket(2),
        local_bucket(1),
    ]


def test_bfs_breadth_shrinks_with_depth() -> None:
    # a full 4-ary trie of depth 3; breadth goes 3 -> 2 -> 1 over the three levels
    candidates = [
        Candidate((a, 10 + b, 20 + c), 1.0, 1) for a in range(4) for b in range(4) for c in range(4)
    ]
    drafted = build_tree(99, candidates, TreeBudget(64, 3, 4), shape(min_b=1, max_b=3), always(1.0))
    assert drafted is not None
    depth_of = [0]
    parents = drafted.tree.parents.tolist()
    for p in parents[1:]:
        depth_of.append(depth_of[p] + 1)
    per_parent: dict[int, int] = {}
    for p in parents[1:]:
        per_parent[p] = per_parent.get(p, 0) + 1
    assert {depth_of[p]: n for p, n in per_parent.items()} == {0: 3, 1: 2, 2: 1}
    assert len(parents) == 1 + 3 + 3 * 2 + 3 * 2 * 1


def test_prob_picks_most_likely_paths_first() -> None:
    def estimate(kind: NodeKind) -> float:
        return {0: 0.9, 1: 0.3}.get(kind[2], 0.1)  # by sibling rank

    candidates = [Candidate((1, 2, 3), 5.0, 1), Candidate((4, 5), 1.0, 1)]
    drafted = build_tree(0, candidates, TreeBudget(4, 5, 4), shape("PROB"), estimate)
    # path probs: 1: .9, 2: .81, 3: .729, 4: .3 -> the 3 best nodes are the chain
    assert edges(drafted) == [(-1, 0), (0, 1), (1, 2), (2, 3)]


def test_unlikely_nodes_are_left_out() -> None:
    candidates = [Candidate((1, 2, 3, 4), 1.0, 1)]
    drafted = build_tree(0, candidates, TreeBudget(8, 5, 4), shape(min_prob=0.3), always(0.6))
    assert edges(drafted) == [(-1, 0), (0, 1), (1, 2)]  # 0.6, 0.36, then 0.216 < 0.3
    assert build_tree(0, candidates, TreeBudget(8, 5, 4), shape(min_prob=0.7), always(0.6)) is None


def test_no_candidates_or_no_room_means_no_tree() -> None:
    assert build_tree(0, [], TreeBudget(8, 5, 4), shape(), always(1.0)) is None
    assert build_tree(0, [Candidate((1,), 1.0, 1)], TreeBudget(1, 5, 4), shape(), always(1.0)) is None
    assert build_tree(0, [Candidate((1,), 1.0, 1)], TreeBudget(8, 0, 4), shape(), always(1.0)) is None


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_random_inputs_respect_every_budget(match_type: str) -> None:
    rng = random.Random(0)
    for _ in range(300):
        node_cost = rng.choice([0.0, rng.random() / 4])  # some trees pruned to the nodes worth a row
        tree_cost = rng.choice([0.0, rng.random() / 4])
        budget = TreeBudget(rng.randint(1, 16), rng.randint(0, 8), rng.randint(1, 5), node_cost, tree_cost)
        candidates = [
            Candidate(
                tuple(rng.randrange(6) for _ in range(rng.randint(1, 10))),
                rng.random() * 5,
                rng.randint(1, 16),
            )
            for _ in range(rng.randint(0, 12))
        ]
        min_b = rng.randint(1, 4)
        drafted = build_tree(
            3, candidates, budget, shape(match_type, min_b, min_b + rng.randint(0, 6)), always(rng.random())
        )
        if drafted is None:
            continue
        tree = drafted.tree
        problem = validate_tree(
            tree.tokens,
            tree.parents,
            None,
            vocab_size=6,
            max_nodes=budget.num_draft_tokens,
            max_depth=budget.num_steps,
            max_children=budget.topk,
        )
        assert problem is None, problem
        assert int(tree.tokens[0]) == 3
        assert all(0 <= p < i for i, p in enumerate(tree.parents.tolist()[1:], start=1))
        assert len(drafted.kinds) == tree.num_nodes


def test_outcomes_follow_the_committed_path() -> None:
    candidates = [Candidate((1, 2, 3), 2.0, 2), Candidate((4,), 1.0, 1)]
    drafted = build_tree(0, candidates, TreeBudget(8, 3, 4), shape(), always(0.9))
    assert drafted is not None
    # accepted 1 then 2, bonus 7: outcomes for 1 (yes), 4 (no), 2 (yes), 3 (no)
    outcomes = tree_outcomes(drafted, [1, 2, 7])
    assert [(kind[1], ok) for kind, ok in outcomes] == [(1, True), (1, False), (2, True), (3, False)]
    assert tree_outcomes(drafted, [5]) == [
        (node_kind(2, 1, 0, 2 / 3), False),
        (node_kind(1, 1, 1, 1 / 3), False),
    ]


def test_a_node_kind_tells_how_far_the_candidates_agree_on_it() -> None:
    # after the root, four candidates of five go on with 1, three of those four then with 2
    candidates = [Candidate((1, 2), 1.0, 1)] * 3 + [Candidate((1, 3), 1.0, 1), Candidate((4,), 1.0, 1)]
    drafted = build_tree(0, candidates, TreeBudget(8, 3, 4), shape(), always(0.9))
    assert edges(drafted) == [(-1, 0), (0, 1), (0, 4), (1, 2), (1, 3)]
    assert drafted is not None
    agreement = [kind[3] for kind in drafted.kinds[1:] if kind is not None]
    assert agreement == [2, 0, 2, 0]  # shares .8, .2, .75, .25
    assert node_kind(1, 1, 0, 0.5) != node_kind(1, 1, 0, 1.0)  # told apart, so calibrated apart


def test_acceptance_model_learns_per_request_from_a_shared_prior() -> None:
    shared = AcceptanceModel()
    kind = node_kind(local_bucket(3), 1, 0)
    first = shared.child()
    first.observe([(kind, False)] * 50)
    assert shared.probability(kind) < 0.1  # the drafter-wide estimate learned from the first request
    second = shared.child()
    assert second.probability(kind) == pytest.approx(shared.probability(kind))
    second.observe([(kind, True)] * 20)
    assert second.probability(kind) > 0.6 > shared.probability(kind)  # the request adapts quickly


def test_a_request_carries_how_its_matches_fare_over_to_kinds_it_has_not_seen() -> None:
    shared = AcceptanceModel()
    seen, unseen = node_kind(local_bucket(2), 1, 0), node_kind(local_bucket(4), 3, 1, 0.5)
    before = shared.probability(unseen)
    writing, copying = shared.child(), shared.child()
    assert writing.probability(unseen) == pytest.approx(before)  # no outcome yet: the shared estimate
    writing.observe([(seen, False)] * 12)  # its matches keep failing
    copying.observe([(seen, True)] * 12)  # its matches keep being accepted
    assert writing.probability(unseen) < 0.7 * before
    assert copying.probability(unseen) > 1.3 * before
    assert shared.probability(unseen) == pytest.approx(before)  # nothing learned drafter-wide for it
    assert all(0.0 < m.probability(unseen) < 1.0 for m in (writing, copying))


def test_a_depth_never_drafted_starts_from_the_estimate_one_level_up() -> None:
    """Chains of long matches accepted down to depth 5 make depth 6 as likely as depth 5, not the
    cold prior: a prior of 0.4 there made every chain's path probability fall below the node cost at
    depth 6, so that depth was never drafted and never learned."""
    shared = AcceptanceModel()
    bucket = local_bucket(6)
    shared.child().observe([(node_kind(bucket, d, 0), True) for d in range(1, 6)] * 40)
    depth5, depth6 = shared.probability(node_kind(bucket, 5, 0)), shared.probability(node_kind(bucket, 6, 0))
    assert depth5 > 0.9 and depth6 == pytest.approx(depth5)
    assert shared.probability(node_kind(bucket, 8, 0)) == pytest.approx(depth5)  # down to the cap
    assert shared.probability(node_kind(bucket, 1, 1)) == pytest.approx(0.4)  # another rank: cold
    shared.child().observe([(node_kind(bucket, 6, 0), False)] * 10)  # depth 6 learns its own
    assert shared.probability(node_kind(bucket, 6, 0)) < 0.3 < depth5
    assert shared.probability(node_kind(bucket, 7, 0)) < 0.3  # and passes it on down


def test_nodes_that_do_not_pay_for_their_verify_rows_are_left_out() -> None:
    def estimate(kind: NodeKind) -> float:
        return {0: 0.9, 1: 0.1}.get(kind[2], 0.05)  # by sibling rank

    candidates = [Candidate((1, 2, 3), 5.0, 1), Candidate((4, 5), 1.0, 1)]
    free = build_tree(0, candidates, TreeBudget(8, 5, 4), shape(), estimate)
    # BFS, free rows: level 1: 1 (.9), 4 (.1); level 2: 2 (.81), 5 (.09); level 3: 3 (.729)
    assert edges(free) == [(-1, 0), (0, 1), (0, 4), (1, 2), (4, 5), (2, 3)]
    # At 0.15 of a step per row: 1 + .9 + .81 + .729 over 1 + .45 beats keeping the .1 and .09 nodes
    # (2.439 / 1.45 = 1.68 > 2.629 / 1.75 = 1.50), and is the best prefix.
    costly = build_tree(0, candidates, TreeBudget(8, 5, 4, node_cost=0.15), shape(), estimate)
    assert edges(costly) == [(-1, 0), (0, 1), (1, 2), (2, 3)]
    assert costly is not None and costly.kinds[1:] == [node_kind(1, d, 0) for d in (1, 2, 3)]
    assert build_tree(0, candidates, TreeBudget(8, 5, 4, node_cost=2.0), shape(), estimate) is None


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_a_node_less_likely_than_its_cost_takes_no_place_in_the_budget(match_type: str) -> None:
    def estimate(kind: NodeKind) -> float:
        return {0: 0.9, 1: 0.1}.get(kind[2], 0.05)  # by sibling rank

    candidates = [Candidate((1, 2, 3), 5.0, 1), Candidate((4, 5), 1.0, 1)]
    # Two nodes of budget. Free rows: 1 (.9) and 4 (.1) at level 1 (BFS), or 1 and 2 (.81) (PROB).
    free = build_tree(0, candidates, TreeBudget(3, 5, 4), shape(match_type), estimate)
    assert edges(free) == ([(-1, 0), (0, 1), (0, 4)] if match_type == "BFS" else [(-1, 0), (0, 1), (1, 2)])
    # At 0.2 a row the .1 node is never worth verifying (no node below the node cost is), so it no
    # longer takes the second place, which goes to 2 (.81): the tree once kept only 1.
    costly = build_tree(0, candidates, TreeBudget(3, 5, 4, node_cost=0.2), shape(match_type), estimate)
    assert edges(costly) == [(-1, 0), (0, 1), (1, 2)]


def test_an_unlikely_tree_that_does_not_pay_for_verifying_at_all_is_not_drafted() -> None:
    candidates = [Candidate((1, 2), 1.0, 1)]
    # path probabilities .2 and .04 at no cost per node: worth a tree only while 1.24 > 1 + tree cost
    assert build_tree(0, candidates, TreeBudget(8, 5, 4, tree_cost=0.2), shape(), always(0.2)) is not None
    assert build_tree(0, candidates, TreeBudget(8, 5, 4, tree_cost=0.25), shape(), always(0.2)) is None


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
def test_only_the_nodes_a_selection_walks_are_merged(match_type: str) -> None:
    """The trie merges a node's children when the selection looks at them, not every token of every
    candidate up front (that was most of a drafting step): a 2-node budget over 16 long candidates
    groups the root's children and those of the nodes it picked, and nothing deeper."""
    rng = random.Random(3)
    candidates = [Candidate(tuple(rng.randrange(4) for _ in range(11)), 1.0 + i, 1) for i in range(16)]
    trie = _trie(0, candidates, 11)
    drafted = _select_bfs if match_type == "BFS" else _select_prob
    picked = drafted(trie, TreeBudget(3, 11, 4), shape(match_type), always(0.9))
    assert len(picked.tokens) == 3
    merged = _merged_depths(trie)
    assert max(merged) <= 2 and merged.count(0) == 1  # the root, and at most the picked nodes below it
    # The merged levels hold what an eager merge holds there: every candidate through the root.
    assert sum(c.weight for c in trie.children.values()) == pytest.approx(sum(c.weight for c in candidates))


def _merged_depths(node: _TrieNode) -> list[int]:
    """The depths of the nodes whose children were grouped."""
    if node._children is None:
        return []
    return [node.depth] + [d for child in node._children.values() for d in _merged_depths(child)]
