"""Layer weights kept in both library CPU layouts (where the panel kernel is not used): each forward
reads the one its row count calls for, the load-time probe picks the row limit, and either layout
gives HF's logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.model.paged import PagedDriver, Seq
from tests.unit.model.test_forward_vs_hf import TINY, make_checkpoint, rel_err
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.dual_layout import DualLayout
from treespec.shared.model.layout_probe import PROBE_ROWS, choose_dense_rows
from treespec.shared.model.linear import (
    dual_layouts,
    linear,
    pack_model_weights,
    pack_weight,
    set_dense_rows,
)
from treespec.shared.model.loader import LoadOptions, load_model

ONEDNN = LoadOptions(panel_weights=False)  # the library layouts, not the own panel kernel's


def _dual_by_hand(path: Path) -> CausalLM:
    """The model with every layer weight in both layouts, dense for no rows yet (no probe run)."""
    model = load_model(path, LoadOptions(pack_weights=False))
    pack_model_weights(model.weights, keep_dense=True)
    return model


def test_a_dual_weight_reads_dense_up_to_its_row_limit_and_packed_above(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generator = torch.Generator().manual_seed(0)
    dense = torch.randn(32, 24, generator=generator)
    weight = DualLayout(dense, pack_weight(dense), max_dense_rows=2)
    assert weight.for_rows(1) is dense and weight.for_rows(2) is dense
    assert weight.for_rows(3) is weight.packed
    read: list[bool] = []
    original = torch.ops.mkldnn._linear_pointwise

    def spy(*args: object) -> torch.Tensor:
        read.append(True)
        return original(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", spy)
    for rows in (1, 2, 3, 8):
        x = torch.randn(rows, 32, generator=generator)
        assert torch.allclose(linear(x, weight), x @ dense, rtol=1e-4, atol=1e-4)
    assert len(read) == 2  # the packed kernel ran for 3 and 8 rows only


def test_the_loader_keeps_both_layouts_only_where_the_probe_found_dense_faster(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama")
    model = load_model(tmp_path, ONEDNN)
    layouts = dual_layouts(model.weights)
    if layouts:  # the dense copies won for one row at least, on this machine, at load
        limits = {w.max_dense_rows for w in layouts}
        assert len(limits) == 1 and limits <= set(PROBE_ROWS)
    else:  # they never won: dropped, every layer weight packed
        assert all(layer.attn.qkv.is_mkldnn for layer in model.weights.layers)  # type: ignore[union-attr]
    packed_only = load_model(tmp_path, LoadOptions(panel_weights=False, dense_small_forwards=False))
    assert not dual_layouts(packed_only.weights)
    assert packed_only.weights.layers[0].mlp.down.is_mkldnn  # type: ignore[union-attr]


def test_the_probe_measures_a_row_limit_and_setting_zero_drops_the_dense_copies(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama")
    model = _dual_by_hand(tmp_path)
    rows = choose_dense_rows(model)
    assert rows == 0 or rows in PROBE_ROWS
    assert {w.max_dense_rows for w in dual_layouts(model.weights)} == {0}  # the probe applies nothing
    set_dense_rows(model.weights, 4)
    assert {w.max_dense_rows for w in dual_layouts(model.weights)} == {4}
    set_dense_rows(model.weights, 0)
    assert not dual_layouts(model.weights)
    assert model.weights.layers[0].attn.o.is_mkldnn  # type: ignore[union-attr]


@pytest.mark.parametrize("dense_rows", [0, 1, 64])
def test_logits_match_hf_whichever_layout_each_forward_reads(tmp_path: Path, dense_rows: int) -> None:
    hf = make_checkpoint(tmp_path, "llama-tied-bias")
    model = _dual_by_hand(tmp_path)
    set_dense_rows(model.weights, dense_rows)
    ids = torch.randint(0, TINY["vocab_size"], (21,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
    driver = PagedDriver(model)
    seq = Seq()
    prefill = driver.forward([(seq, ids[:20], None)])[0]  # 20 rows: packed unless dense_rows is 64
    step = driver.forward([(seq, ids[20:], None)])[0]  # 1 row: dense unless dense_rows is 0
    assert rel_err(prefill, want[:20]) < 1e-4
    assert rel_err(step, want[20:]) < 1e-4
