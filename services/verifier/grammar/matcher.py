"""One request's place in its grammar, and the tokens each tree row may predict.

The matcher has taken every committed output token, so a tree's root row (which predicts the next
token) gets the matcher's own mask; node j's row gets the mask after the drafted tokens on j's path.
A depth-first walk takes each node's token, fills its row, visits its children and rolls back. A
drafted token the grammar refuses makes its subtree unreachable (its parent's row gives it
probability 0), so those rows allow everything: they are never used.

With a reasoning gate (reasoning_gate.py) the grammar holds only once the output has passed the end of
its reasoning: rows before that allow everything and their tokens are not the grammar's, per path
of the tree too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from treespec.verifier.grammar.reasoning_gate import OPEN, GateState, ReasoningGate

log = logging.getLogger(__name__)


class GrammarState:
    def __init__(self, compiled: Any, vocab_size: int, gate: ReasoningGate | None = None) -> None:
        import xgrammar

        self._xgrammar = xgrammar
        self._matcher = xgrammar.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self._gate = gate
        self._gate_state: GateState = OPEN if gate is None else gate.closed

    @property
    def terminated(self) -> bool:
        return self._gate_state is OPEN and bool(self._matcher.is_terminated())

    def allowed(self, tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """BoolTensor[n, vocab]: what each of a tree's rows may predict (node 0: the root, already
        taken; parents before children)."""
        n = len(tokens)
        bitmask = self._xgrammar.allocate_token_bitmask(n, self.vocab_size)  # all allowed
        children: list[list[int]] = [[] for _ in range(n)]
        for j in range(1, n):
            children[parents[j]].append(j)
        self._fill(0, children, tokens, bitmask, self._gate_state)
        return _unpack(bitmask, self.vocab_size)

    def _fill(
        self,
        node: int,
        children: list[list[int]],
        tokens: Sequence[int],
        bitmask: torch.Tensor,
        gate: GateState,
    ) -> None:
        if gate is not OPEN:  # still reasoning on this path: the row allows everything
            assert self._gate is not None
            for child in children[node]:
                self._fill(child, children, tokens, bitmask, self._gate.after(gate, int(tokens[child])))
            return
        if self._matcher.is_terminated():
            return  # the request ends at this node's token: its row is never used
        self._matcher.fill_next_token_bitmask(bitmask, node)
        for child in children[node]:
            if self._matcher.accept_token(int(tokens[child])):
                self._fill(child, children, tokens, bitmask, OPEN)
                self._matcher.rollback(1)

    def advance(self, tokens: Sequence[int]) -> int | None:
        """Take committed tokens in order; the index of the one that ends the grammar, if any. A token
        the grammar refuses ends it there too (it cannot happen when every token came from a masked
        row; logged, so that a bug shows)."""
        for i, token in enumerate(tokens):
            if self._gate_state is not OPEN:
                assert self._gate is not None
                self._gate_state = self._gate.after(self._gate_state, int(token))
                continue
            if not self._matcher.accept_token(int(token)):
                log.error(
                    "structured output: the grammar refused committed token %d; ending the request", token
                )
                return i
            if self._matcher.is_terminated():
                return i
        return None


def _unpack(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """xgrammar's int32 bitmask [n, ceil(V / 32)] (bit b of word w: token 32 w + b) -> bool [n, V]."""
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask[:, :, None] >> shifts) & 1
    return bits.flatten(1)[:, :vocab_size].bool()
