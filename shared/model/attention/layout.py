"""What one ragged forward holds, described independently of the attention backend."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SequenceLayout:
    """One request's part of a forward: new tokens appended after its cached prefix.

    A prefill chunk or a plain decode token is a chain; a draft tree gives parent indices among the new
    tokens (-1: attached to the cached prefix). New token j is written to logical slot cached_len + j
    (tree nodes land in scratch slots after the committed length).
    """

    cached_len: int
    kv_slots: torch.Tensor  # [cached_len + num_new] long: flat KV slot of every logical position
    positions: torch.Tensor  # [num_new] long: RoPE position of each new token (committed length + depth)
    tree_parents: torch.Tensor | None = None  # [num_new] long, or None for a chain

    @property
    def num_new(self) -> int:
        return int(self.positions.shape[0])

    @property
    def kv_len(self) -> int:
        return self.cached_len + self.num_new


@dataclass(frozen=True)
class BatchLayout:
    sequences: list[SequenceLayout]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new for s in self.sequences)

    def positions(self) -> torch.Tensor:
        return torch.cat([s.positions for s in self.sequences])

    def write_slots(self) -> torch.Tensor:
        """[T] flat slot where each new token's K and V go."""
        return torch.cat([s.kv_slots[s.cached_len :] for s in self.sequences])
