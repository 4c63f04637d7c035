"""Reading the families' own config keys (their maths against HF's: test_forward_vs_hf.py)."""

from __future__ import annotations

from typing import Any

import pytest

from treespec.shared.model.config import ModelConfig, Multipliers
from treespec.shared.model.errors import ModelLoadError


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
