"""The decoder layers in one C++ call (shared/model/layer_run.py) give the Python loop's results bit for
bit, for decode rows, trees, batches and captured hidden states, and the loop stays wherever a step or
a model is not what the C++ loop computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType

from tests.unit.kernels.test_exact_blocks import _dequantized
from tests.unit.model.test_forward_vs_hf import TINY, make_checkpoint
from treespec.kernels.panel_gemm import PanelWeight
from treespec.kernels.row_ops import row_ops
from treespec.kernels.tree_attention import tree_attention
from treespec.shared.model.attention.layout import BatchLayout, SequenceLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.causal_lm import CausalLM, ForwardOutput, HiddenCapture
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.layer_run import LayerRun
from treespec.shared.model.loader import load_model


@pytest.fixture(scope="module", params=["float32", "blocks"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    """The tiny Llama with float32 panel weights, or with 4-bit block ones (its layer weights replaced
    by Q4_1's values, as a GGUF import writes them)."""
    assert row_ops() is not None and tree_attention() is not None, "the CPU kernels did not build"
    path: Path = tmp_path_factory.mktemp(request.param)
    hf = make_checkpoint(path, "llama")
    if request.param == "blocks":
        with torch.no_grad():
            for name, module in hf.named_modules():
                if isinstance(module, torch.nn.Linear) and "layers" in name:
                    module.weight.copy_(_dequantized(module.weight, GGMLQuantizationType.Q4_1))
        hf.save_pretrained(path)
    loaded = load_model(path)
    assert LayerRun.of(loaded.config, loaded.weights) is not None
    return loaded


class _Steps:
    """The same steps on a cache of their own: a prompt, decodes, a tree, a batch of both."""

    def __init__(self, model: CausalLM) -> None:
        self.model = model
        self.cache = KVCache.allocate(model.config, 16, 8, model.dtype, model.device)
        self.backend = TorchAttentionBackend()

    def forward(
        self, layouts: list[SequenceLayout], ids: torch.Tensor, aux: tuple[int, ...] = ()
    ) -> ForwardOutput:
        batch = BatchLayout(layouts)
        plan = self.backend.plan(batch, self.model.device)
        rows = torch.arange(len(ids))
        capture = HiddenCapture(rows, aux) if aux else None
        return self.model.forward(ids, batch.positions(), self.backend, plan, self.cache, rows, capture)


def _ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed))


def _chain(cached: int, new: int, first_slot: int) -> SequenceLayout:
    slots = torch.arange(first_slot, first_slot + cached + new)
    return SequenceLayout(cached, slots, torch.arange(cached, cached + new))


def _tree(cached: int, parents: list[int], first_slot: int) -> SequenceLayout:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    slots = torch.arange(first_slot, first_slot + cached + len(parents))
    return SequenceLayout(cached, slots, cached + torch.tensor(depth), torch.tensor(parents))


def _run(model: CausalLM, fused: bool) -> list[ForwardOutput]:
    model.fused_layers = fused
    steps = _Steps(model)
    outs = [
        steps.forward([_chain(0, 20, 0)], _ids(20, 1)),  # a prompt within the row kernel's rows
        steps.forward([_chain(20, 1, 0)], _ids(1, 2)),  # a decode
        steps.forward([_chain(21, 1, 0)], _ids(1, 3), aux=(0, 2)),  # a decode with EAGLE-3 captures
        steps.forward([_tree(22, [-1, 0, 0, 1, 1, 2], 0)], _ids(6, 4), aux=(1,)),  # a tree
        steps.forward([_chain(0, 5, 64)], _ids(5, 5)),  # a second sequence's prompt
        # a batch: a tree of the first sequence beside a decode of the second
        steps.forward([_tree(22, [-1, 0, 1], 0), _chain(5, 1, 64)], _ids(4, 6)),
    ]
    model.fused_layers = True
    return outs


def test_the_layers_in_one_call_equal_the_python_loop_bit_for_bit(model: CausalLM) -> None:
    fused, loop = _run(model, True), _run(model, False)
    assert model._run is not None  # not vacuous: the C++ loop ran
    for a, b in zip(fused, loop, strict=True):
        assert torch.equal(a.logits, b.logits)
        for x, y in ((a.hidden, b.hidden), (a.aux_hidden, b.aux_hidden)):
            assert (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
    assert fused[2].aux_hidden is not None and fused[2].aux_hidden.shape == (1, 2 * TINY["hidden_size"])


def test_a_prefill_past_the_row_kernel_keeps_the_loop(model: CausalLM) -> None:
    steps = _Steps(model)
    batch = BatchLayout([_chain(0, 40, 0)])  # more rows than the row kernel takes: the prefill kernel
    plan = steps.backend.plan(batch, model.device)
    assert steps.backend.row_kernel_plan(plan, model.dtype, steps.cache, model.config.num_heads) is None
    decode = steps.backend.plan(BatchLayout([_chain(40, 1, 0)]), model.device)
    assert steps.backend.row_kernel_plan(decode, model.dtype, steps.cache, model.config.num_heads) is not None


def test_a_model_with_biases_keeps_the_loop(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama-tied-bias")
    model = load_model(tmp_path)
    assert LayerRun.of(model.config, model.weights) is None
    steps = _Steps(model)
    out = steps.forward([_chain(0, 3, 0)], _ids(3, 7))
    assert out.logits.shape == (3, TINY["vocab_size"]) and not model.fused_layers  # never looked at again


def test_repacked_weights_are_taken_afresh(model: CausalLM) -> None:
    steps = _Steps(model)
    steps.forward([_chain(0, 3, 0)], _ids(3, 8))
    run = model._run
    assert run is not None and run.serves(model.weights)
    layer = model.weights.layers[0]
    original = layer.attn.o
    assert isinstance(original, PanelWeight)
    layer.attn.o = original.gemm.pack_exact(original.to_dense())  # the same values, another object
    try:
        assert not run.serves(model.weights)
        steps.forward([_chain(3, 1, 0)], _ids(1, 9))
        assert model._run is not run and model._run is not None and model._run.serves(model.weights)
    finally:
        layer.attn.o = original
