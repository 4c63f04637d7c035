"""Public EAGLE checkpoints load (both formats, both weight files, their architecture names), a head
that does not fit its target is refused clearly, and a saved head loads back identically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from treespec.drafter.eagle.checkpoint import TargetShape, feature_spec, load_head, save_head
from treespec.drafter.eagle.head_config import EagleFormat, HeadConfigError
from treespec.drafter.eagle.target_features import default_aux_layer_ids

TARGET = TargetShape(hidden_size=64, vocab_size=97, num_layers=3)


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.safetensors"])
@pytest.mark.parametrize("arch", ["LlamaForCausalLMEagle", "LlamaForCausalLM"])
def test_eagle_checkpoint_loads(tmp_path: Path, weights: str, arch: str) -> None:
    path = write_eagle(tmp_path / "h", 64, 97, arch=arch, weights=weights)
    head = load_head(path, TARGET)
    assert head.config.format is EagleFormat.EAGLE
    assert head.config.fc_bias and not head.config.attention_bias
    assert not hasattr(head.layers[0], "input_layernorm")  # EAGLE's layer 0 has no input norm
    raw = torch.load(path / weights, weights_only=True) if weights.endswith(".bin") else None
    if raw is not None:
        assert torch.equal(head.fc.weight, raw["fc.weight"].float())
    assert feature_spec(head.config, TARGET).width == 64


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "model.safetensors"])
@pytest.mark.parametrize("arch", ["LlamaForCausalLMEagle3", "LlamaForCausalLM"])
def test_eagle3_checkpoint_loads(tmp_path: Path, weights: str, arch: str) -> None:
    path = write_eagle3(
        tmp_path / "h", 64, 97, 3, draft_vocab=40, arch=arch, weights=weights, stray_embed=True
    )
    head = load_head(path, TARGET)
    c = head.config
    assert c.format is EagleFormat.EAGLE3 and c.draft_vocab_size == 40
    ids = head.draft_to_target()
    assert ids.shape == (40,) and bool(head.get_buffer("t2d")[ids].all())
    assert int(head.get_buffer("t2d").sum()) == 40
    assert feature_spec(c, TARGET).aux_layer_ids == default_aux_layer_ids(3)


def test_eagle3_aux_layer_ids_come_from_eagle_config(tmp_path: Path) -> None:
    head = load_head(write_eagle3(tmp_path / "h", 64, 97, 3, aux_ids=[-1, 0, 1]), TARGET)
    spec = feature_spec(head.config, TARGET)
    assert spec.aux_layer_ids == (-1, 0, 1) and spec.width == 3 * 64
    # "output of layer id" is the residual entering layer id + 1 (-1: the embeddings).
    assert spec.capture(torch.arange(2)).aux_layers == (0, 1, 2)


def test_qwen_style_head_with_qkv_bias(tmp_path: Path) -> None:
    path = write_eagle(tmp_path / "h", 64, 97, arch="Qwen2ForCausalLMEagle", qkv_bias=True)
    head = load_head(path, TARGET)
    assert head.config.attention_bias
    assert head.layer.self_attn.q_proj.bias is not None


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (TargetShape(32, 97, 3), "width"),
        (TargetShape(64, 50, 3), "vocabulary"),
        (TargetShape(64, 97, 2), "aux layer ids"),
    ],
)
def test_a_head_that_does_not_fit_is_refused(tmp_path: Path, target: TargetShape, message: str) -> None:
    path = write_eagle3(tmp_path / "h", 64, 97, 3, aux_ids=[-1, 0, 1])
    with pytest.raises(HeadConfigError, match=message):
        load_head(path, target)


def test_missing_or_misshapen_tensors_are_named(tmp_path: Path) -> None:
    path = write_eagle3(tmp_path / "h", 64, 97, 3, draft_vocab=40)
    config = json.loads((path / "config.json").read_text())
    config["intermediate_size"] = 80
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(HeadConfigError, match=r"mlp\.\w+_proj\.weight has shape"):
        load_head(path, TARGET)
    with pytest.raises(HeadConfigError, match=r"no config\.json"):
        load_head(tmp_path, TARGET)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(HeadConfigError, match=r"no model\.safetensors or pytorch_model\.bin"):
        load_head(tmp_path / "x", TARGET)


def test_saved_head_loads_back_identically(tmp_path: Path) -> None:
    for fmt, path in [
        ("eagle3", write_eagle3(tmp_path / "a", 64, 97, 3, draft_vocab=40, aux_ids=[-1, 0, 1])),
        ("eagle", write_eagle(tmp_path / "b", 64, 97)),
    ]:
        head = load_head(path, TARGET)
        save_head(head, tmp_path / f"saved-{fmt}", dtype=torch.float32)
        again = load_head(tmp_path / f"saved-{fmt}", TARGET)
        assert again.config == head.config
        for (name, a), (_, b) in zip(head.state_dict().items(), again.state_dict().items(), strict=True):
            assert torch.equal(a, b), name
