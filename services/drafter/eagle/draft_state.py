"""Per request: the token history, the draft KV cache, and features not yet run through the head."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from treespec.shared.drafting.child_odds import ChildOdds
from treespec.shared.drafting.draft_pacing import DraftPacing


@dataclass
class DraftKV:
    """K/V of the head for positions [first, first + length), then scratch rows: the tree nodes of the
    step being drafted, which attend to the cache and to each other where they lie, so that no step
    copies the cache. Grows by doubling."""

    k: torch.Tensor  # [capacity, kv_heads, head_dim]
    v: torch.Tensor
    length: int = 0

    @classmethod
    def empty(cls, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> DraftKV:
        shape = (64, kv_heads, head_dim)
        return cls(
            torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device)
        )

    def write(self, offset: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Put rows at scratch row `offset` (past the cache; earlier scratch rows are kept); return the
        keys and values of the cache and of every scratch row up to these, to attend to."""
        start = self.length + offset
        end = start + k.shape[0]
        self.reserve(end)
        self.k[start:end] = k
        self.v[start:end] = v
        return self.k[:end], self.v[:end]

    def reserve(self, end: int) -> None:
        """Room for rows up to `end` (cache and scratch rows), the rows before it kept."""
        held = self.k.shape[0]
        if end > held:
            self.k = _grown(self.k, max(end, 2 * held), held)
            self.v = _grown(self.v, max(end, 2 * held), held)

    def keep(self, rows: int) -> None:
        """The first `rows` scratch rows join the cache."""
        self.length += rows


def _grown(t: torch.Tensor, size: int, used: int) -> torch.Tensor:
    out = torch.empty((size, *t.shape[1:]), dtype=t.dtype, device=t.device)
    out[:used] = t[:used]
    return out


@dataclass
class DraftState:
    """`tokens`: prompt + committed. The head has processed the pairs (feature of position i, token
    i + 1) for positions up to `next_position - 1`; `pending` holds features of later positions."""

    tokens: list[int]
    kv: DraftKV
    next_position: int = 0
    pending: list[torch.Tensor] = field(default_factory=list)  # rows for next_position, ...
    pending_start: int = 0
    last_hidden: torch.Tensor | None = None  # [H]: head output at next_position - 1
    last_logprobs: torch.Tensor | None = None  # [draft vocab]: its next-token distribution (log)
    pacing: DraftPacing = field(default_factory=DraftPacing)  # whether drafting pays for this request
    child_odds: ChildOdds = field(default_factory=ChildOdds)  # what a level of its trees is worth

    def add_features(self, start: int, rows: torch.Tensor) -> None:
        """Features of positions start, start + 1, ...; already processed ones are dropped (a recompute),
        and a gap (features lost, e.g. a reopen) restarts the cache at `start`."""
        end_pending = self.pending_start + sum(r.shape[0] for r in self.pending)
        known_until = end_pending if self.pending else self.next_position
        if start < known_until:
            rows = rows[known_until - start :]
            start = known_until
        if rows.shape[0] == 0:
            return
        if start > known_until:  # a gap: what came before cannot be attended to any more
            self.pending = []
            self.next_position = start
            self.kv.length = 0
            self.last_hidden = self.last_logprobs = None
        if not self.pending:
            self.pending_start = start
        self.pending.append(rows)

    def take_pending(self) -> tuple[int, torch.Tensor] | None:
        """(first position, rows) of the features to run now, limited to positions whose next token is
        known."""
        if not self.pending:
            return None
        rows = torch.cat(self.pending)
        usable = min(rows.shape[0], len(self.tokens) - 1 - self.pending_start)
        if usable <= 0:
            return None
        start = self.pending_start
        rest = rows[usable:]
        self.pending = [rest] if rest.shape[0] else []
        self.pending_start = start + usable
        return start, rows[:usable]

    @property
    def ready(self) -> bool:
        """The head has run up to the last committed token's predecessor: it can draft from the root."""
        return self.last_logprobs is not None and self.next_position == len(self.tokens) - 1
