"""Seeded sampling that does not depend on the draft: the Gumbel-max trick with noise keyed by position.

For a request with a seed, the token at sequence position t is argmax_v p_t(v) / E_t(v), where
E_t ~ Exp(1) (i.i.d. over the vocabulary) comes from a generator seeded by (seed, t). That is the
Gumbel-max trick (argmax log p + G with G = -log E), so the token is distributed exactly as p_t; and
E_t is independent of the prefix, which only depends on E_s for s < t. Every emitted token therefore
follows the target's conditional distribution: lossless.

Since the token is a function of the seed and the prefix alone, the output no longer depends on which
tree the drafter proposed, or whether it proposed one: a seed reproduces the same text with any drafter
(whose trees change from request to request as its memory learns), and without speculation. Verifying
a tree is greedy verification against each node's winner (nodes at one depth share their position's
noise). A drafted child is thus accepted with probability p(x), as a point mass; draft probabilities
play no part. Unseeded requests keep recursive rejection sampling (acceptance.py), which uses them.
"""

from __future__ import annotations

import torch

from treespec.kernels.acceptance import Acceptance, accept_winners

_MASK64 = (1 << 64) - 1


def position_seed(seed: int, position: int) -> int:
    """A generator seed for (request seed, position): splitmix64 of both, so that nearby seeds and
    positions give unrelated streams; within [0, 2**63)."""
    x = (seed * 0x9E3779B97F4A7C15 + position + 1) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) >> 1


def position_noise(seed: int, position: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """E_t: FloatTensor[vocab_size] of Exp(1) draws for this seed and position."""
    generator = torch.Generator(device).manual_seed(position_seed(seed, position))
    return torch.empty(vocab_size, device=device).exponential_(generator=generator)


def coupled_token(probs: torch.Tensor, seed: int, position: int) -> int:
    """The token sampled at `position` from probs: FloatTensor[V], the target's distribution there
    (through temperature/top-k/top-p/min-p): the Gumbel-max winner under that position's noise."""
    noise = position_noise(seed, position, int(probs.shape[0]), probs.device)
    return int((probs / noise).argmax())


def accept_coupled(
    tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor, seed: int, first_position: int
) -> Acceptance:
    """Verify a tree for a seeded request: the path the coupled tokens take through it, and the bonus.
    target_probs: FloatTensor[n, V], the target's distribution after each node; first_position: the
    sequence position of the token after the root (the request's length). Noise is drawn only for the
    positions the walk reaches: a node at depth d samples position first_position + d."""
    return accept_winners(
        tokens,
        parents,
        lambda node, depth: coupled_token(target_probs[node], seed, first_position + depth),
    )
