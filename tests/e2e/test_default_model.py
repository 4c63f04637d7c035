"""The real import of the bundled SmolLM2-135M-Instruct GGUF into a Hugging Face folder.

The folder `make test` imported the model into is checked against what transformers reads from the
GGUF itself; a copy of it in a temporary models folder is imported again (a no-op) and then forced
to convert again over a killed run's leftovers, and the conversion is checked the same way.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from treespec.shared.cli.main import main
from treespec.shared.model import gguf_import, store

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


class Reference(NamedTuple):
    """The model and tokenizer as transformers reads them straight from the GGUF file."""

    state: dict[str, torch.Tensor]  # cpu, float32, dequantized
    input_ids: torch.Tensor  # [1, seq] int64: MESSAGES through the chat template
    logits: torch.Tensor  # [1, seq, vocab] float32


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def model_path() -> Path:
    """The folder every command uses ($TREESPEC_MODELS_DIR or ~/.cache/treespec/models), which
    `make test` fills before pytest runs (on a clean machine, a fresh import)."""
    path = store.default_model_path(store.models_dir())
    assert store.is_imported(path), (
        f"no imported default model in {path}: run `treespec models import-default`"
    )
    return path


@pytest.fixture(scope="module")
def fresh_models_dir(offline: None, model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder of the module's own holding a copy of that import (the forced import below
    converts the GGUF again, once)."""
    models_dir = tmp_path_factory.mktemp("models")
    shutil.copytree(model_path, store.default_model_path(models_dir))
    return models_dir


@pytest.fixture(scope="module")
def reference(offline: None) -> Reference:
    gguf = gguf_import.locate_default_gguf()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    input_ids = _chat_ids(tokenizer)
    with torch.no_grad():
        logits = model(input_ids).logits
    return Reference(state=model.state_dict(), input_ids=input_ids, logits=logits)


def _chat_ids(tokenizer: Any) -> torch.Tensor:
    encoded = tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    return encoded["input_ids"]


def _assert_weights_equal(path: Path, reference: Reference) -> None:
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        # Tied embeddings: lm_head.weight is the embedding and is stored once.
        assert names == set(reference.state) - {"lm_head.weight"}
        for name in sorted(names):
            tensor = f.get_tensor(name)
            assert tensor.dtype == torch.float32, name
            assert torch.equal(tensor, reference.state[name]), name


def test_config(model_path: Path) -> None:
    raw = json.loads((model_path / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLM"]
    assert raw.get("dtype", raw.get("torch_dtype")) == "float32"
    config = AutoConfig.from_pretrained(model_path)
    assert config.model_type == "llama"
    assert config.num_hidden_layers == 30
    assert config.hidden_size == 576
    assert config.num_attention_heads == 9
    assert config.num_key_value_heads == 3
    assert config.vocab_size == 49152
    assert config.tie_word_embeddings is True
    assert config.eos_token_id == 2


def test_files_and_record(model_path: Path) -> None:
    for name in (*gguf_import.REQUIRED_FILES, gguf_import.CHAT_TEMPLATE_FILE):
        assert (model_path / name).is_file(), name
    assert "<|im_start|>" in json.loads((model_path / "tokenizer_config.json").read_text())["chat_template"]
    generation = json.loads((model_path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2
    record = gguf_import.read_record(model_path)
    assert record is not None
    assert record.same_source(gguf_import.describe_source(gguf_import.locate_default_gguf()))


def test_weights_are_the_dequantized_values(model_path: Path, reference: Reference) -> None:
    _assert_weights_equal(model_path, reference)


def test_reloaded_model_reproduces_the_gguf_logits(model_path: Path, reference: Reference) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True)
    assert model.dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        logits = model(reference.input_ids).logits
    # Usually bit-identical; once in a few runs on a loaded shared CPU the two forwards differed by
    # up to 5e-3 (logits up to ~40) although the weights matched exactly, hence the tolerance.
    # A real loading fault (untied or missing lm_head, wrong rope or norm) is off by whole units.
    torch.testing.assert_close(logits, reference.logits, rtol=1e-3, atol=1e-2)
    assert torch.equal(logits.argmax(-1), reference.logits.argmax(-1))


def test_tokenizer_and_chat_template(model_path: Path, reference: Reference) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    assert tokenizer.chat_template
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert isinstance(text, str)
    assert "<|im_start|>user\nWhat is the capital of France?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_id == 2
    assert torch.equal(_chat_ids(tokenizer), reference.input_ids)
    ids = tokenizer("Hello, world!")["input_ids"]
    assert tokenizer.decode(ids) == "Hello, world!"


def test_second_import_is_a_noop(fresh_models_dir: Path) -> None:
    weights = store.default_model_path(fresh_models_dir) / "model.safetensors"
    before = weights.stat().st_mtime_ns
    start = time.perf_counter()
    assert gguf_import.import_default_model(fresh_models_dir) == weights.parent
    assert time.perf_counter() - start < 5.0
    assert weights.stat().st_mtime_ns == before


def test_cli_import_default(fresh_models_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "import-default", "--models-dir", str(fresh_models_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(store.default_model_path(fresh_models_dir))


def test_force_reimports_over_leftovers(fresh_models_dir: Path, reference: Reference) -> None:
    target = store.default_model_path(fresh_models_dir)
    before = (target / "model.safetensors").stat().st_mtime_ns
    # What a run killed mid-conversion leaves behind, including a record that must not count.
    leftover = fresh_models_dir / f".{store.DEFAULT_MODEL_NAME}.tmp-killed"
    leftover.mkdir()
    (leftover / "config.json").write_text("{}")
    (leftover / store.IMPORT_RECORD_FILE).write_text("{}")
    assert gguf_import.import_default_model(fresh_models_dir, force=True) == target
    assert (target / "model.safetensors").stat().st_mtime_ns != before
    assert not leftover.exists()
    assert sorted(p.name for p in fresh_models_dir.iterdir() if not p.name.endswith(".lock")) == [
        store.DEFAULT_MODEL_NAME
    ]
    _assert_weights_equal(target, reference)
    test_config(target)
    test_files_and_record(target)
    test_reloaded_model_reproduces_the_gguf_logits(target, reference)
