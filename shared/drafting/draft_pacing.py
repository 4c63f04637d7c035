"""Draft less for a request whose drafts do not pay for themselves.

A drafting step costs the head passes it takes (the catch-up and each level grown, `level_cost` of a
target decode step each, shared by the requests in the pass) and the verify work of the nodes it
proposes (the budget's tree and node costs). It gains the tokens of its tree that the target then
commits: how deep the committed tokens go along the tree, whichever drafter's tree was verified.

A request whose recent gains fall below their costs (averages over its last steps; the head cannot
predict this text: another language, unusual code) is left out of drafting for 1, then 2, 4 ... up to
`MAX_WAIT` steps, and then drafted for again: a probe. A probe that pays starts the averages afresh
from it (the text may have changed), one that does not doubles the wait. Its features wait in
its draft state, and the catch-up that follows runs them in one pass, which costs about what a single
row costs (the pass reads the head's weights once). So a head that cannot help a request costs a
probe now and then instead of every step, and one that helps is never held back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from treespec.shared.drafting.token_tree import TokenTree

NEW_WEIGHT = 0.1  # the newest step's weight in the averages
MIN_STEPS = 8  # steps seen before a request may be left out
# Left out only while gains stay below this share of the costs: gains come in bursts (a predictable
# stretch after a surprising one), and a wait that misses a burst costs more than a useless draft.
PAYS_SHARE = 0.5
MAX_WAIT = 16  # the most steps a request is left out in a row


@dataclass
class DraftPacing:
    gain: float = 0.0  # average tokens a drafting step added
    cost: float = 0.0  # average cost of a drafting step, in target decode steps
    steps: int = 0  # drafting steps whose outcome is known
    wait: int = 0  # steps still to leave out
    next_wait: int = 1
    probing: bool = False  # the step being drafted ends a wait
    _children: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, token) -> child
    _cost: float | None = None  # the last drafting step's cost, until its outcome is known

    def drafts_now(self) -> bool:
        """Whether to draft this step; a step left out counts down the wait."""
        if self.wait > 0:
            self.wait -= 1
            self.probing = self.wait == 0
            return False
        return True

    def drafted(self, tree: TokenTree | None, head_cost: float, tree_cost: float, node_cost: float) -> None:
        """This step's proposal (None: none) and the share of head passes it took."""
        self._children = {}
        cost = head_cost
        if tree is not None:
            tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
            for node in range(1, len(tokens)):
                self._children[(parents[node], tokens[node])] = node
            cost += tree_cost + node_cost * (len(tokens) - 1)
        self._cost = cost

    def committed(self, tokens: Sequence[int]) -> None:
        """The tokens the verifier committed after the last proposal: how far they follow its tree."""
        if self._cost is None:
            return
        node, gained = 0, 0
        for token in tokens:
            child = self._children.get((node, token))
            if child is None:
                break
            node, gained = child, gained + 1
        self._observe(gained, self._cost)
        self._cost, self._children = None, {}

    def _observe(self, gained: int, cost: float) -> None:
        fresh = self.steps == 0 or (self.probing and gained > cost)
        w = 1.0 if fresh else NEW_WEIGHT
        self.gain += w * (gained - self.gain)
        self.cost += w * (cost - self.cost)
        self.steps += 1
        self.probing = False
        if self.steps >= MIN_STEPS and self.gain < PAYS_SHARE * self.cost:
            self.wait, self.next_wait = self.next_wait, min(2 * self.next_wait, MAX_WAIT)
        else:
            self.next_wait = 1
