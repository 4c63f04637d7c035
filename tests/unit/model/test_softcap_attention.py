"""Soft-capped attention (Gemma 2): with a cap far above the scores it is SDPA's attention (masks,
causal chains, grouped heads), and a small cap flattens the weights as cap * tanh(score / cap) says."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from treespec.shared.model.attention.softcap import softcapped_attention


def _inputs(q: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(q * 100 + k)
    return (
        torch.randn(2, 4, q, 8, generator=g),
        torch.randn(2, 2, k, 8, generator=g),
        torch.randn(2, 2, k, 8, generator=g),
    )


@pytest.mark.parametrize("case", ["mask", "causal", "none"])
def test_a_cap_far_above_the_scores_is_sdpa(case: str) -> None:
    q, k, v = _inputs(5, 5 if case == "causal" else 9)
    mask = (
        torch.rand(2, 1, 5, 9, generator=torch.Generator().manual_seed(0)) > 0.3 if case == "mask" else None
    )
    if mask is not None:
        mask[..., 0] = True  # every query sees a key
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=case == "causal", enable_gqa=True
    )
    got = softcapped_attention(q, k, v, mask, case == "causal", softcap=1e6)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_small_cap_bounds_the_scores() -> None:
    q, k, v = _inputs(3, 6)
    cap = 0.5
    got = softcapped_attention(q, k, v, None, False, softcap=cap)
    keys, values = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = torch.tanh(q @ keys.transpose(-1, -2) / math.sqrt(8) / cap) * cap
    torch.testing.assert_close(got, torch.softmax(scores, dim=-1) @ values)
    assert not torch.allclose(got, F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-3)
