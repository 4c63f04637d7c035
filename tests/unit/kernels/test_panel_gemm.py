"""The panel matmul kernel against its reference (x @ dense), its layout round trip, its row
independence, and the loader's use of it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.kernels.panel_gemm import PANEL, PanelGemm, PanelWeight, build_panel_gemm, reference_linear
from treespec.shared.model.linear import linear
from treespec.shared.model.loader import LoadOptions, load_model


@pytest.fixture(scope="module")
def gemm() -> PanelGemm:
    built = build_panel_gemm()
    assert built is not None, "the panel kernel did not build (a C++ compiler and ninja are needed)"
    return built


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [0, 1, 2, 3, 7, 8, 9, 16, 17, 40])
@pytest.mark.parametrize(("inputs", "outputs"), [(64, 96), (37, 64), (128, 50), (576, 32)])
def test_it_multiplies_as_the_reference(
    gemm: PanelGemm, rows: int, inputs: int, outputs: int, dtype: torch.dtype
) -> None:
    """float32 weights, or bfloat16 ones widened exactly: the product of the rounded weights."""
    generator = torch.Generator().manual_seed(rows * 1000 + inputs + outputs)
    dense = torch.randn(inputs, outputs, generator=generator).to(dtype)
    x = torch.randn(rows, inputs, generator=generator)
    weight = gemm.pack(dense)
    assert weight.panels.dtype == dtype
    got = linear(x, weight)
    assert got.shape == (rows, outputs) and got.is_contiguous() and got.dtype == torch.float32
    torch.testing.assert_close(got, x @ dense.float(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, reference_linear(x, weight), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 2, 4, 8, 9, 13, 17, 40])
@pytest.mark.parametrize(("inputs", "outputs"), [(64, 96), (37, 64), (128, 50), (576, 160)])
def test_int8_weights_multiply_as_their_dequantized_values(
    gemm: PanelGemm, rows: int, inputs: int, outputs: int
) -> None:
    """int8 panels with a scale per column: the product of the dequantized weights, which lie within half
    a step (max |column| / 127 / 2) of the float ones."""
    generator = torch.Generator().manual_seed(rows * 1000 + inputs + outputs)
    dense = torch.randn(inputs, outputs, generator=generator)
    dense[:, 3] = 0.0  # a zero column: scale 1, all zeros
    x = torch.randn(rows, inputs, generator=generator)
    weight = gemm.pack_int8(dense)
    assert weight.panels.dtype == torch.int8 and weight.scales is not None
    dequantized = weight.to_dense()
    assert dequantized.shape == dense.shape and bool((dequantized[:, 3] == 0).all())
    step = dense.abs().amax(dim=0) / 127
    assert bool(((dequantized - dense).abs() <= step / 2 + 1e-6).all())
    got = linear(x, weight)
    assert got.shape == (rows, outputs) and got.dtype == torch.float32
    torch.testing.assert_close(got, x @ dequantized, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, reference_linear(x, weight), rtol=1e-5, atol=1e-4)


def test_int8_panels_take_their_scales_and_no_other_panels_do(gemm: PanelGemm) -> None:
    int8 = gemm.pack_int8(torch.randn(16, 32))
    assert int8.scales is not None
    x = torch.randn(2, 16)
    with pytest.raises(RuntimeError, match="column scales"):
        gemm.module.matmul(x, int8.panels)
    with pytest.raises(RuntimeError, match="column scales"):
        gemm.module.matmul(x, gemm.pack(torch.randn(16, 32)).panels, int8.scales)
    with pytest.raises(RuntimeError, match="one per column"):
        gemm.module.matmul(x, int8.panels, int8.scales[:16].contiguous())


def test_the_layout_keeps_the_values_and_pads_the_columns(gemm: PanelGemm) -> None:
    dense = torch.randn(20, 45)
    weight = gemm.pack(dense)
    assert weight.shape == (20, 45)
    assert tuple(weight.panels.shape) == (2, 20, PANEL)  # 45 columns -> two panels, the last padded
    assert torch.equal(weight.to_dense(), dense)
    assert torch.equal(weight.panels[1, :, 45 - PANEL :], torch.zeros(20, 2 * PANEL - 45))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("outputs", [128, 160])
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(
    gemm: PanelGemm, outputs: int, dtype: torch.dtype
) -> None:
    """A verify step's row equals the decode step's bit for bit: one FMA chain per output element (for
    int8, then times its column's scale), however the rows are grouped and whether a lone row takes one
    panel per call or two (160 columns: five panels, an odd one left over)."""
    generator = torch.Generator().manual_seed(3)
    dense = torch.randn(300, outputs, generator=generator)
    weight = gemm.pack_int8(dense) if dtype == torch.int8 else gemm.pack(dense.to(dtype))
    x = torch.randn(13, 300, generator=generator)
    together = linear(x, weight)
    for i in range(x.shape[0]):
        assert torch.equal(linear(x[i : i + 1], weight), together[i : i + 1])
    assert torch.equal(linear(x[5:12], weight), together[5:12])


def test_a_bias_is_added_and_a_strided_input_is_read(gemm: PanelGemm) -> None:
    generator = torch.Generator().manual_seed(4)
    dense, bias = torch.randn(32, 64, generator=generator), torch.randn(64, generator=generator)
    x = torch.randn(48, 5, generator=generator).t()[:, :32]  # [5, 32], not contiguous
    torch.testing.assert_close(linear(x, gemm.pack(dense), bias), x @ dense + bias, rtol=1e-5, atol=1e-4)


def test_it_refuses_what_it_cannot_multiply(gemm: PanelGemm) -> None:
    weight = gemm.pack(torch.randn(16, 32))
    with pytest.raises(RuntimeError, match="input width"):
        linear(torch.randn(2, 17), weight)
    with pytest.raises(RuntimeError, match="float32"):
        linear(torch.randn(2, 16, dtype=torch.float64), weight)
    with pytest.raises(RuntimeError, match="float32, bfloat16 or int8"):
        gemm.pack(torch.randn(16, 32, dtype=torch.float16))


def test_the_loader_packs_every_matmul_into_panels_on_cpu_float32(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama-tied-bias")
    model = load_model(tmp_path)
    w = model.weights
    assert all(isinstance(m, PanelWeight) for layer in w.layers for m in layer.matmuls())
    assert isinstance(w.lm_head, PanelWeight)
    assert w.embed is not None and torch.equal(w.embed, w.lm_head.to_dense().t())  # tied: its own copy
    dense = load_model(tmp_path, LoadOptions(pack_weights=False)).weights
    assert isinstance(dense.lm_head, torch.Tensor) and not dense.lm_head.is_mkldnn
    assert torch.equal(w.lm_head.to_dense(), dense.lm_head)
    onednn = load_model(tmp_path, LoadOptions(panel_weights=False)).weights
    assert isinstance(onednn.lm_head, torch.Tensor) and onednn.lm_head.is_mkldnn


def test_a_long_matmul_lets_the_other_threads_run(gemm: PanelGemm) -> None:
    """The kernel lets go of Python's GIL while it runs (bindings.cpp), as torch's ops do: a thread that
    wakes every millisecond keeps running through the middle of the call (with the GIL held it would wait
    for the call to end). The product grows until one call takes 50 ms, so that the middle is long."""
    weight = gemm.pack(torch.randn(1024, 1024))
    rows, seconds = 64, 0.0
    while seconds < 0.05 and rows <= 1 << 16:
        rows *= 2
        x = torch.randn(rows, 1024)
        start = time.perf_counter()
        gemm.matmul(x, weight)
        seconds = time.perf_counter() - start
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        gemm.matmul(x, weight)
        end = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
    quarter = (end - start) / 4
    assert any(start + quarter < t < end - quarter for t in ticks), (end - start, len(ticks))
