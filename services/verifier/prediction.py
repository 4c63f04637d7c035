"""Drafting from a request's predicted output (OpenAI's `prediction`): text the output should repeat.

A client that edits a file sends the file as the prediction; most of the output is then the
prediction with a few changes. The verifier keeps an alignment between the output and the
prediction: while the committed tokens follow the prediction, the next draft is simply what comes
next in it (a chain). After an edit the output leaves the prediction, and the alignment is found
again where the output's latest tokens occur in the prediction, the longest match first, nearest
to where it left off. A chain drafts point masses, so verifying it is lossless at any temperature.

How far to trust the chain is learnt per request: each chain token the target accepted is a
success, the first it rejected a failure (a geometric model: a node at depth d is accepted with
probability rate^d). The same request's drafter trees are valued by what they committed on
average, so the request drafts from whichever is expected to commit more.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_value import nodes_worth_verifying

MAX_BACKWARD_MATCH = 32  # tokens compared when scoring where the output re-joins the prediction
NEAREST_CANDIDATES = 64  # occurrences of the last token examined, nearest to the alignment first
NEAR_AFTER_EDIT = 16  # a one-token match re-joins the prediction only this close after the alignment
PRIOR_ACCEPTED, PRIOR_REJECTED = 4.0, 1.0  # chain tokens: a prior rate of 0.8
PRIOR_TREES, PRIOR_TREE_GAIN = 2.0, 0.5  # drafter trees: a prior of 0.5 tokens accepted per tree


@dataclass
class Outcomes:
    """Running counts of one kind of draft for one request."""

    accepted: float
    rejected: float

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)


@dataclass
class PredictedOutput:
    """One request's prediction, its alignment with the output, and what its drafts achieved."""

    tokens: Sequence[int]
    max_rows: int  # a chain's rows at most, its root included
    _where: dict[int, list[int]] = field(init=False, repr=False)  # token -> ascending positions
    cursor: int | None = None  # the prediction position the output is expected to continue with
    seen: int = 0  # the request's tokens already followed (prompt + output)
    _chain: list[int] = field(default_factory=list)  # the chain drafted last, if it was used
    _tree_used: bool = False  # whether the drafter's tree was used last step
    _lost_at: int = 0  # the alignment when the output last left the prediction
    _lost_len: int = 0  # the output's length then
    chain_outcomes: Outcomes = field(default_factory=lambda: Outcomes(PRIOR_ACCEPTED, PRIOR_REJECTED))
    tree_accepted: float = PRIOR_TREES * PRIOR_TREE_GAIN
    trees: float = PRIOR_TREES

    def __post_init__(self) -> None:
        self._where = {}
        for i, token in enumerate(self.tokens):
            self._where.setdefault(token, []).append(i)

    # ---- following the output -------------------------------------------------------------------

    def follow(self, history: Sequence[int], num_prompt: int) -> None:
        """Take in the tokens committed since the last call (history = prompt + output): score the
        last step's draft, and move the alignment along where the output kept to the prediction."""
        start = max(self.seen, num_prompt)
        new = list(history[start:])
        self.seen = len(history)
        if not new:
            return
        self._score(new)
        if self.cursor is None and start == num_prompt:
            self.cursor = 0  # the output's first token: the prediction's start is where it begins
        for i, token in enumerate(new):
            if self.cursor is None:
                continue
            if self.cursor < len(self.tokens) and self.tokens[self.cursor] == token:
                self.cursor += 1
            else:  # it left the prediction here; found again when drafting
                self._lost_at, self._lost_len = self.cursor, len(history) - num_prompt - len(new) + i
                self.cursor = None
        self._chain, self._tree_used = [], False

    def _score(self, new: list[int]) -> None:
        accepted = len(new) - 1  # the last token is the target's own (bonus or correction)
        if self._chain:
            kept = common_prefix(self._chain, new[:accepted])
            self.chain_outcomes.accepted += kept
            self.chain_outcomes.rejected += kept < len(self._chain)
        elif self._tree_used:
            self.tree_accepted += accepted
            self.trees += 1

    # ---- drafting ----------------------------------------------------------------------------------

    def chain(
        self, history: Sequence[int], num_prompt: int, budget: TreeBudget, room: int | None = None
    ) -> TokenTree | None:
        """A chain from the prediction after the last committed token, within `max_rows` and the
        budget's costs, when it is expected to commit more than the request's drafter trees do, else
        None (the drafter's tree is used). `room`: how many more tokens the request may still commit
        (its token limit, the context); a chain drafts no further than that, less the bonus token."""
        at = self._aligned(history, num_prompt)
        if at is None:
            return None
        length = min(self.max_rows - 1, len(self.tokens) - at)
        if room is not None:
            length = min(length, room - 1)
        rate = self.chain_outcomes.rate
        values = [rate ** (d + 1) for d in range(length)]
        length = nodes_worth_verifying(values, budget.node_cost, budget.tree_cost)
        if length == 0 or sum(values[:length]) <= self.tree_accepted / self.trees:
            return None
        self._chain = list(self.tokens[at : at + length])
        return TokenTree.chain([history[-1], *self._chain])

    def used_tree(self) -> None:
        """The drafter's tree was verified this step (scored at the next `follow`)."""
        self._tree_used = True

    def _aligned(self, history: Sequence[int], num_prompt: int) -> int | None:
        """Where in the prediction the output continues, or None where it matches nothing there."""
        if self.cursor is None:
            self.cursor = self._rejoin(history[num_prompt:])
        if self.cursor is None or self.cursor >= len(self.tokens):
            return None
        return self.cursor

    def _rejoin(self, output: Sequence[int]) -> int | None:
        """After the output left the prediction: the position after the occurrence of its last token
        that ends the longest match with the output's latest tokens (two at least, or one shortly
        after where it left, as after a replaced word), nearest to where it would be first."""
        if not output:
            return None
        expected = self._lost_at + (len(output) - self._lost_len)
        best: tuple[int, int] | None = None  # (match length, -distance)
        found = None
        for q in self._nearest(output[-1], expected):
            length = _backward_match(self.tokens, q, output)
            if length < 2 and not 0 <= q - self._lost_at <= NEAR_AFTER_EDIT:
                continue
            score = (length, -abs(q + 1 - expected))
            if best is None or score > best:
                best, found = score, q + 1
        return found

    def _nearest(self, token: int, expected: int) -> list[int]:
        """Positions of `token` in the prediction, at most NEAREST_CANDIDATES around `expected`."""
        positions = self._where.get(token, [])
        if len(positions) <= NEAREST_CANDIDATES:
            return positions
        mid = bisect.bisect_left(positions, expected)
        lo = min(max(0, mid - NEAREST_CANDIDATES // 2), len(positions) - NEAREST_CANDIDATES)
        return positions[lo : lo + NEAREST_CANDIDATES]


def _backward_match(prediction: Sequence[int], q: int, output: Sequence[int]) -> int:
    """How many of the output's last tokens equal the prediction's tokens ending at position q."""
    n = 0
    while n < MAX_BACKWARD_MATCH and n <= q and n < len(output) and prediction[q - n] == output[-1 - n]:
        n += 1
    return n


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n
