"""compact_kv moves rows of every layer, in place, safely when source and destination overlap."""

from __future__ import annotations

import pytest
import torch

from treespec.kernels.kv_compaction import compact_kv


def caches(layers: int = 3, slots: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    k = torch.randn(layers, slots, 2, 4, generator=g)
    v = torch.randn(layers, slots, 2, 8, generator=g)  # V may be wider than K
    return k, v


def reference(cache: torch.Tensor, src: list[int], dst: list[int]) -> torch.Tensor:
    out = cache.clone()
    for s, d in zip(src, dst, strict=True):
        out[:, d] = cache[:, s]
    return out


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ([6, 8, 11], [5, 6, 7]),  # accepted path 6 -> 8 -> 11 moves down onto itself
        ([3, 4, 5], [4, 5, 6]),  # shifted up by one: every destination is a later source
        ([9, 2], [2, 9]),  # a swap
        ([10], [10]),  # already in place
    ],
)
def test_moves_rows_of_every_layer(src: list[int], dst: list[int]) -> None:
    k, v = caches()
    expected_k, expected_v = reference(k, src, dst), reference(v, src, dst)
    compact_kv(k, v, torch.tensor(src), torch.tensor(dst))
    assert torch.equal(k, expected_k)
    assert torch.equal(v, expected_v)


def test_works_on_flat_views_of_a_block_pool() -> None:
    pool = torch.randn(2, 4, 4, 1, 2, generator=torch.Generator().manual_seed(1))  # L, blocks, block, H, D
    before = pool.clone()
    k = pool.flatten(1, 2)
    compact_kv(k, k.clone(), torch.tensor([9, 13]), torch.tensor([8, 9]))
    assert torch.equal(pool[:, 2, 0], before[:, 2, 1])  # slot 8 = block 2, offset 0
    assert torch.equal(pool[:, 2, 1], before[:, 3, 1])  # slot 9 <- slot 13 = block 3, offset 1


def test_empty_move_is_a_no_op() -> None:
    k, v = caches()
    k0, v0 = k.clone(), v.clone()
    empty = torch.tensor([], dtype=torch.long)
    compact_kv(k, v, empty, empty)
    assert torch.equal(k, k0)
    assert torch.equal(v, v0)


def test_mismatched_slots_raise() -> None:
    k, v = caches()
    with pytest.raises(ValueError, match="not equal"):
        compact_kv(k, v, torch.tensor([1, 2]), torch.tensor([3]))
