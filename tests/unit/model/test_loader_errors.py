"""A model directory that cannot be served fails with an error naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.loader import LoadOptions, load_model


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    make_checkpoint(tmp_path, "llama")
    return tmp_path


def edit_config(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_unsupported_architecture_is_named(checkpoint: Path) -> None:
    edit_config(checkpoint, architectures=["GPT2LMHeadModel"], model_type="gpt2")
    with pytest.raises(ModelLoadError, match=r"unsupported architecture GPT2LMHeadModel.*LlamaForCausalLM"):
        load_model(checkpoint)


def test_missing_directory_config_and_weights(tmp_path: Path, checkpoint: Path) -> None:
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(empty)
    (checkpoint / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"no model\.safetensors"):
        load_model(checkpoint)


def test_corrupt_files(checkpoint: Path) -> None:
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match="corrupt or unreadable"):
        load_model(checkpoint)
    (checkpoint / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_model(checkpoint)


def test_missing_tensor_and_wrong_shape(checkpoint: Path) -> None:
    edit_config(checkpoint, num_hidden_layers=4)
    with pytest.raises(ModelLoadError, match=r"no tensor 'model\.layers\.3\."):
        load_model(checkpoint)
    edit_config(checkpoint, num_hidden_layers=3, intermediate_size=50)
    with pytest.raises(ModelLoadError, match=r"has shape .* config implies"):
        load_model(checkpoint)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama", shard=True)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(ModelLoadError, match=shard.name):
        load_model(tmp_path)


def test_dtype_choice(checkpoint: Path) -> None:
    assert load_model(checkpoint, LoadOptions(dtype="bfloat16")).dtype.is_floating_point
    assert str(load_model(checkpoint).dtype) == "torch.float32"
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        load_model(checkpoint, LoadOptions(dtype="int3"))
