"""Sampling verification is lossless: the emitted tokens follow the target's exact distribution.

A toy target LM over a small vocabulary holds one next-token distribution per prefix, so the exact
law of the first tokens a plain sampler would emit is known. Each test drafts trees against it, runs
accept_sampling many times (tokens a step does not emit are sampled from the target, as the next
engine step would), and compares the empirical joint law of the first emitted tokens with the exact
one by a chi-square test. Fixed seeds keep every test deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from treespec.kernels.acceptance import Acceptance, accept_sampling

# A sibling list: (token, draft probability or None, that child's own sibling list) per child.
Spec: TypeAlias = list[tuple[int, float | None, "Spec"]]


class ToyTarget:
    """Next-token distributions for every prefix shorter than `depth`, random unless set by hand.

    Rows are flat: the prefix y_1..y_d (base-`vocab` digits, y_1 most significant) is row
    offset(d) + index; a fraction of each row's tokens get probability 0, as top-k/top-p would do.
    """

    def __init__(self, vocab: int, depth: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        rows = sum(vocab**d for d in range(depth))
        weights = -torch.rand(rows, vocab, generator=g, dtype=torch.float64).log()  # Dirichlet(1)
        weights[torch.rand(rows, vocab, generator=g) < 0.2] = 0.0
        weights[:, 0] += 1e-3  # no row without mass
        self.vocab = vocab
        self.depth = depth
        self.offsets = [sum(vocab**e for e in range(d)) for d in range(depth)]
        self.probs = (weights / weights.sum(-1, keepdim=True)).float()

    def row(self, prefix: Sequence[int]) -> int:
        assert len(prefix) < self.depth, "the toy target is too shallow for this tree"
        index = 0
        for token in prefix:
            index = index * self.vocab + token
        return self.offsets[len(prefix)] + index

    def set(self, prefix: Sequence[int], probs: list[float]) -> None:
        self.probs[self.row(prefix)] = torch.tensor(probs)

    def exact(self, length: int) -> np.ndarray:
        """Exact law of the first `length` tokens, flat float64 [vocab**length]."""
        p = self.probs.double().numpy()
        p = p / p.sum(-1, keepdims=True)
        joint = p[self.row(())]
        for d in range(1, length):
            start = self.row([0] * d)
            joint = (joint[:, None] * p[start : start + self.vocab**d]).reshape(-1)
        return joint


@dataclass
class Tree:
    tokens: torch.Tensor  # [n] long
    parents: torch.Tensor  # [n] long
    draft_probs: torch.Tensor | None  # [n] float
    target_probs: torch.Tensor  # [n, V] float


def build_tree(target: ToyTarget, spec: Spec) -> Tree:
    """Nodes in depth-first order (parents before children, siblings in spec order)."""
    tokens, parents, probs, rows = [0], [-1], [1.0], [target.row(())]

    def add(parent: int, prefix: tuple[int, ...], kids: Spec) -> None:
        for token, prob, grandkids in kids:
            tokens.append(token)
            parents.append(parent)
            probs.append(1.0 if prob is None else prob)
            rows.append(target.row((*prefix, token)))
            add(len(tokens) - 1, (*prefix, token), grandkids)

    add(0, (), spec)
    with_probs = bool(spec) and spec[0][1] is not None
    return Tree(
        tokens=torch.tensor(tokens),
        parents=torch.tensor(parents),
        draft_probs=torch.tensor(probs) if with_probs else None,
        target_probs=target.probs[rows],
    )


def run(
    target: ToyTarget, make_tree: Callable[[int], Tree], trials: int, length: int, seed: int
) -> np.ndarray:
    """Counts of the first `length` emitted tokens, flat [vocab**length]."""
    gen = torch.Generator().manual_seed(seed)
    p = target.probs.double().numpy()
    cdf = np.cumsum(p, axis=1) / p.sum(axis=1, keepdims=True)
    coins = torch.rand(trials, length, generator=gen, dtype=torch.float64).numpy()
    counts = np.zeros(target.vocab**length, dtype=np.int64)
    for t in range(trials):
        tree = make_tree(t)
        result = accept_sampling(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, gen)
        out = result.emitted_tokens(tree.tokens)
        while len(out) < length:  # the next engine step: plain sampling from the target
            out.append(int(np.searchsorted(cdf[target.row(out)], coins[t, len(out)], side="right")))
        index = 0
        for token in out[:length]:
            index = index * target.vocab + token
        counts[index] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, exact: np.ndarray) -> float:
    """Goodness of fit; cells with expected count < 5 are pooled, impossible cells must stay empty."""
    impossible = exact <= 0
    assert counts[impossible].sum() == 0, "emitted a sequence the target cannot produce"
    expected = exact[~impossible] / exact.sum() * counts.sum()
    observed = counts[~impossible]
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] < 5:  # the pooled cell itself is tiny: fold it into the smallest regular cell
        i = int(np.argmin(exp[:-1]))
        obs[i] += obs[-1]
        exp[i] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)


def draw_orders(q: torch.Tensor, trials: int, gen: torch.Generator) -> list[list[int]]:
    """Per trial, q's whole support in the order of a sequential draw without replacement from q."""
    weights = q.double().expand(trials, -1).clone()
    picks = []
    for _ in range(int((q > 0).sum())):
        pick = torch.multinomial(weights, 1, generator=gen)[:, 0]
        weights[torch.arange(trials), pick] = 0.0
        picks.append(pick)
    return torch.stack(picks, dim=1).tolist()


def sampled_two_level_trees(
    target: ToyTarget, q_root: torch.Tensor, q_child: dict[int, torch.Tensor], trials: int, seed: int
) -> Callable[[int], Tree]:
    """Trees whose every sibling list is the drafter's draw without replacement, fresh per trial."""
    gen = torch.Generator().manual_seed(seed)
    root_orders = draw_orders(q_root, trials, gen)
    child_orders = {a: draw_orders(q, trials, gen) for a, q in q_child.items()}

    def make(t: int) -> Tree:
        spec: Spec = [
            (a, float(q_root[a]), [(b, float(q_child[a][b]), []) for b in child_orders[a][t]])
            for a in root_orders[t]
        ]
        return build_tree(target, spec)

    return make


def sparse_q(vocab: int, support: list[int], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.zeros(vocab)
    q[support] = -torch.rand(len(support), generator=g).log()
    return q / q.sum()


TRIALS = 12_000


def test_point_mass_drafts_hand_made_target() -> None:
    target = ToyTarget(vocab=6, depth=3, seed=0)
    target.set((), [0.35, 0.25, 0.2, 0.15, 0.05, 0.0])
    target.set((0,), [0.1, 0.5, 0.2, 0.0, 0.15, 0.05])  # the drafted grandchild 3 is impossible too
    spec: Spec = [
        (0, None, [(1, None, []), (3, None, [])]),
        (5, None, [(0, None, [])]),
        (2, None, [(4, None, [])]),
    ]
    tree = build_tree(target, spec)
    counts = run(target, lambda _: tree, TRIALS, length=2, seed=1)
    assert chi_square_pvalue(counts, target.exact(2)) > 1e-3


def test_drafts_with_probabilities_random_target() -> None:
    target = ToyTarget(vocab=8, depth=3, seed=2)
    q_root = sparse_q(8, [1, 2, 4, 6], seed=3)
    q_child = {a: sparse_q(8, [(a + 1) % 8, (a + 3) % 8, (a + 4) % 8], seed=10 + a) for a in [1, 2, 4, 6]}
    make = sampled_two_level_trees(target, q_root, q_child, TRIALS, seed=4)
    counts = run(target, make, TRIALS, length=2, seed=5)
    assert chi_square_pvalue(counts, target.exact(2)) > 1e-3


def test_draft_very_different_from_target() -> None:
    target = ToyTarget(vocab=6, depth=3, seed=6)
    # The target likes 0 and 1, which are not drafted; the draft likes 3 and 4, which it never emits.
    target.set((), [0.55, 0.3, 0.1, 0.0, 0.0, 0.05])
    q_root = torch.tensor([0.0, 0.0, 0.05, 0.7, 0.25, 0.0])
    target.set((2,), [0.0, 0.0, 0.0, 0.1, 0.2, 0.7])
    q_child = {
        2: torch.tensor([0.6, 0.3, 0.0, 0.0, 0.0, 0.1]),
        3: torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0, 0.0]),
        4: torch.tensor([0.2, 0.0, 0.0, 0.0, 0.0, 0.8]),
    }
    make = sampled_two_level_trees(target, q_root, q_child, TRIALS, seed=7)
    counts = run(target, make, TRIALS, length=2, seed=8)
    assert chi_square_pvalue(counts, target.exact(2)) > 1e-3


@pytest.mark.parametrize("with_probs", [True, False])
def test_wide_siblings(with_probs: bool) -> None:
    vocab = 8
    target = ToyTarget(vocab=vocab, depth=3, seed=9)
    children = [0, 1, 2, 3, 5, 6, 7]
    q_root = sparse_q(vocab, children, seed=11)
    q_child = {a: sparse_q(vocab, [(a + 2) % vocab, (a + 5) % vocab], seed=20 + a) for a in children}
    if with_probs:
        make = sampled_two_level_trees(target, q_root, q_child, TRIALS, seed=12)
    else:
        tree = build_tree(
            target,
            [(a, None, [(b, None, []) for b in q_child[a].nonzero()[:, 0].tolist()]) for a in children],
        )
        make = lambda _: tree  # noqa: E731
    counts = run(target, make, TRIALS, length=2, seed=13)
    assert chi_square_pvalue(counts, target.exact(2)) > 1e-3


def test_three_tokens_through_a_deep_point_mass_tree() -> None:
    target = ToyTarget(vocab=4, depth=4, seed=14)
    spec: Spec = [
        (0, None, [(1, None, [(2, None, [])]), (0, None, [(3, None, []), (1, None, [])])]),
        (2, None, [(3, None, [(0, None, []), (1, None, [])])]),
        (3, None, []),
    ]
    tree = build_tree(target, spec)
    counts = run(target, lambda _: tree, TRIALS, length=3, seed=15)
    assert chi_square_pvalue(counts, target.exact(3)) > 1e-3


def test_detects_a_biased_drafter() -> None:
    """Power check: fixed top-k children sent with their draft probabilities are NOT lossless."""
    target = ToyTarget(vocab=3, depth=2, seed=16)
    target.set((), [0.5, 0.5, 0.0])
    tree = build_tree(target, [(0, 0.9, []), (1, 0.1, [])])  # always this order: not a draw from q
    counts = run(target, lambda _: tree, 3000, length=1, seed=17)
    assert chi_square_pvalue(counts, target.exact(1)) < 1e-6


def test_zero_draft_probability_child_is_never_accepted() -> None:
    target = ToyTarget(vocab=3, depth=2, seed=18)
    target.set((), [0.8, 0.2, 0.0])
    tree = build_tree(target, [(0, 0.0, []), (1, 1.0, [])])
    gen = torch.Generator().manual_seed(19)
    for _ in range(200):
        result = accept_sampling(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, gen)
        assert 1 not in result.path


def test_certain_tokens_are_always_accepted() -> None:
    target = ToyTarget(vocab=4, depth=3, seed=20)
    target.set((), [0.0, 0.0, 1.0, 0.0])
    target.set((2,), [0.0, 1.0, 0.0, 0.0])
    gen = torch.Generator().manual_seed(21)
    point = build_tree(target, [(0, None, []), (2, None, [(3, None, []), (1, None, [])])])
    for _ in range(50):
        result = accept_sampling(point.tokens, point.parents, None, point.target_probs, gen)
        assert result.path == [0, 2, 4]


def test_draft_equal_to_target_accepts_the_first_child() -> None:
    target = ToyTarget(vocab=5, depth=2, seed=22)
    target.set((), [0.1, 0.2, 0.3, 0.4, 0.0])
    p = target.probs[0].tolist()
    tree = build_tree(target, [(3, p[3], []), (1, p[1], []), (2, p[2], []), (0, p[0], [])])
    gen = torch.Generator().manual_seed(23)
    for _ in range(100):
        assert accept_sampling(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, gen).path[
            :2
        ] == [0, 1]


def test_same_seed_reproduces_the_same_acceptances() -> None:
    target = ToyTarget(vocab=8, depth=3, seed=24)
    q_root = sparse_q(8, [1, 2, 4, 6], seed=25)
    q_child = {a: sparse_q(8, [0, 3, 5], seed=26 + a) for a in [1, 2, 4, 6]}
    tree = sampled_two_level_trees(target, q_root, q_child, 1, seed=27)(0)

    def replay(seed: int) -> list[Acceptance]:
        gen = torch.Generator().manual_seed(seed)
        return [
            accept_sampling(tree.tokens, tree.parents, tree.draft_probs, tree.target_probs, gen)
            for _ in range(30)
        ]

    assert replay(1) == replay(1)
    assert replay(1) != replay(2)


def test_target_without_mass_is_an_error() -> None:
    target = ToyTarget(vocab=3, depth=2, seed=28)
    tree = build_tree(target, [(0, None, [])])
    with pytest.raises(ValueError, match="no mass"):
        accept_sampling(tree.tokens, tree.parents, None, torch.zeros_like(tree.target_probs))


def test_rounding_residual_falls_back_to_the_current_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """p is q up to one float32 ulp; a coin just below 1 forces the (probability ~1e-7) rejection."""
    q = torch.tensor([0.6, 0.4, 0.0])
    p = q.clone()
    p[0] = torch.nextafter(p[0], torch.tensor(0.0))
    p[1] = torch.nextafter(p[1], torch.tensor(1.0))
    monkeypatch.setattr(torch, "rand", lambda k, **_: torch.full((k,), 1 - 2**-24))
    tokens, parents = torch.tensor([0, 0, 1]), torch.tensor([-1, 0, 0])
    seen = set()
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        result = accept_sampling(tokens, parents, torch.tensor([1.0, 0.6, 0.4]), torch.stack([p, p, p]), gen)
        assert result.path == [0]
        seen.add(result.bonus)
    # The residual max(p - q, 0) is rounding noise on token 1; the fallback draws from p instead.
    assert seen == {0, 1}
