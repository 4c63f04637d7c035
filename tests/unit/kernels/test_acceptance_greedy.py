"""Greedy verification: hand-made cases and a brute-force reference on random trees."""

from __future__ import annotations

import itertools
import random

import torch

from treespec.kernels.acceptance import Acceptance, accept_greedy

#        0 (root, token 0)
#       / \
#  1 (5)   2 (7)
#   / \      \
# 3(2) 4(9)   5(4)
#  |
# 6(1)
TOKENS = torch.tensor([0, 5, 7, 2, 9, 4, 1])
PARENTS = torch.tensor([-1, 0, 0, 1, 1, 2, 3])


def greedy(argmax: list[int]) -> Acceptance:
    return accept_greedy(TOKENS, PARENTS, torch.tensor(argmax))


def test_whole_path_accepted_and_bonus_at_leaf() -> None:
    result = greedy([5, 2, 0, 1, 0, 0, 8])
    assert result == Acceptance(path=[0, 1, 3, 6], bonus=8)
    assert result.emitted_tokens(TOKENS) == [5, 2, 1, 8]


def test_reject_at_root() -> None:
    assert greedy([3, 2, 4, 1, 0, 0, 8]) == Acceptance(path=[0], bonus=3)


def test_branch_choice_among_siblings() -> None:
    assert greedy([7, 2, 4, 1, 0, 6, 8]) == Acceptance(path=[0, 2, 5], bonus=6)
    assert greedy([5, 9, 4, 1, 3, 6, 8]) == Acceptance(path=[0, 1, 4], bonus=3)


def test_stop_in_the_middle() -> None:
    assert greedy([5, 2, 0, 7, 0, 0, 8]) == Acceptance(path=[0, 1, 3], bonus=7)


def test_chain() -> None:
    tokens = torch.tensor([9, 1, 2, 3])
    parents = torch.tensor([-1, 0, 1, 2])
    assert accept_greedy(tokens, parents, torch.tensor([1, 2, 3, 4])) == Acceptance([0, 1, 2, 3], 4)
    assert accept_greedy(tokens, parents, torch.tensor([1, 5, 3, 4])) == Acceptance([0, 1], 5)


def test_root_only() -> None:
    assert accept_greedy(torch.tensor([4]), torch.tensor([-1]), torch.tensor([6])) == Acceptance([0], 6)


def root_path(parents: list[int], node: int) -> list[int]:
    chain = [node]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain[::-1]


def reference(tokens: list[int], parents: list[int], argmax: list[int]) -> Acceptance:
    """The deepest node whose every edge agrees with the target's argmax, found by brute force.

    Sibling tokens are distinct, so at most one node per depth agrees all the way down.
    """
    paths = [root_path(parents, node) for node in range(len(tokens))]
    agreeing = [path for path in paths if all(tokens[c] == argmax[p] for p, c in itertools.pairwise(path))]
    path = max(agreeing, key=len)
    return Acceptance(path=path, bonus=argmax[path[-1]])


def test_matches_brute_force_on_random_trees() -> None:
    rng = random.Random(0)
    vocab = 3  # a tiny vocabulary so that long matches are common
    for _ in range(500):
        n = rng.randrange(1, 20)
        parents = [-1] + [rng.randrange(i) for i in range(1, n)]
        tokens = [rng.randrange(vocab)]
        for i in range(1, n):
            taken = {tokens[j] for j in range(1, i) if parents[j] == parents[i]}
            free = [t for t in range(vocab) if t not in taken]
            if not free:
                parents[i] = i - 1  # the parent is full: hang the node below its predecessor instead
                free = list(range(vocab))
            tokens.append(rng.choice(free))
        argmax = [rng.randrange(vocab) for _ in range(n)]
        got = accept_greedy(torch.tensor(tokens), torch.tensor(parents), torch.tensor(argmax))
        assert got == reference(tokens, parents, argmax)
