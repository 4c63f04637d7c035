"""A tiny random Llama with SmolLM2's vocabulary, tokenizer and chat template: what the training
tests generate conversations and train heads with."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import transformers

from treespec.shared.model.store import models_dir, resolve_model_path

SMOL_VOCAB, SMOL_HIDDEN, SMOL_LAYERS = 49152, 32, 4


def make_smol_tiny(out: Path) -> Path:
    """Write the tiny model into `out`; its tokenizer files come from the imported default model
    (`make test` imports it before pytest runs)."""
    source = resolve_model_path(None, models_dir())
    config = transformers.LlamaConfig(
        vocab_size=SMOL_VOCAB,
        hidden_size=SMOL_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=SMOL_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(out)
    for file in source.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens", "chat_template")) or file.name in (
            "generation_config.json",
        ):
            shutil.copy(file, out / file.name)
    return out
