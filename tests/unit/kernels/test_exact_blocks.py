"""Weights in an exact block form (GGUF's Q4_1 and Q8_0, dequantized by gguf's own code as the model
import does): found exactly, packed into 4-bit or int8 panels, and multiplied bit for bit as the float32
weights; every other weight keeps its own form; the loader uses them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from tests.unit.model.test_forward_vs_hf import TINY, make_checkpoint
from treespec.kernels.exact_blocks import find_blocks
from treespec.kernels.panel_gemm import PanelGemm, PanelWeight, build_panel_gemm
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.linear import linear
from treespec.shared.model.loader import LoadOptions, load_model

GGUF_FORMS = {"Q4_1": (GGMLQuantizationType.Q4_1, 4), "Q8_0": (GGMLQuantizationType.Q8_0, 8)}


@pytest.fixture(scope="module")
def gemm() -> PanelGemm:
    built = build_panel_gemm()
    assert built is not None, "the panel kernel did not build (a C++ compiler and ninja are needed)"
    return built


def _dequantized(weight: torch.Tensor, kind: GGMLQuantizationType) -> torch.Tensor:
    """A torch weight [out, in] through GGUF's quantization and back, as gguf-py (and the import) does."""
    values = weight.detach().float().numpy()
    return torch.from_numpy(np.ascontiguousarray(quants.dequantize(quants.quantize(values, kind), kind)))


def _gguf_weight(kind: GGMLQuantizationType, inputs: int, outputs: int, seed: int) -> torch.Tensor:
    """[in, out], the panel layout's orientation (GGUF's blocks run along the inputs)."""
    generator = torch.Generator().manual_seed(seed)
    return _dequantized(0.05 * torch.randn(outputs, inputs, generator=generator), kind).t().contiguous()


@pytest.mark.parametrize("form", sorted(GGUF_FORMS))
def test_gguf_blocks_are_found_exactly(form: str) -> None:
    kind, bits = GGUF_FORMS[form]
    dense = _gguf_weight(kind, 128, 96, 1)
    blocks = find_blocks(dense)
    assert blocks is not None and blocks.bits == bits
    assert torch.equal(blocks.to_dense().view(torch.int32), dense.view(torch.int32))


def test_weights_of_no_block_form_are_not_taken() -> None:
    generator = torch.Generator().manual_seed(2)
    assert find_blocks(torch.randn(64, 32, generator=generator)) is None  # trained float32
    assert find_blocks(torch.randn(64, 32, generator=generator).bfloat16().float()) is None
    assert find_blocks(_gguf_weight(GGMLQuantizationType.Q5_1, 64, 32, 3)) is None  # 5-bit blocks
    assert find_blocks(_gguf_weight(GGMLQuantizationType.Q4_1, 64, 32, 4)[:48]) is None  # 48 rows: no blocks
    almost = _gguf_weight(GGMLQuantizationType.Q4_1, 64, 32, 5)
    almost[7, 3] = torch.nextafter(almost[7, 3], torch.tensor(1.0))  # one weight off by one ulp
    assert find_blocks(almost) is None
    signed_zero = _gguf_weight(GGMLQuantizationType.Q8_0, 64, 32, 6)
    signed_zero[0, 0] = -0.0  # q * d + m gives +0.0: not the same bits
    assert find_blocks(signed_zero) is None


@pytest.mark.parametrize("form", sorted(GGUF_FORMS))
@pytest.mark.parametrize("rows", [1, 2, 5, 12, 13, 40])
@pytest.mark.parametrize(("inputs", "outputs"), [(64, 96), (576, 50), (1536, 64)])
def test_block_panels_multiply_bit_for_bit_as_the_float32_weights(
    gemm: PanelGemm, form: str, rows: int, inputs: int, outputs: int
) -> None:
    kind, bits = GGUF_FORMS[form]
    dense = _gguf_weight(kind, inputs, outputs, rows + inputs)
    exact, float32 = gemm.pack_exact(dense), gemm.pack(dense)
    assert exact.block_scales is not None
    assert exact.panels.dtype == (torch.uint8 if bits == 4 else torch.int8)
    assert exact.panels.numel() == float32.panels.numel() * bits // 8  # a byte per 8 bits of values
    assert torch.equal(exact.to_dense().view(torch.int32), dense.view(torch.int32))
    x = torch.randn(rows, inputs, generator=torch.Generator().manual_seed(rows))
    got = linear(x, exact)
    assert got.shape == (rows, outputs)
    assert torch.equal(got, linear(x, float32))


def test_pack_exact_takes_the_narrowest_exact_form(gemm: PanelGemm) -> None:
    generator = torch.Generator().manual_seed(7)
    assert gemm.pack_exact(_gguf_weight(GGMLQuantizationType.Q4_1, 64, 32, 7)).panels.dtype == torch.uint8
    assert gemm.pack_exact(_gguf_weight(GGMLQuantizationType.Q8_0, 64, 32, 7)).panels.dtype == torch.int8
    bf16_values = torch.randn(64, 32, generator=generator).bfloat16().float()
    assert gemm.pack_exact(bf16_values).panels.dtype == torch.bfloat16
    trained = torch.randn(64, 32, generator=generator)
    weight = gemm.pack_exact(trained)
    assert weight.panels.dtype == torch.float32 and weight.block_scales is None


def test_block_products_refuse_bad_shapes(gemm: PanelGemm) -> None:
    weight = gemm.pack_exact(_gguf_weight(GGMLQuantizationType.Q4_1, 64, 32, 8))
    assert weight.block_scales is not None
    with pytest.raises(RuntimeError, match="input width"):
        gemm.module.matmul_blocks(torch.randn(2, 32), weight.panels, weight.block_scales)
    with pytest.raises(RuntimeError, match="scales"):
        gemm.module.matmul_blocks(torch.randn(2, 64), weight.panels, weight.block_scales[:, :1].contiguous())
    with pytest.raises(RuntimeError, match="uint8 or"):
        gemm.module.matmul_blocks(torch.randn(2, 64), weight.panels.float(), weight.block_scales)


def _logits(path: Path, options: LoadOptions) -> tuple[torch.Tensor, list[PanelWeight]]:
    model = load_model(path, options)
    n = 40
    cache = KVCache.allocate(model.config, 16, 16, model.dtype, model.device)
    backend = TorchAttentionBackend()
    layout = BatchLayout([SequenceLayout(0, torch.arange(n), torch.arange(n))])
    ids = torch.randint(0, TINY["vocab_size"], (n,), generator=torch.Generator().manual_seed(9))
    out = model.forward(
        ids, layout.positions(), backend, backend.plan(layout, model.device), cache, torch.arange(n)
    )
    weights = [m for layer in model.weights.layers for m in layer.matmuls()]
    assert all(isinstance(w, PanelWeight) for w in weights)
    return out.logits, [w for w in weights if isinstance(w, PanelWeight)]


def test_the_loader_keeps_an_imported_quantization_in_its_blocks(tmp_path: Path) -> None:
    """A checkpoint whose layer weights are Q4_1's dequantized values (as a GGUF import writes them)
    loads into 4-bit panels, and its forward gives the float32 weights' logits bit for bit."""
    hf = make_checkpoint(tmp_path, "llama")
    with torch.no_grad():
        for name, module in hf.named_modules():
            if isinstance(module, torch.nn.Linear) and "layers" in name:
                module.weight.copy_(_dequantized(module.weight, GGMLQuantizationType.Q4_1))
    hf.save_pretrained(tmp_path)
    exact, exact_weights = _logits(tmp_path, LoadOptions())
    assert all(w.panels.dtype == torch.uint8 for w in exact_weights)
    float32, float32_weights = _logits(tmp_path, LoadOptions(exact_forms=False))
    assert all(w.panels.dtype == torch.float32 for w in float32_weights)
    assert torch.equal(exact, float32)
