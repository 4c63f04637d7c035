"""Reading the families' own config keys (their maths against HF's: test_forward_vs_hf.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from treespec.shared.model.config import ModelConfig, Multipliers
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.rope import build_layer_ropes


def _config(architecture: str, **extra: Any) -> ModelConfig:
    raw = {
        "architectures": [architecture],
        "vocab_size": 97,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        **extra,
    }
    return ModelConfig.from_dict(raw)


def test_smollm3_nope_layers_from_the_list_or_the_interval() -> None:
    assert _config("SmolLM3ForCausalLM").nope_layers == frozenset({3, 7})  # every 4th by default
    assert _config("SmolLM3ForCausalLM", no_rope_layer_interval=3).nope_layers == frozenset({2, 5})
    flags = [1, 0, 1, 1, 1, 1, 1, 0, 1, 1]  # longer than the layers, as transformers allows
    assert _config("SmolLM3ForCausalLM", no_rope_layers=flags).nope_layers == frozenset({1, 7})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"no_rope_layers": [1, 0, 1]}, "3 entries for 8 layers"),
        ({"use_sliding_window": True, "sliding_window": 128}, "sliding windows are not supported"),
    ],
)
def test_smollm3_configs_it_cannot_serve_are_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        _config("SmolLM3ForCausalLM", **extra)


def test_granite_multipliers_and_the_other_families_defaults() -> None:
    granite = _config(
        "GraniteForCausalLM",
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        attention_multiplier=0.0078125,
        logits_scaling=8.0,
    )
    assert granite.multipliers == Multipliers(12.0, 0.22, 0.0078125, 8.0)
    llama = _config("LlamaForCausalLM", embedding_multiplier=12.0)  # a Llama's stray key means nothing
    assert llama.multipliers == Multipliers() and not llama.nope_layers and llama.moe is None


GEMMA3_LEGACY = {  # as Gemma 3 1B's config.json spells it (transformers 4.5x): no layer_types
    "model_type": "gemma3_text",
    "num_key_value_heads": 1,
    "head_dim": 16,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "query_pre_attn_scalar": 16,
    "max_position_embeddings": 64,
}


def test_gemma3_layers_and_rotary_tables_from_a_legacy_config() -> None:
    config = _config("Gemma3ForCausalLM", **{**GEMMA3_LEGACY, "num_hidden_layers": 7})
    assert config.layer_windows == (512,) * 5 + (None, 512)  # every 6th layer global
    assert config.multipliers.embedding == 8.0 and config.multipliers.attention == 0.25
    ropes = build_layer_ropes(config, torch.device("cpu"))
    dims = torch.arange(0, 16, 2, dtype=torch.float32) / 16
    positions = torch.arange(64, dtype=torch.float32)
    for layer, theta, factor in ((0, 10_000.0, 1.0), (5, 1_000_000.0, 8.0)):  # local; global, scaled
        table = ropes.tables[ropes.layer_table[layer]]
        want = torch.cos(torch.outer(positions, 1.0 / theta**dims / factor))
        torch.testing.assert_close(table.cos[:, :8], want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"layer_types": ["sliding_attention"] * 7}, "for each of 8 layers"),
        ({"layer_types": ["chunked_attention"] * 8}, "for each of 8 layers"),
    ],
)
def test_gemma3_configs_it_cannot_serve_are_errors(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        _config("Gemma3ForCausalLM", **{**GEMMA3_LEGACY, **extra})
