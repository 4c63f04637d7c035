"""Vision-language checkpoints (Gemma 3 4B-27B, Mistral Small 3.1) served as their text models: the
text logits equal HF's whole model's, from either way of naming their tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from tests.unit.model.paged import PagedDriver, Seq
from tests.unit.model.test_forward_vs_hf import TINY, rel_err
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.loader import load_model

TEXT: dict[str, Any] = {**TINY, "num_hidden_layers": 2, "head_dim": 16, "pad_token_id": 0}
VISION: dict[str, Any] = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
)


def _gemma3() -> transformers.PretrainedConfig:
    text = transformers.Gemma3TextConfig(**TEXT, sliding_window=6, query_pre_attn_scalar=24)
    vision = transformers.SiglipVisionConfig(**VISION, image_size=28, patch_size=14)
    return transformers.Gemma3Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=4,
        image_token_index=96,
        boi_token_index=94,
        eoi_token_index=95,
    )


def _mistral3() -> transformers.PretrainedConfig:
    text = transformers.MistralConfig(**TEXT, sliding_window=None, tie_word_embeddings=False)
    vision = transformers.PixtralVisionConfig(**VISION, image_size=28, patch_size=14)
    return transformers.Mistral3Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        image_token_index=96,
        tie_word_embeddings=False,
    )


MAKERS = {"gemma3": _gemma3, "mistral3": _mistral3}


def _checkpoint(path: Path, family: str) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(MAKERS[family]()).float().eval()
    with torch.no_grad():  # norms start at one (or zero); perturb them so that a missed norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(path)
    return model


def _text_logits(hf: transformers.PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(input_ids=ids[None]).logits[0]


@pytest.mark.parametrize("family", sorted(MAKERS))
def test_text_logits_equal_the_whole_models(tmp_path: Path, family: str) -> None:
    hf = _checkpoint(tmp_path, family)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "text_config" in config and "language_model.model.embed_tokens.weight" in load_file(
        tmp_path / "model.safetensors"
    )
    ids = torch.randint(0, 90, (30,), generator=torch.Generator().manual_seed(1))
    got = PagedDriver(load_model(tmp_path)).forward([(Seq(), ids, None)])[0]
    assert rel_err(got, _text_logits(hf, ids)) < 1e-4


def test_the_names_transformers_4_52_gave_load_too(tmp_path: Path) -> None:
    """model.language_model.* and a top-level lm_head, as transformers 4.52-4.57 saved these models."""
    hf = _checkpoint(tmp_path, "mistral3")
    file = tmp_path / "model.safetensors"
    renamed = {
        name.replace("language_model.model.", "model.language_model.").replace(
            "language_model.lm_head", "lm_head"
        ): t
        for name, t in load_file(file).items()
    }
    assert "lm_head.weight" in renamed and "model.language_model.norm.weight" in renamed
    save_file(renamed, file, metadata={"format": "pt"})
    ids = torch.arange(3, 25)
    got = PagedDriver(load_model(tmp_path)).forward([(Seq(), ids, None)])[0]
    assert rel_err(got, _text_logits(hf, ids)) < 1e-4


def test_left_out_text_fields_take_transformers_defaults() -> None:
    """The makers' files set few text_config fields (Gemma 3 4B: no head count, no head_dim)."""
    raw = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "eos_token_id": [1, 106],
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34},
    }
    config = ModelConfig.from_dict(raw)
    assert config.architecture == "Gemma3ForCausalLM" and config.family == "gemma3"
    assert (config.hidden_size, config.num_layers, config.head_dim) == (2560, 34, 256)
    assert config.eos_token_ids == (1, 106) and config.layer_windows.count(None) == 5  # 34 // 6 global
