"""The head's packed products for drafting on a CPU (packed_matmul.py): packed in float32 they give the
plain modules' results, in bfloat16 or int8 the same within their precision (fused q/k/v and gate/up
included, with q/k/v biases), and the dtype is chosen as the option and the CPU say."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from treespec.drafter.eagle import packed_matmul
from treespec.drafter.eagle.checkpoint import TargetShape, load_head
from treespec.drafter.eagle.head import EagleHead, attend
from treespec.drafter.eagle.packed_matmul import MatmulDtype, PackedMatmul, packed_dtype
from treespec.kernels import cpu_features, panel_gemm
from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.cli.eagle_flags import MATMUL_DTYPES

HIDDEN, VOCAB, LAYERS = 64, 97, 3
TARGET = TargetShape(HIDDEN, VOCAB, LAYERS)
CPU = torch.device("cpu")


def _bf16_packs() -> bool:
    return packed_matmul._bf16_packing_works()


def _panels_build() -> bool:
    return packed_matmul._panels(CPU) is not None


def _head(tmp_path: Path, kind: str) -> EagleHead:
    if kind == "eagle3":
        return load_head(write_eagle3(tmp_path / kind, HIDDEN, VOCAB, LAYERS, draft_vocab=60), TARGET)
    return load_head(write_eagle(tmp_path / kind, HIDDEN, VOCAB, qkv_bias=True), TARGET)


def _forward(head: EagleHead, lm_head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One causal pass over 5 positions: (q|k|v, the layer's output, logits)."""
    g = torch.Generator().manual_seed(3)
    width = head.config.fc_in_features if head.config.is_eagle3 else HIDDEN
    embeds, hidden = torch.randn(5, HIDDEN, generator=g), torch.randn(5, width, generator=g)
    li = head.layer_input(embeds, hidden)
    qkv = head.qkv(li.attn_in, torch.arange(5))
    out = head.finish(li.residual, attend(qkv.q, qkv.k, qkv.v, torch.ones(5, 5, dtype=torch.bool).tril()))
    projections = torch.cat([qkv.q.flatten(1), qkv.k.flatten(1), qkv.v.flatten(1)], dim=1)
    return projections, out.hidden, head.logits(out.for_logits, lm_head)


@pytest.mark.parametrize("kind", ["eagle3", "eagle-qkv-bias"])
@pytest.mark.parametrize("dtype", [MatmulDtype.FLOAT32, MatmulDtype.BFLOAT16, MatmulDtype.INT8])
def test_packed_products_match_the_plain_modules(tmp_path: Path, kind: str, dtype: MatmulDtype) -> None:
    if dtype is MatmulDtype.BFLOAT16 and not _bf16_packs():
        with pytest.raises(ValueError, match="bfloat16"):
            _head(tmp_path, kind).to_device(CPU, torch.float32, dtype)
        return
    assert dtype is not MatmulDtype.INT8 or _panels_build(), "the panel kernel did not build"
    lm_head = torch.randn(HIDDEN, VOCAB, generator=torch.Generator().manual_seed(5))
    head = _head(tmp_path, kind).to_device(CPU, torch.float32, dtype).eval()
    assert head.matmul_dtype == getattr(torch, dtype.value)
    assert head.layer.self_attn.packed_qkv is not None and head.layer.mlp.packed_gate_up is not None
    with torch.inference_mode():
        got = _forward(head, lm_head)
    with torch.enable_grad():  # the plain nn.Linear path, as training runs it
        want = tuple(t.detach() for t in _forward(head, lm_head))
    for g, w in zip(got, want, strict=True):
        if dtype is MatmulDtype.FLOAT32:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        else:  # bfloat16 keeps 8 bits of mantissa, int8 255 levels a column: within a few percent
            torch.testing.assert_close(g, w, rtol=0.05, atol=0.05 * float(w.abs().max()))
            assert not torch.equal(g, w)  # the products did run in the narrower dtype


def test_a_packed_product_keeps_the_callers_dtype_and_its_bias() -> None:
    g = torch.Generator().manual_seed(0)
    weight, bias, x = (
        torch.randn(12, 8, generator=g),
        torch.randn(12, generator=g),
        torch.randn(3, 8, generator=g),
    )
    product = PackedMatmul.of(weight, bias, torch.float32)
    assert isinstance(product.weight, PanelWeight)  # float32: the target's panel kernel
    torch.testing.assert_close(product(x), x @ weight.t() + bias, rtol=1e-5, atol=1e-5)
    if _bf16_packs():
        out = PackedMatmul.of(weight, bias, torch.bfloat16)(x)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, x @ weight.t() + bias, rtol=0.05, atol=0.1)
    int8 = PackedMatmul.of(weight, bias, torch.int8)
    assert isinstance(int8.weight, PanelWeight) and int8.weight.panels.dtype == torch.int8
    assert int8.bias is not None and int8.bias.dtype == torch.float32  # the bias is not rounded
    out = int8(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, x @ weight.t() + bias, rtol=0.05, atol=0.1)


def test_the_matmul_dtype_follows_the_option_and_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert packed_dtype(MatmulDtype.FLOAT32, CPU, torch.float32) == torch.float32
    # Not packed where the target's weights are not (another dtype): plain modules, as on a GPU.
    assert packed_dtype(MatmulDtype.AUTO, CPU, torch.float64) is None
    assert packed_dtype(MatmulDtype.FLOAT32, CPU, torch.bfloat16) is None
    with pytest.raises(ValueError, match="bfloat16 head matmuls need"):
        packed_dtype(MatmulDtype.BFLOAT16, CPU, torch.float64)
    assert packed_dtype(MatmulDtype.INT8, CPU, torch.float64) is None
    # Where the panel kernel builds (as on CI), auto takes int8, whatever the CPU's bfloat16.
    assert _panels_build(), "the panel kernel did not build"
    for native in (False, True):
        monkeypatch.setattr(cpu_features, "native_bf16", lambda native=native: native)
        assert packed_dtype(MatmulDtype.AUTO, CPU, torch.float32) == torch.int8
        assert packed_dtype(MatmulDtype.INT8, CPU, torch.float32) == torch.int8
    assert isinstance(PackedMatmul.of(torch.randn(40, 8), None, torch.bfloat16).weight, PanelWeight)
    # Where it does not: bfloat16 where oneDNN multiplies it natively, else float32; int8 is refused.
    monkeypatch.setattr(packed_matmul, "_panels", lambda device: None)
    with pytest.raises(ValueError, match="int8 head matmuls need the panel kernel"):
        packed_dtype(MatmulDtype.INT8, CPU, torch.float32)
    monkeypatch.setattr(cpu_features, "native_bf16", lambda: False)
    assert packed_dtype(MatmulDtype.AUTO, CPU, torch.float32) == torch.float32
    monkeypatch.setattr(cpu_features, "native_bf16", lambda: True)
    want = torch.bfloat16 if _bf16_packs() else torch.float32
    assert packed_dtype(MatmulDtype.AUTO, CPU, torch.float32) == want


def test_bfloat16_weights_take_the_panels_and_on_amx_onednn_for_many_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds = panel_gemm.applies(CPU, torch.float32)  # x86-64 with a compiler, as on CI
    native = cpu_features.native_bf16()  # oneDNN multiplies bfloat16 (AVX512-BF16 or AMX)
    g = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(40, 8, generator=g), torch.randn(40, generator=g)
    monkeypatch.setattr(cpu_features, "amx", lambda: False)
    product = PackedMatmul.of(weight, bias, torch.bfloat16)
    assert isinstance(product.weight, PanelWeight) == builds
    assert product.many_rows is None  # without AMX: the panels for every row count
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return  # oneDNN cannot pack bfloat16 weights on this CPU (AVX2 alone), as no AMX CPU lacks
    monkeypatch.setattr(cpu_features, "amx", lambda: True)
    product = PackedMatmul.of(weight, bias, torch.bfloat16)
    assert isinstance(product.weight, PanelWeight) == builds
    assert (product.many_rows is not None) == builds  # oneDNN beside the panels, not instead of them
    if not (builds and native):
        return
    took: list[bool] = []  # per product: did it take the panels?
    real_linear = packed_matmul.linear

    def seen(x: torch.Tensor, weight: object, bias: torch.Tensor | None = None) -> torch.Tensor:
        took.append(isinstance(weight, PanelWeight))
        return real_linear(x, weight, bias)  # type: ignore[arg-type]

    monkeypatch.setattr(packed_matmul, "linear", seen)
    for rows in (1, packed_matmul.PANEL_ROWS_WITH_AMX, packed_matmul.PANEL_ROWS_WITH_AMX + 1, 64):
        x = torch.randn(rows, 8, generator=g)
        out = product(x)
        assert out.dtype == torch.float32 and out.shape == (rows, 40)
        torch.testing.assert_close(out, x @ weight.t() + bias, rtol=0.05, atol=0.1)
        assert took.pop() == (rows <= packed_matmul.PANEL_ROWS_WITH_AMX), rows


def test_the_cli_offers_every_matmul_dtype() -> None:
    assert tuple(d.value for d in MatmulDtype) == MATMUL_DTYPES


def test_a_torch_that_cannot_read_the_cpu_means_no_native_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert cpu_features.native_bf16()
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.delattr(torch.cpu, name, raising=False)
    assert not cpu_features.native_bf16()
