"""Sampling by position for seeded requests: every token follows the target's distribution, and the
emitted tokens do not depend on the tree they were verified against."""

from __future__ import annotations

import random

import torch
from scipy.stats import chisquare

from treespec.kernels.coupled_sampling import accept_coupled, coupled_token, position_seed

VOCAB = 6


def distribution(prefix: tuple[int, ...]) -> torch.Tensor:
    """A toy target: a fixed, prefix-dependent distribution over VOCAB tokens, one token of them at 0."""
    g = torch.Generator().manual_seed(hash(prefix) % (2**31))
    p = torch.rand(VOCAB, generator=g) + 0.05
    p[len(prefix) % VOCAB] = 0.0
    return p / p.sum()


def sample_plain(seed: int, start: int, length: int) -> list[int]:
    """Root-only trees, one token per step: what decoding without speculation emits."""
    out: list[int] = []
    while len(out) < length:
        root = torch.tensor([0]), torch.tensor([-1])
        step = accept_coupled(*root, distribution(tuple(out))[None], seed, start + len(out))
        out.append(step.bonus)
    return out


def random_tree(rng: random.Random) -> tuple[list[int], list[int]]:
    tokens, parents = [99], [-1]
    for _ in range(rng.randint(0, 8)):
        parent = rng.randrange(len(tokens))
        taken = {tokens[i] for i in range(1, len(tokens)) if parents[i] == parent}
        free = [t for t in range(VOCAB) if t not in taken]
        if free:
            tokens.append(rng.choice(free))
            parents.append(parent)
    return tokens, parents


def test_the_emitted_tokens_do_not_depend_on_the_tree() -> None:
    rng = random.Random(4)
    for seed in range(40):
        want = sample_plain(seed, 17, 12)
        out: list[int] = []
        while len(out) < 12:
            tokens, parents = random_tree(rng)
            # The target's distribution after each node: given the emitted prefix and the node's path.
            paths: list[tuple[int, ...]] = [tuple(out)]
            for t, p in zip(tokens[1:], parents[1:], strict=True):
                paths.append((*paths[p], t))
            probs = torch.stack([distribution(path) for path in paths])
            step = accept_coupled(torch.tensor(tokens), torch.tensor(parents), probs, seed, 17 + len(out))
            out += step.emitted_tokens(torch.tensor(tokens))
        assert out[:12] == want, seed


def test_each_position_follows_the_target_distribution() -> None:
    p = distribution((1, 2))
    n = 20_000
    draws = [coupled_token(p, seed, 5) for seed in range(n)]
    counts = torch.bincount(torch.tensor(draws), minlength=VOCAB).double()
    assert counts[p == 0].sum() == 0  # a token of probability 0 is never sampled
    live = p > 0
    expected = p[live].double() / p[live].double().sum() * n
    assert chisquare(counts[live].numpy(), expected.numpy()).pvalue > 1e-3


def test_positions_and_seeds_give_unrelated_noise() -> None:
    seeds = {position_seed(s, t) for s in range(-50, 50) for t in range(100)}
    assert len(seeds) == 100 * 100 and all(0 <= x < 2**63 for x in seeds)
