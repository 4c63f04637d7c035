"""The copy ceiling: what an n-gram drafter could at best accept from a request's own history.

An n-gram drafter proposes what followed earlier occurrences of the request's latest tokens. Replay the
target's greedy output step by step with a drafter that knows the future: at each step it looks at
every earlier place in the history (prompt and output so far) that follows the same last
`min_window` tokens, picks the one whose continuation the target then agrees with furthest (at most
`depth` tokens), and drafts exactly the agreeing part, so that every drafted node is accepted. Any
tree built from such continuations accepts no more: a tree's accepted path is a prefix of one of its
continuations. So the ceiling tells how much of an output a copying drafter can reach at all, apart
from what a memory shared with other requests adds, and, timed at plain decoding's step and the
verifier's node cost, how fast such a perfect drafter would decode (bench/ngram_bench.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from treespec.drafter.ngram.history_index import RequestIndex
from treespec.verifier.prediction import common_prefix


@dataclass(frozen=True)
class CopyCeiling:
    """The replay of one output after its first token (which the prefill gives)."""

    steps: int  # verify steps
    drafted: int  # nodes drafted, every one accepted
    trees: int  # steps that drafted at all

    @property
    def committed(self) -> int:
        return self.steps + self.drafted

    def decode_steps(self, node_cost: float, tree_cost: float = 0.0) -> float:
        """Its decoding time in plain decoding steps: each step, plus its nodes' and tree's costs."""
        return self.steps + self.drafted * node_cost + self.trees * tree_cost


def copy_ceiling(prompt: Sequence[int], output: Sequence[int], min_window: int, depth: int) -> CopyCeiling:
    """Replays `output` after `prompt` with the perfect copying drafter (module docstring): matches of
    at least `min_window` tokens, chains of at most `depth` nodes."""
    if min_window < 1 or depth < 0:
        raise ValueError("need min_window >= 1 and depth >= 0")
    if not output:
        return CopyCeiling(0, 0, 0)
    # The drafter's own index, over the one window (longer matches are among its places) and keeping
    # every earlier place of each n-gram.
    history = RequestIndex(min_window, min_window, positions_per_ngram=len(prompt) + len(output))
    history.extend([*prompt, output[0]])
    position, steps, drafted, trees = 1, 0, 0, 0
    while position < len(output):
        room = min(depth, len(output) - position - 1)  # every step commits one token of its own
        wanted = output[position : position + room]
        matches = history.matches(room, limit=len(history.tokens))
        best = max((common_prefix(m.continuation, wanted) for m in matches), default=0)
        history.extend(output[position : position + best + 1])
        position += best + 1
        steps, drafted, trees = steps + 1, drafted + best, trees + (best > 0)
    return CopyCeiling(steps, drafted, trees)
