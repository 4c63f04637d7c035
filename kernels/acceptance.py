"""The acceptance rule: which drafted tree nodes the target accepts, plus one bonus token.

A tree of n nodes is `tokens: LongTensor[n]` and `parents: LongTensor[n]` (parents[0] == -1, parents
before children, sibling tokens distinct: see tree_mask.validate_tree). Node 0 is the root, the
request's pending last token, already accepted. The emitted tokens are tokens[path[1:]] + [bonus].

Greedy (temperature 0): follow the child that carries the target's argmax; the bonus is the argmax
at the last accepted node. The output is token for token what plain greedy decoding produces.

Sampling: recursive rejection sampling without replacement (SpecInfer, Recursive Speculative
Decoding). At a node with target distribution p, the children x_1, x_2, ... are tried in index order.

  Draft with probabilities: the children carry q(x_c), summing to 1 over one parent's children, and
  the drafter ordered them as a draw without replacement from q. Step k sees the draft distribution
  of the k-th draw, q_k = q restricted to the untried children and renormalised, and
      accept x_k with probability min(1, p_k(x_k) / q_k(x_k)),
      else p_{k+1} = normalize(max(p_k - q_k, 0)).
  Draft without probabilities (n-gram, or any deterministic choice of children): each child is a
  point mass, q_k = delta(x_k). The same rule then reads: accept with probability p_k(x_k), else
  zero p_k(x_k) and renormalise.
  An accepted child becomes the current node with p = target_probs[child]. When every child is
  rejected the bonus is drawn from the final residual; at a leaf from target_probs[leaf].

Why the output is distributed exactly as the target (the standard rejection-sampling argument):
  One step, draft X ~ q_k, target p_k. For every token y
      P(accept, X = y) = q_k(y) min(1, p_k(y)/q_k(y)) = min(p_k, q_k)(y),
      P(reject)        = 1 - sum_y min(p_k, q_k)(y) = sum_y max(p_k - q_k, 0)(y) =: Z,
  and if every later step outputs ~ p_{k+1} = max(p_k - q_k, 0) / Z after a rejection,
      P(out = y) = min(p_k, q_k)(y) + Z * max(p_k - q_k, 0)(y) / Z = p_k(y),
  since min(a, b) + max(a - b, 0) = a. The induction runs backwards over the siblings: after the last
  one, the bonus is drawn from the residual itself, which trivially outputs ~ residual. It holds
  whatever the next draft distribution is, so q_{k+1} may depend on the rejected x_k (without
  replacement: q_{k+1}(x_k) = 0) as long as it is the true law of the next draw. A point mass is
  q_k = delta(x_k), the true law of a deterministic draft, so the argument covers n-gram trees.
  Over the tree: the first emitted token is ~ p_root; given it is y, either y was an accepted child
  and the walk continues with p = target(. | prefix, y), the same argument one level down, or y was
  the bonus and the step ends. Every emitted token is therefore drawn from the target's conditional.
  Caveat for drafters: the children's q must be the true law of their order. Top-k children reported
  with their (renormalised) draft probabilities are not a draw from q and would bias the output;
  such drafters must send no probabilities (the point-mass rule is lossless for any fixed children).

Bookkeeping without touching the whole vocabulary per sibling: keep unnormalised weights w with
p_k = w / W, W = sum(w). Only sibling tokens ever change, since q_k is supported on them:
  accept x  <=>  u < min(1, (w(x)/W) / q_k(x))  <=>  u * W * q_k(x) < w(x)     (u ~ U[0, 1)),
  reject    =>   w <- max(w - W q_k, 0)   (non-sibling weights unchanged, no renormalisation needed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

# A residual mass below this fraction of the node's mass is rounding noise: the rejection that left it
# had at most that probability (exactly 0 in real arithmetic when p_k == q_k), so any fallback moves
# the output distribution by at most that much in total variation.
_MIN_RESIDUAL = 1e-7


@dataclass(frozen=True)
class Acceptance:
    """Accepted node indices from the root down (path[0] == 0), and the bonus token."""

    path: list[int]
    bonus: int

    def emitted_tokens(self, tokens: torch.Tensor) -> list[int]:
        """tokens: LongTensor[n] of the tree -> the tokens this step emits."""
        return [int(t) for t in tokens[self.path[1:]].tolist()] + [self.bonus]


def accept_greedy(tokens: torch.Tensor, parents: torch.Tensor, target_argmax: torch.Tensor) -> Acceptance:
    """Greedy verification. target_argmax: LongTensor[n], the target's argmax after each node."""
    argmax = target_argmax.tolist()
    return accept_winners(tokens, parents, lambda node, depth: argmax[node])


def accept_winners(
    tokens: torch.Tensor, parents: torch.Tensor, winner: Callable[[int, int], int]
) -> Acceptance:
    """Follow from the root the child that carries the target's token, `winner(node, depth)` (asked only
    for the nodes the walk reaches); the bonus is the winner at the last accepted node."""
    token_of = tokens.tolist()
    children = _children(parents.tolist())
    path = [0]
    while True:
        want = winner(path[-1], len(path) - 1)
        # Siblings carry distinct tokens, so at most one child matches.
        match = next((c for c in children[path[-1]] if token_of[c] == want), None)
        if match is None:
            return Acceptance(path=path, bonus=want)
        path.append(match)


def accept_sampling(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """Lossless verification by recursive rejection sampling (module docstring has the maths).

    draft_probs: FloatTensor[n], q of each node's token given its parent (root entry ignored), or
      None for a draft without probabilities (every child a point mass).
    target_probs: FloatTensor[n, V], the target's distribution after each node, already through
      temperature/top-k/top-p/min-p (logits_processing.probs_from_logits).
    generator: source of every random draw, on target_probs.device; a per-request seed replays exactly.
    """
    token_of = tokens.tolist()
    children = _children(parents.tolist())
    q_of = None if draft_probs is None else draft_probs.tolist()
    path = [0]
    while True:
        node = path[-1]
        p = target_probs[node]
        kids = children[node]
        if not kids:
            return Acceptance(path=path, bonus=_sample(p, generator))
        kid_q = None if q_of is None else [q_of[c] for c in kids]
        result = _try_children(p, [token_of[c] for c in kids], kid_q, generator)
        if result.accepted is None:
            assert result.residual is not None
            return Acceptance(path=path, bonus=_sample(result.residual, generator))
        path.append(kids[result.accepted])


def _children(parents: list[int]) -> list[list[int]]:
    """Children of every node, in index order (the order they are tried)."""
    children: list[list[int]] = [[] for _ in parents]
    for node in range(1, len(parents)):
        children[parents[node]].append(node)
    return children


class _NodeResult(NamedTuple):
    accepted: int | None  # index into the node's children, or None when all were rejected
    residual: torch.Tensor | None  # FloatTensor[V] unnormalised, the bonus distribution when rejected


def _try_children(
    p: torch.Tensor, kid_tokens: list[int], kid_q: list[float] | None, generator: torch.Generator | None
) -> _NodeResult:
    """Try one node's children, in order, against its target distribution p: FloatTensor[V]."""
    k = len(kid_tokens)
    tok = torch.tensor(kid_tokens, device=p.device)
    # One host sync per node: sibling weights, the mass outside the siblings, and one uniform per child.
    other = p.index_fill(0, tok, 0.0).sum()
    coins = torch.rand(k, generator=generator, device=p.device)
    host = torch.cat([p[tok].double(), other.double()[None], coins.double()]).tolist()
    w, other_mass, coin = host[:k], host[k], host[k + 1 :]
    node_mass = other_mass + sum(w)
    if node_mass <= 0:
        raise ValueError("the target distribution has no mass")
    q_left = 0.0 if kid_q is None else sum(kid_q)
    for i in range(k):
        before = list(w)
        total = other_mass + sum(w)
        if kid_q is None:
            accepted = _point_mass_trial(w, i, total, coin[i])
        elif kid_q[i] <= 0 or q_left <= 0:
            # q_k(x) = 0: the drafter could not have drawn x here. Skipping it is what a draw from
            # q_k would have done, and leaves p_k untouched.
            continue
        else:
            accepted = _draft_trial(w, i, total, coin[i], kid_q, q_left)
            q_left -= kid_q[i]
        if accepted:
            return _NodeResult(accepted=i, residual=None)
        if other_mass + sum(w) <= _MIN_RESIDUAL * node_mass:
            # Rounding left (almost) nothing: stop and draw the bonus from p_k, the distribution
            # this trial was meant to reproduce.
            return _NodeResult(accepted=None, residual=_residual(p, tok, before))
    return _NodeResult(accepted=None, residual=_residual(p, tok, w))


def _point_mass_trial(w: list[float], i: int, total: float, coin: float) -> bool:
    """q_k = delta(x_i): accept with probability p_k(x_i) = w[i] / W; else w <- max(w - W delta, 0).

    On rejection w[i] becomes 0 in place (w[i] <= W, so max(w[i] - W, 0) = 0); nothing else moves.
    """
    if coin * total < w[i]:
        return True
    w[i] = 0.0
    return False


def _draft_trial(
    w: list[float], i: int, total: float, coin: float, kid_q: list[float], q_left: float
) -> bool:
    """q_k(x_j) = kid_q[j] / q_left on the untried children j >= i; accept with min(1, p_k / q_k).

    On rejection w <- max(w - W q_k, 0) in place; tried children (j < i) have q_k = 0 and keep w.
    """
    if coin * total * kid_q[i] < w[i] * q_left:
        return True
    for j in range(i, len(w)):
        w[j] = max(w[j] - total * kid_q[j] / q_left, 0.0)
    return False


def _residual(p: torch.Tensor, tok: torch.Tensor, w: list[float]) -> torch.Tensor:
    """p: FloatTensor[V] with the siblings' weights replaced by w (unnormalised, like p_k * W)."""
    return p.index_put((tok,), torch.tensor(w, dtype=p.dtype, device=p.device))


def _sample(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from unnormalised weights: FloatTensor[V] -> token id."""
    return int(torch.multinomial(weights, 1, generator=generator).item())
