"""Mixture-of-experts families: which layers are sparse and their checkpoints' errors (their logits
against HF's: test_forward_vs_hf.py; speculation over them: test_engine_families.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.loader import load_model
from treespec.shared.model.weights import ExpertWeights, MlpWeights

VOCAB = 97


def _qwen3_moe(**extra: object) -> ModelConfig:
    raw = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_experts": 8,  # the public configs' key (transformers 5 writes num_local_experts)
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        **extra,
    }
    return ModelConfig.from_dict(raw)


def test_qwen3_moe_sparse_layers_follow_the_step_and_the_dense_list() -> None:
    every = _qwen3_moe()
    assert every.moe is not None and every.moe.sparse_layers == frozenset(range(6))
    assert every.moe.num_experts == 8 and not every.moe.normalize_top_k and every.qk_norm
    stepped = _qwen3_moe(decoder_sparse_step=2, mlp_only_layers=[3], norm_topk_prob=True)
    assert stepped.moe is not None and stepped.moe.sparse_layers == frozenset({1, 5})
    assert stepped.moe.normalize_top_k


def test_dense_families_have_no_experts(tiny_path: Path) -> None:
    assert ModelConfig.from_dir(tiny_path).moe is None


def test_sparse_and_dense_layers_load_as_such(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "qwen3-moe")  # its layer 1 is dense (mlp_only_layers)
    layers = load_model(tmp_path).weights.layers
    assert [type(layer.mlp) for layer in layers] == [ExpertWeights, MlpWeights, ExpertWeights]
    block = layers[0].mlp
    assert isinstance(block, ExpertWeights) and len(block.experts) == 6
    assert tuple(block.router.shape) == (64, 6)


def test_a_missing_expert_is_named(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "mixtral")
    file = tmp_path / "model.safetensors"
    tensors = load_file(file)
    del tensors["model.layers.2.block_sparse_moe.experts.5.w2.weight"]
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"experts\.5\.w2"):
        load_model(tmp_path)


def test_an_expert_count_that_does_not_fit_the_checkpoint_is_an_error(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "mixtral")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_local_experts": 7}))
    with pytest.raises(ModelLoadError, match=r"gate\.weight"):
        load_model(tmp_path)
