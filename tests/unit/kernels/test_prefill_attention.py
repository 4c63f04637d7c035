"""The prefill attention kernel against SDPA with the causal mask (its reference), its row independence,
what it refuses, and the attention backend's use of it."""

from __future__ import annotations

import pytest
import torch

from treespec.kernels.prefill_attention import (
    PrefillAttention,
    PrefillAttentionPlan,
    PrefillSequence,
    build_prefill_attention,
    reference_attend,
)
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.kv_cache import KVCache

SLOTS = 2048


@pytest.fixture(scope="module")
def kernel() -> PrefillAttention:
    built = build_prefill_attention()
    assert built is not None, (
        "the prefill attention kernel did not build (a C++ compiler and ninja are needed)"
    )
    return built


def _pools(kv_heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SLOTS, kv_heads, head_dim, generator=g), torch.randn(
        SLOTS, kv_heads, head_dim, generator=g
    )


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 128), (8, 2, 256), (2, 1, 32), (4, 2, 16)]
)
@pytest.mark.parametrize("cached", [0, 1, 64, 700])
@pytest.mark.parametrize("num_new", [33, 64, 101])
def test_it_attends_as_sdpa_with_the_causal_mask(
    kernel: PrefillAttention, heads: int, kv_heads: int, head_dim: int, cached: int, num_new: int
) -> None:
    k, v = _pools(kv_heads, head_dim, cached + num_new)
    g = torch.Generator().manual_seed(num_new)
    slots = torch.randperm(SLOTS, generator=g)  # scattered slots, as a fragmented pool gives
    # Scores of a few units, as a model's are: a large spread makes the softmax's running max matter.
    q = 3 * torch.randn(num_new + 5, heads, head_dim, generator=g)
    seqs = [PrefillSequence(3, cached, slots[: cached + num_new])]
    assert kernel.fits(q, k)
    got = kernel.attend(q, k, v, PrefillAttentionPlan.of(seqs))
    assert got.shape == (num_new, heads * head_dim)
    # Float32 rounding, larger with head_dim 256's longer dot products: a few 1e-6 either way.
    torch.testing.assert_close(got, reference_attend(q, k, v, seqs), rtol=1e-4, atol=1e-5)


def test_a_batch_of_chunks_attends_each_over_its_own_keys(kernel: PrefillAttention) -> None:
    k, v = _pools(3, 64, 7)
    slots = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(7))
    q = torch.randn(300, 9, 64)
    seqs = [
        PrefillSequence(0, 0, slots[:100]),
        PrefillSequence(100, 500, slots[100:640]),
        PrefillSequence(140, 37, slots[700:860]),
    ]
    got = kernel.attend(q, k, v, PrefillAttentionPlan.of(seqs))
    torch.testing.assert_close(got, reference_attend(q, k, v, seqs), rtol=1e-5, atol=2e-6)


def test_a_rows_result_does_not_depend_on_the_rows_after_it(kernel: PrefillAttention) -> None:
    """A longer chunk from the same position leaves its first rows bit for bit: a row sees the same keys
    in the same blocks whatever follows it."""
    k, v = _pools(3, 64, 11)
    slots = torch.arange(SLOTS)
    q = torch.randn(200, 9, 64)
    long = kernel.attend(q, k, v, PrefillAttentionPlan.of([PrefillSequence(0, 90, slots[:290])]))
    for rows in (1, 31, 32, 45, 130):
        short = kernel.attend(q, k, v, PrefillAttentionPlan.of([PrefillSequence(0, 90, slots[: 90 + rows])]))
        assert torch.equal(short, long[:rows])


def test_it_refuses_what_it_does_not_take(kernel: PrefillAttention) -> None:
    k, v = _pools(3, 64, 13)
    assert not kernel.fits(torch.randn(40, 9, 64, dtype=torch.float64), k.double())
    assert not kernel.fits(torch.randn(40, 3, 48), torch.randn(SLOTS, 3, 48))  # head_dim 48
    assert not kernel.fits(torch.randn(40, 4, 64), torch.randn(SLOTS, 3, 64))  # 4 heads over 3 KV heads
    outside = PrefillSequence(0, 10, torch.tensor([*range(49), SLOTS + 5]))
    with pytest.raises(RuntimeError, match="slot out of range"):
        kernel.attend(torch.randn(40, 9, 64), k, v, PrefillAttentionPlan.of([outside]))
    with pytest.raises(RuntimeError, match="rows out of range"):
        kernel.attend(
            torch.randn(40, 9, 64), k, v, PrefillAttentionPlan.of([PrefillSequence(1, 0, torch.arange(40))])
        )


def _cache(seed: int) -> KVCache:
    k_pool, v_pool = _pools(3, 64, seed)
    return KVCache(k_pool.view(1, SLOTS // 16, 16, 3, 64), v_pool.view(1, SLOTS // 16, 16, 3, 64), 16)


def _attend_both(
    layout: BatchLayout, backend: TorchAttentionBackend, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    sdpa = TorchAttentionBackend(backend.sliding_window, row_kernel=False, prefill_kernel=False)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(layout.num_tokens, 9, 64, generator=g)
    k = torch.randn(layout.num_tokens, 3, 64, generator=g)
    v = torch.randn(layout.num_tokens, 3, 64, generator=g)
    got = backend.attend(backend.plan(layout, torch.device("cpu")), 0, q, k, v, _cache(seed))
    want = sdpa.attend(sdpa.plan(layout, torch.device("cpu")), 0, q, k, v, _cache(seed))
    return got, want


@pytest.mark.parametrize(
    "chunks",
    [
        [SequenceLayout(0, torch.arange(300), torch.arange(300))],  # a prompt's first chunk
        [SequenceLayout(200, torch.arange(260), torch.arange(200, 260))],  # a later one
        # Two prompts' chunks in one group, their slots out of order.
        [
            SequenceLayout(100, torch.arange(1000, 1200).flip(0), torch.arange(100, 200)),
            SequenceLayout(60, torch.arange(1300, 1450), torch.arange(60, 150)),
        ],
    ],
    ids=["first-chunk", "later-chunk", "two-chunks"],
)
def test_the_backend_sends_prefill_chunks_to_the_kernel(chunks: list[SequenceLayout]) -> None:
    backend = TorchAttentionBackend()
    layout = BatchLayout(chunks)
    plan = backend.plan(layout, torch.device("cpu"))
    assert len(plan.groups) == 1 and plan.groups[0].prefill is not None
    got, want = _attend_both(layout, backend, 21)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


def test_chunks_past_a_sliding_window_and_long_trees_stay_with_sdpa() -> None:
    windowed = TorchAttentionBackend(sliding_window=128)
    past = BatchLayout([SequenceLayout(100, torch.arange(200), torch.arange(100, 200))])
    assert all(group.prefill is None for group in windowed.plan(past, torch.device("cpu")).groups)
    got, want = _attend_both(past, windowed, 22)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)
    within = BatchLayout([SequenceLayout(30, torch.arange(100), torch.arange(30, 100))])
    assert all(group.prefill is not None for group in windowed.plan(within, torch.device("cpu")).groups)
    parents = torch.arange(40) - 1  # a 40-node chain verified as a tree: past the row kernel, not a prefill
    tree = BatchLayout([SequenceLayout(10, torch.arange(50), torch.arange(10, 50), parents)])
    plan = TorchAttentionBackend().plan(tree, torch.device("cpu"))
    assert all(group.prefill is None and group.rows is None for group in plan.groups)
