"""Tree depths, ancestor masks and validation against brute-force Python references."""

from __future__ import annotations

import random

import pytest
import torch

from treespec.kernels.tree_mask import ancestor_mask, is_chain, tree_depths, validate_tree


def random_parents(rng: random.Random, n: int) -> list[int]:
    """A random tree; half the time biased towards deep chains so that depth varies widely."""
    deep = rng.random() < 0.5
    return [-1] + [i - 1 if deep and rng.random() < 0.8 else rng.randrange(i) for i in range(1, n)]


def brute_ancestors(parents: list[int], i: int) -> list[int]:
    chain = [i]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain


def distinct_sibling_tokens(rng: random.Random, parents: list[int], vocab: int) -> list[int]:
    used: dict[int, set[int]] = {}
    tokens = [rng.randrange(vocab)]
    for parent in parents[1:]:
        token = rng.choice(sorted(set(range(vocab)) - used.setdefault(parent, set())))
        used[parent].add(token)
        tokens.append(token)
    return tokens


def sibling_probs(rng: random.Random, parents: list[int]) -> list[float]:
    """Draft probabilities: each parent's children get a random distribution summing to 1."""
    probs = [1.0] * len(parents)
    for parent in set(parents[1:]):
        kids = [i for i, p in enumerate(parents) if p == parent]
        weights = [rng.random() + 1e-3 for _ in kids]
        for kid, weight in zip(kids, weights, strict=True):
            probs[kid] = weight / sum(weights)
    return probs


def test_depths_and_masks_match_brute_force_on_random_trees() -> None:
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randrange(1, 48)
        parents = random_parents(rng, n)
        t = torch.tensor(parents)
        depths = tree_depths(t)
        mask = ancestor_mask(t)
        expected = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            chain = brute_ancestors(parents, i)
            expected[i, chain] = True
            assert int(depths[i]) == len(chain) - 1
        assert torch.equal(mask, expected)
        assert depths.dtype == torch.long


def test_a_mask_of_parents_listed_after_children_is_jumped_to_the_same() -> None:
    """Ordered trees on a CPU walk node by node; any other parent array (here children listed before
    their parents) takes pointer jumping, which must give the brute-force ancestors too."""
    rng = random.Random(1)
    for _ in range(50):
        n = rng.randrange(2, 32)
        ordered = random_parents(rng, n)
        order = list(range(n))
        rng.shuffle(order)  # node order[k] becomes node k
        place = {old: new for new, old in enumerate(order)}
        parents = [place[ordered[old]] if ordered[old] >= 0 else -1 for old in order]
        expected = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            expected[i, brute_ancestors(parents, i)] = True
        assert torch.equal(ancestor_mask(torch.tensor(parents)), expected)


def test_chain_gives_causal_mask() -> None:
    parents = torch.arange(-1, 9)
    assert torch.equal(ancestor_mask(parents), torch.tril(torch.ones(10, 10, dtype=torch.bool)))
    assert torch.equal(tree_depths(parents), torch.arange(10))
    assert is_chain(parents)


def test_single_root() -> None:
    parents = torch.tensor([-1])
    assert torch.equal(ancestor_mask(parents), torch.ones(1, 1, dtype=torch.bool))
    assert tree_depths(parents).tolist() == [0]
    assert is_chain(parents)


def test_is_chain_rejects_branching() -> None:
    assert not is_chain(torch.tensor([-1, 0, 0]))
    assert not is_chain(torch.tensor([-1, 0, 1, 1]))


LIMITS = {"vocab_size": 10, "max_nodes": 8, "max_depth": 3, "max_children": 3}


def test_validate_accepts_random_valid_trees() -> None:
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randrange(1, 40)
        parents = random_parents(rng, n)
        tokens = distinct_sibling_tokens(rng, parents, 64)
        t_parents = torch.tensor(parents)
        limits = {
            "vocab_size": 64,
            "max_nodes": n,
            "max_depth": int(tree_depths(t_parents).max()),
            "max_children": max([parents[1:].count(i) for i in range(n)], default=0),
        }
        probs = torch.tensor(sibling_probs(rng, parents))
        assert validate_tree(torch.tensor(tokens), t_parents, None, **limits) is None
        assert validate_tree(torch.tensor(tokens), t_parents, probs, **limits) is None


def base_tree() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Root 5 with children 1 and 2; node 1 has children 3 and 1 (a token may repeat its uncle's)."""
    tokens = torch.tensor([5, 1, 2, 3, 1])
    parents = torch.tensor([-1, 0, 0, 1, 1])
    probs = torch.tensor([1.0, 0.7, 0.3, 0.4, 0.6])
    return tokens, parents, probs


def test_validate_accepts_base_tree_and_ignores_root_prob() -> None:
    tokens, parents, probs = base_tree()
    assert validate_tree(tokens, parents, probs, **LIMITS) is None
    probs[0] = float("nan")
    assert validate_tree(tokens, parents, probs, **LIMITS) is None
    probs[0], probs[1] = 7.0, 0.7005  # within the sum tolerance
    assert validate_tree(tokens, parents, probs, **LIMITS) is None


def _tokens(values: list[int]) -> torch.Tensor:
    return torch.tensor(values)


@pytest.mark.parametrize(
    ("tokens", "parents", "probs", "limits", "reason"),
    [
        (torch.tensor([[5, 1]]), torch.tensor([[-1, 0]]), None, {}, "1-D"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0]), None, {}, "differ in length"),
        (_tokens([]), torch.tensor([], dtype=torch.long), None, {}, "empty"),
        (torch.tensor([5.0, 1.0]), torch.tensor([-1, 0]), None, {}, "integer"),
        (_tokens([5, 1, 2, 3, 1]), torch.tensor([-1, 0, 0, 1, 1]), None, {"max_nodes": 4}, "exceed"),
        (_tokens([5, 1, 2]), torch.tensor([0, 0, 0]), None, {}, "parents[0]"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 2]), None, {}, "earlier node"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 5]), None, {}, "earlier node"),
        (_tokens([5, 1, 2]), torch.tensor([-1, -1, 0]), None, {}, "earlier node"),
        (_tokens([5, 10, 2]), torch.tensor([-1, 0, 0]), None, {}, "vocabulary"),
        (_tokens([5, -1, 2]), torch.tensor([-1, 0, 0]), None, {}, "vocabulary"),
        (_tokens([5, 1, 2, 3, 1]), torch.tensor([-1, 0, 0, 1, 1]), None, {"max_depth": 1}, "depth 2"),
        (_tokens([5, 1, 2, 3, 1]), torch.tensor([-1, 0, 0, 1, 1]), None, {"max_children": 1}, "children"),
        (_tokens([5, 1, 1]), torch.tensor([-1, 0, 0]), None, {}, "same token"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 0]), torch.tensor([1.0, 0.5]), {}, "shape"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 0]), torch.tensor([1, 0, 1]), {}, "floating"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 0]), torch.tensor([1.0, float("nan"), 0.5]), {}, "finite"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 0]), torch.tensor([1.0, 1.5, -0.5]), {}, "[0, 1]"),
        (_tokens([5, 1, 2]), torch.tensor([-1, 0, 0]), torch.tensor([1.0, 0.5, 0.4]), {}, "summing to 0.9"),
        (
            _tokens([5, 1, 2, 3]),
            torch.tensor([-1, 0, 0, 1]),
            torch.tensor([1.0, 0.5, 0.5, 0.5]),
            {},
            "node 1",
        ),
    ],
)
def test_validate_rejects_each_violation(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    probs: torch.Tensor | None,
    limits: dict[str, int],
    reason: str,
) -> None:
    message = validate_tree(tokens, parents, probs, **{**LIMITS, **limits})
    assert message is not None
    assert reason in message
