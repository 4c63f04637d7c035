"""The row attention kernel against SDPA (its reference), its row independence, what it refuses, and
the attention backend's use of it."""

from __future__ import annotations

import pytest
import torch

from treespec.kernels.tree_attention import (
    MAX_QUERIES,
    RowAttentionPlan,
    RowSequence,
    TreeAttention,
    build_tree_attention,
    reference_attend,
)
from treespec.kernels.tree_mask import ancestor_mask, tree_depths
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.kv_cache import KVCache

SLOTS = 2048


@pytest.fixture(scope="module")
def kernel() -> TreeAttention:
    built = build_tree_attention()
    assert built is not None, "the row attention kernel did not build (a C++ compiler and ninja are needed)"
    return built


def _pools(kv_heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SLOTS, kv_heads, head_dim, generator=g), torch.randn(
        SLOTS, kv_heads, head_dim, generator=g
    )


def _sequence(row_start: int, cached: int, parents: list[int], slots: torch.Tensor) -> RowSequence:
    mask = ancestor_mask(torch.tensor(parents)) if len(parents) > 1 else torch.ones(1, 1, dtype=torch.bool)
    return RowSequence(row_start, cached, slots[: cached + len(parents)], mask)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim"),
    [(9, 3, 64), (4, 4, 128), (8, 2, 256), (8, 1, 64), (4, 2, 16), (2, 1, 32)],
)
@pytest.mark.parametrize("cached", [0, 1, 255, 256, 700])
@pytest.mark.parametrize("parents", [[-1], [-1, 0, 1, 2], [-1, 0, 0, 1, 1, 2, 4, 6], list(range(-1, 15))])
def test_it_attends_as_sdpa_with_the_mask(
    kernel: TreeAttention, heads: int, kv_heads: int, head_dim: int, cached: int, parents: list[int]
) -> None:
    k, v = _pools(kv_heads, head_dim, cached + len(parents))
    g = torch.Generator().manual_seed(len(parents))
    slots = torch.randperm(SLOTS, generator=g)  # scattered slots, as a fragmented pool gives
    q = torch.randn(len(parents) + 3, heads, head_dim, generator=g)
    seqs = [_sequence(2, cached, parents, slots)]
    plan = RowAttentionPlan.of(seqs)
    assert kernel.fits(q, k, plan)
    got = kernel.attend(q, k, v, plan)
    assert got.shape == (len(parents), heads * head_dim)
    torch.testing.assert_close(got, reference_attend(q, k, v, seqs), rtol=1e-5, atol=2e-6)


def test_a_batch_of_sequences_attends_each_over_its_own_keys(kernel: TreeAttention) -> None:
    k, v = _pools(3, 64, 7)
    slots = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(7))
    q = torch.randn(12, 9, 64)
    seqs = [
        _sequence(0, 40, [-1], slots[:100]),
        _sequence(1, 600, [-1, 0, 0, 2, 3], slots[100:800]),
        _sequence(6, 0, [-1], slots[800:]),
        _sequence(7, 300, [-1, 0, 1, 2, 3], slots[900:]),
    ]
    got = kernel.attend(q, k, v, RowAttentionPlan.of(seqs))
    torch.testing.assert_close(got, reference_attend(q, k, v, seqs), rtol=1e-5, atol=2e-6)


def test_a_chain_row_equals_the_decode_row_bit_for_bit(kernel: TreeAttention) -> None:
    """Row i of a verified chain after `cached` tokens is the decode row after cached + i tokens."""
    k, v = _pools(3, 64, 11)
    slots = torch.arange(SLOTS)
    q = torch.randn(10, 9, 64)
    cached = 250  # the chain straddles a chunk boundary (256 keys)
    chain = kernel.attend(q, k, v, RowAttentionPlan.of([_sequence(0, cached, list(range(-1, 9)), slots)]))
    for i in range(10):
        alone = kernel.attend(q, k, v, RowAttentionPlan.of([_sequence(i, cached + i, [-1], slots)]))
        assert torch.equal(alone, chain[i : i + 1])


def test_a_rows_result_does_not_depend_on_the_other_rows(kernel: TreeAttention) -> None:
    """More nodes appended to a tree (siblings, other branches) leave the earlier rows bit for bit."""
    k, v = _pools(3, 64, 12)
    slots = torch.arange(SLOTS)
    q = torch.randn(12, 9, 64)
    small = [-1, 0, 1, 0]
    large = [*small, 3, 0, 1, 5, 6, 6]
    a = kernel.attend(q, k, v, RowAttentionPlan.of([_sequence(0, 500, small, slots)]))
    b = kernel.attend(q, k, v, RowAttentionPlan.of([_sequence(0, 500, large, slots)]))
    assert torch.equal(a, b[: len(small)])


def test_it_refuses_what_it_does_not_take(kernel: TreeAttention) -> None:
    k, v = _pools(3, 64, 13)
    slots = torch.arange(SLOTS)
    rows = MAX_QUERIES // 3 + 1  # x 3 query heads per KV head: too many queries
    plan = RowAttentionPlan.of([_sequence(0, 10, list(range(-1, rows - 1)), slots)])
    assert not kernel.fits(torch.randn(rows, 9, 64), k, plan)
    small = RowAttentionPlan.of([_sequence(0, 10, [-1], slots)])
    assert not kernel.fits(torch.randn(1, 9, 64, dtype=torch.float64), k.double(), small)
    assert not kernel.fits(torch.randn(1, 3, 48), torch.randn(SLOTS, 3, 48), small)  # head_dim 48
    outside = RowSequence(0, 10, torch.tensor([*range(10), SLOTS + 5]), torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="slot out of range"):
        kernel.attend(torch.randn(1, 9, 64), k, v, RowAttentionPlan.of([outside]))
    with pytest.raises(RuntimeError, match="rows out of range"):
        kernel.attend(torch.randn(1, 9, 64), k, v, RowAttentionPlan.of([_sequence(1, 10, [-1], slots)]))


def test_the_backend_sends_decodes_and_trees_to_the_kernel_and_prefills_to_the_prefill_kernel(
    kernel: TreeAttention,
) -> None:
    k_pool, v_pool = _pools(3, 64, 14)
    cache = KVCache(k_pool.view(1, SLOTS // 16, 16, 3, 64), v_pool.view(1, SLOTS // 16, 16, 3, 64), 16)
    with_kernel = TorchAttentionBackend()
    sdpa = TorchAttentionBackend(row_kernel=False, prefill_kernel=False)
    parents = torch.tensor([-1, 0, 0, 1, 3])
    tree = SequenceLayout(40, torch.arange(45), 40 + tree_depths(parents), parents)
    decode = SequenceLayout(10, torch.arange(500, 511), torch.tensor([10]))
    prefill = SequenceLayout(0, torch.arange(600, 700), torch.arange(100))
    layout = BatchLayout([tree, decode, prefill])
    plan = with_kernel.plan(layout, torch.device("cpu"))
    # Three groups (by query and key length): the tree and the decode to this kernel, the prefill to its own.
    assert sorted(group.rows is not None for group in plan.groups) == [False, True, True]
    assert [group.prefill is not None for group in plan.groups] == [
        group.rows is None for group in plan.groups
    ]
    sdpa_plan = sdpa.plan(layout, torch.device("cpu"))
    assert all(group.rows is None and group.prefill is None for group in sdpa_plan.groups)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(layout.num_tokens, 9, 64, generator=g)
    k = torch.randn(layout.num_tokens, 3, 64, generator=g)
    v = torch.randn(layout.num_tokens, 3, 64, generator=g)
    got = with_kernel.attend(plan, 0, q, k, v, cache)
    want = sdpa.attend(sdpa_plan, 0, q, k, v, cache)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("cached", [0, 5, 300])
@pytest.mark.parametrize(("rows", "earlier"), [(1, 0), (1, 3), (4, 4), (4, 9)])
def test_rows_see_earlier_new_keys_as_their_mask_says(
    kernel: TreeAttention, cached: int, rows: int, earlier: int
) -> None:
    """An EAGLE tree level: rows after `earlier` new keys (the step's expanded nodes) that each row sees
    or not; sequences given with a sixth column, new_keys."""
    k, v = _pools(3, 64, cached + rows + earlier)
    g = torch.Generator().manual_seed(cached * 10 + rows + earlier)
    new_keys = earlier + rows
    slots = torch.randperm(SLOTS, generator=g)[: cached + new_keys]
    mask = torch.rand(rows, new_keys, generator=g) < 0.5
    mask[:, earlier:] = torch.eye(rows, dtype=torch.bool)  # each row sees itself among the rows
    q = torch.randn(rows, 9, 64, generator=g)
    sequences = torch.tensor([[0, rows, cached, 0, 0, new_keys]])
    got = kernel.module.attend(q, k, v, sequences, slots, mask.flatten().contiguous(), 64**-0.5)
    full = torch.cat([torch.ones(rows, cached, dtype=torch.bool), mask], dim=1)
    keys, values = k[slots].transpose(0, 1)[None], v[slots].transpose(0, 1)[None]
    want = (
        torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys, values, attn_mask=full[None, None], enable_gqa=True
        )[0]
        .transpose(0, 1)
        .flatten(1)
    )
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if earlier == 0:  # five columns: new keys are the rows
        five = sequences[:, :5].contiguous()
        assert torch.equal(
            kernel.module.attend(q, k, v, five, slots, mask.flatten().contiguous(), 64**-0.5), got
        )


def test_fewer_new_keys_than_rows_are_refused(kernel: TreeAttention) -> None:
    k, v = _pools(3, 64, 1)
    sequences = torch.tensor([[0, 3, 4, 0, 0, 2]])
    with pytest.raises(RuntimeError, match="fewer new keys than rows"):
        kernel.module.attend(
            torch.randn(3, 9, 64), k, v, sequences, torch.arange(6), torch.ones(6, dtype=torch.bool), 0.125
        )
