"""The head's attention for a few drafting rows (attend_rows) against scaled_dot_product_attention."""

from __future__ import annotations

import pytest
import torch

from treespec.drafter.eagle.head import attend, attend_rows


@pytest.mark.parametrize(("heads", "kv_heads"), [(9, 3), (4, 4), (8, 1)])
@pytest.mark.parametrize("rows", [1, 4, 13])
def test_attend_rows_equals_attention_with_a_mask(heads: int, kv_heads: int, rows: int) -> None:
    g = torch.Generator().manual_seed(heads * 100 + rows)
    keys, d = 37, 16
    q = torch.randn(rows, heads, d, generator=g)
    k = torch.randn(keys, kv_heads, d, generator=g)
    v = torch.randn(keys, kv_heads, d, generator=g)
    mask = torch.rand(rows, keys, generator=g) < 0.6
    mask[:, 0] = True  # every row attends to something
    torch.testing.assert_close(attend_rows(q, k, v, mask), attend(q, k, v, mask), rtol=1e-5, atol=1e-6)


def test_a_masked_key_changes_nothing() -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 8, generator=g)
    k, v = torch.randn(5, 2, 8, generator=g), torch.randn(5, 2, 8, generator=g)
    mask = torch.tensor([[True, True, False, True, False], [True, False, False, True, True]])
    before = attend_rows(q, k, v, mask)
    k[2], v[2] = 100.0, 100.0  # masked for both rows
    torch.testing.assert_close(attend_rows(q, k, v, mask), before)
