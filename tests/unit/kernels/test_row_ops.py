"""The fused per-row steps (RMSNorm, rotary embedding, the MLP's gate, a drafting level's top-k
log-probabilities) against their torch references, row by row independent of the rows beside them, and
the references serving where the kernels do not apply."""

from __future__ import annotations

import math

import pytest
import torch

from treespec.kernels import row_ops
from treespec.kernels.row_ops import (
    RowOps,
    apply_rope,
    build_row_ops,
    reference_rms_norm,
    reference_rope,
    reference_silu_mul,
    reference_top_logprobs,
    rms_norm,
    silu_mul,
    top_logprobs,
)
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.rope import build_rope_tables


@pytest.fixture(scope="module")
def ops() -> RowOps:
    built = build_row_ops()
    assert built is not None, "the CPU kernels did not build (a C++ compiler and ninja are needed)"
    return built


@pytest.mark.parametrize("rows", [1, 3, 65, 200])
@pytest.mark.parametrize("width", [576, 64, 37])
def test_rms_norm_equals_the_reference(ops: RowOps, rows: int, width: int) -> None:
    generator = torch.Generator().manual_seed(rows * 100 + width)
    x = torch.randn(rows, width, generator=generator) * 3
    weight = torch.randn(width, generator=generator)
    got = ops.rms_norm(x, weight, 1e-5)
    assert got.shape == x.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, reference_rms_norm(x, weight, 1e-5), rtol=1e-5, atol=1e-5)


def test_rms_norm_takes_heads_and_strided_rows(ops: RowOps) -> None:
    """Qwen3's q/k norms normalise each head: x [T, heads, head_dim]; a view's rows are copied first."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(5, 4, 24, generator=generator)
    weight = torch.randn(24, generator=generator)
    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-6), reference_rms_norm(x, weight, 1e-6))
    strided = torch.randn(64, 7, generator=generator).t()  # [7, 64], not contiguous
    weight = torch.randn(64, generator=generator)
    torch.testing.assert_close(ops.rms_norm(strided, weight, 1e-6), reference_rms_norm(strided, weight, 1e-6))


@pytest.mark.parametrize("rows", [1, 4, 70])
@pytest.mark.parametrize(("heads", "head_dim"), [(12, 64), (3, 24)])
def test_rope_equals_the_reference(ops: RowOps, rows: int, heads: int, head_dim: int) -> None:
    """Rotated by the tables of real positions, as the forward looks them up."""
    config = ModelConfig.from_dict(
        {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": heads * head_dim,
            "num_attention_heads": heads,
            "num_key_value_heads": heads,
            "num_hidden_layers": 1,
            "intermediate_size": 8,
            "vocab_size": 16,
            "max_position_embeddings": 512,
        }
    )
    tables = build_rope_tables(config, torch.device("cpu"))
    generator = torch.Generator().manual_seed(rows + heads)
    positions = torch.randint(0, 512, (rows,), generator=generator)
    cos, sin = tables.lookup(positions, torch.float32)
    x = torch.randn(rows, heads, head_dim, generator=generator)
    torch.testing.assert_close(ops.rope(x, cos, sin), reference_rope(x, cos, sin), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 3, 70])
@pytest.mark.parametrize("width", [1536, 37])  # 37: a tail shorter than a vector
def test_silu_mul_equals_the_reference(ops: RowOps, rows: int, width: int) -> None:
    """Over the range where the gate turns (large negative and positive values included)."""
    generator = torch.Generator().manual_seed(rows + width)
    gate_up = torch.randn(rows, 2 * width, generator=generator) * 8
    gate_up[0, :4] = torch.tensor([-200.0, -90.0, 90.0, 0.0])
    got = ops.silu_mul(gate_up)
    assert got.shape == (rows, width)
    torch.testing.assert_close(got, reference_silu_mul(gate_up), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("rows", "width", "k"),
    [(1, 8192, 4), (6, 8192, 10), (3, 49152, 8), (2, 262144, 3), (2, 37, 37), (4, 5, 1)],
)
def test_top_logprobs_equal_topk_and_logsumexp(ops: RowOps, rows: int, width: int, k: int) -> None:
    generator = torch.Generator().manual_seed(rows * width + k)
    logits = torch.randn(rows, width, generator=generator) * 6
    values, indices = ops.top_logprobs(logits, k)
    want_values, want_indices = reference_top_logprobs(logits, k)
    assert indices.dtype == torch.long and values.shape == indices.shape == (rows, k)
    assert torch.equal(indices, want_indices)
    torch.testing.assert_close(values, want_values, rtol=1e-6, atol=2e-6)
    # Within float32's reach of the exact figure, over a vocabulary of 49,152 too (a float accumulator
    # for the row's sum of exps drifted 4e-6 there with 8 lanes, 2e-5 at 262,144 tokens).
    exact = logits.double().log_softmax(-1).gather(1, indices)
    torch.testing.assert_close(values.double(), exact, rtol=1e-6, atol=2e-6)


def test_top_logprobs_rank_ties_by_index_and_refuse_a_bad_k(ops: RowOps) -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, 2.0, -1.0]])
    values, indices = ops.top_logprobs(logits, 4)
    assert indices.tolist() == [[1, 3, 4, 2]]
    assert values[0, 0] == values[0, 1] == values[0, 2] and values[0, 2] > values[0, 3]
    assert torch.allclose(
        values.exp().sum(), torch.tensor(3 * math.exp(2) + math.exp(1)) / logits.exp().sum()
    )
    for k in (0, 7):
        with pytest.raises(RuntimeError, match="1 <= k <= V"):
            ops.top_logprobs(logits, k)


def test_a_rows_result_does_not_depend_on_the_rows_beside_it(ops: RowOps) -> None:
    """A verify step's rows equal the decode step's bit for bit, also past the rows a thread takes."""
    generator = torch.Generator().manual_seed(2)
    x, weight = torch.randn(150, 576, generator=generator), torch.randn(576, generator=generator)
    q = torch.randn(150, 12, 64, generator=generator)
    cos, sin = torch.randn(150, 1, 64, generator=generator), torch.randn(150, 1, 64, generator=generator)
    gate_up = torch.randn(150, 2 * 1536, generator=generator)
    norms, rotated, gated = ops.rms_norm(x, weight, 1e-5), ops.rope(q, cos, sin), ops.silu_mul(gate_up)
    for i in (0, 63, 64, 149):
        assert torch.equal(ops.rms_norm(x[i : i + 1], weight, 1e-5), norms[i : i + 1])
        assert torch.equal(ops.rope(q[i : i + 1], cos[i : i + 1], sin[i : i + 1]), rotated[i : i + 1])
        assert torch.equal(ops.silu_mul(gate_up[i : i + 1]), gated[i : i + 1])
    logits = torch.randn(150, 300, generator=generator)
    values, _ = ops.top_logprobs(logits, 5)
    for i in (0, 63, 64, 149):
        assert torch.equal(ops.top_logprobs(logits[i : i + 1], 5)[0], values[i : i + 1])


def test_the_references_serve_other_dtypes_and_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []

    class Recording(RowOps):
        def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
            called.append("rms_norm")
            return super().rms_norm(x, weight, eps)

        def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            called.append("rope")
            return super().rope(x, cos, sin)

        def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
            called.append("silu_mul")
            return super().silu_mul(gate_up)

        def top_logprobs(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
            called.append("top_logprobs")
            return super().top_logprobs(logits, k)

    built = build_row_ops()
    assert built is not None
    monkeypatch.setattr(row_ops, "row_ops", lambda: Recording(built.module))
    monkeypatch.setattr(row_ops, "top_logprobs_ops", lambda: Recording(built.module))
    x, weight = torch.randn(2, 8), torch.randn(8)
    q, cos, sin = torch.randn(2, 3, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    rms_norm(x, weight, 1e-5)
    apply_rope(q, cos, sin)
    silu_mul(x)
    top_logprobs(x, 2)
    assert called == ["rms_norm", "rope", "silu_mul", "top_logprobs"]
    called.clear()
    top_logprobs(x.double(), 2)
    rms_norm(x.to(torch.bfloat16), weight.to(torch.bfloat16), 1e-5)
    apply_rope(q.double(), cos.double(), sin.double())
    silu_mul(x.requires_grad_())
    trained = weight.clone().requires_grad_()
    rms_norm(x, trained, 1e-5).sum().backward()  # training: the reference, which has a backward
    assert called == [] and trained.grad is not None
    with torch.inference_mode():
        rms_norm(x, trained, 1e-5)  # drafting with a trainable head's weights: the kernel
    assert called == ["rms_norm"]


def test_the_kernels_serve_where_they_build() -> None:
    assert row_ops.row_ops() is not None
    assert row_ops.top_logprobs_ops() is not None


def test_the_top_k_serves_or_not_on_its_own_speed_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow top-k kernel leaves the forward's row kernels in place, and slow row kernels the top-k."""
    checked: list[str] = []

    def slow_top_k(name: str, *_: object, **__: object) -> bool:
        checked.append(name)
        return name != "top_logprobs"

    monkeypatch.setattr(row_ops, "fast_enough", slow_top_k)
    row_ops.row_ops.cache_clear()
    row_ops.top_logprobs_ops.cache_clear()
    try:
        assert row_ops.row_ops() is not None and row_ops.top_logprobs_ops() is None
        assert checked == ["rms_norm", "rope", "silu_mul", "top_logprobs"]
        logits = torch.randn(2, 50)
        _, indices = top_logprobs(logits, 3)  # the reference serves
        assert torch.equal(indices, logits.topk(3).indices)
    finally:
        row_ops.row_ops.cache_clear()
        row_ops.top_logprobs_ops.cache_clear()
