"""One request's place in its grammar, and the tokens each tree row may predict.

The matcher has taken every committed output token, so a tree's root row (which predicts the next
token) gets the matcher's own mask; node j's row gets the mask after the drafted tokens on j's path.
A depth-first walk takes each node's token, fills its row, visits its children and rolls back. A
drafted token the grammar refuses makes its subtree unreachable (its parent's row gives it
probability 0), so those rows allow everything: they are never used.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)


class GrammarState:
    def __init__(self, compiled: Any, vocab_size: int) -> None:
        import xgrammar

        self._xgrammar = xgrammar
        self._matcher = xgrammar.GrammarMatcher(compiled)
        self.vocab_size = vocab_size

    @property
    def terminated(self) -> bool:
        return bool(self._matcher.is_terminated())

    def allowed(self, tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """BoolTensor[n, vocab]: what each of a tree's rows may predict (node 0: the root, already
        taken; parents before children)."""
        n = len(tokens)
        bitmask = self._xgrammar.allocate_token_bitmask(n, self.vocab_size)  # all allowed
        children: list[list[int]] = [[] for _ in range(n)]
        for j in range(1, n):
            children[parents[j]].append(j)
        self._fill(0, children, tokens, bitmask)
        return _unpack(bitmask, self.vocab_size)

    def _fill(
        self, node: int, children: list[list[int]], tokens: Sequence[int], bitmask: torch.Tensor
    ) -> None:
        if self._matcher.is_terminated():
            return  # the request ends at this node's token: its row is never used
        self._matcher.fill_next_token_bitmask(bitmask, node)
        for child in children[node]:
            if self._matcher.accept_token(int(tokens[child])):
                self._fill(child, children, tokens, bitmask)
                self._matcher.rollback(1)

    def advance(self, tokens: Sequence[int]) -> int | None:
        """Take committed tokens in order; the index of the one that ends the grammar, if any. A token
        the grammar refuses ends it there too (it cannot happen when every token came from a masked
        row; logged, so that a bug shows)."""
        for i, token in enumerate(tokens):
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
