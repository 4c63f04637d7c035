"""Random EAGLE heads written by hand with exactly the public checkpoints' tensor names and config keys
(EAGLE-1/2: yuhuili/EAGLE-LLaMA3-Instruct-8B's layout; EAGLE-3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's),
independently of treespec's own writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

HEAD_INTERMEDIATE = 96
HEAD_HEADS = 4
HEAD_KV_HEADS = 2


def _config(hidden: int, vocab: int, arch: str, **extra: Any) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": HEAD_INTERMEDIATE,
        "num_attention_heads": HEAD_HEADS,
        "num_key_value_heads": HEAD_KV_HEADS,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "torch_dtype": "float16",
        **extra,
    }


def _attention(
    prefix: str, in_features: int, hidden: int, bias: bool, g: torch.Generator
) -> dict[str, torch.Tensor]:
    hd = hidden // HEAD_HEADS
    out = {
        f"{prefix}.self_attn.q_proj.weight": torch.randn(HEAD_HEADS * hd, in_features, generator=g) * 0.2,
        f"{prefix}.self_attn.k_proj.weight": torch.randn(HEAD_KV_HEADS * hd, in_features, generator=g) * 0.2,
        f"{prefix}.self_attn.v_proj.weight": torch.randn(HEAD_KV_HEADS * hd, in_features, generator=g) * 0.2,
        f"{prefix}.self_attn.o_proj.weight": torch.randn(hidden, HEAD_HEADS * hd, generator=g) * 0.2,
        f"{prefix}.mlp.gate_proj.weight": torch.randn(HEAD_INTERMEDIATE, hidden, generator=g) * 0.2,
        f"{prefix}.mlp.up_proj.weight": torch.randn(HEAD_INTERMEDIATE, hidden, generator=g) * 0.2,
        f"{prefix}.mlp.down_proj.weight": torch.randn(hidden, HEAD_INTERMEDIATE, generator=g) * 0.2,
        f"{prefix}.post_attention_layernorm.weight": 1 + 0.1 * torch.randn(hidden, generator=g),
    }
    if bias:
        for name in ("q", "k", "v"):
            rows = out[f"{prefix}.self_attn.{name}_proj.weight"].shape[0]
            out[f"{prefix}.self_attn.{name}_proj.bias"] = 0.1 * torch.randn(rows, generator=g)
    return out


def write_eagle(
    path: Path,
    hidden: int,
    vocab: int,
    *,
    arch: str = "LlamaForCausalLMEagle",
    fc_bias: bool = True,
    qkv_bias: bool = False,
    stray_embed: bool = True,
    weights: str = "pytorch_model.bin",
    seed: int = 0,
) -> Path:
    """EAGLE-1/2: fc (2H -> H, bias), layers.0.* without input_layernorm; no norm, no lm_head."""
    g = torch.Generator().manual_seed(seed)
    tensors = {"fc.weight": torch.randn(hidden, 2 * hidden, generator=g) * 0.2}
    if fc_bias:
        tensors["fc.bias"] = 0.1 * torch.randn(hidden, generator=g)
    tensors |= _attention("layers.0", hidden, hidden, qkv_bias, g)
    if stray_embed:
        tensors["embed_tokens.weight"] = torch.randn(vocab, hidden, generator=g)
    extra = {"bias": fc_bias} | ({"qkv_bias": True} if qkv_bias else {})
    return _write(path, _config(hidden, vocab, arch, **extra), tensors, weights)


def write_eagle3(
    path: Path,
    hidden: int,
    vocab: int,
    num_target_layers: int,
    *,
    draft_vocab: int | None = None,
    arch: str = "LlamaForCausalLMEagle3",
    aux_ids: list[int] | None = None,
    stray_embed: bool = False,
    weights: str = "model.safetensors",
    seed: int = 0,
) -> Path:
    """EAGLE-3: fc (3H -> H), midlayer.* (2H-wide attention inputs, hidden_norm, input_layernorm), norm,
    lm_head over the draft vocabulary, d2t / t2d."""
    g = torch.Generator().manual_seed(seed)
    draft_vocab = draft_vocab or vocab
    tensors = {"fc.weight": torch.randn(hidden, 3 * hidden, generator=g) * 0.2}
    tensors |= _attention("midlayer", 2 * hidden, hidden, False, g)
    tensors["midlayer.input_layernorm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    tensors["midlayer.hidden_norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    tensors["norm.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
    tensors["lm_head.weight"] = torch.randn(draft_vocab, hidden, generator=g) * 0.5
    hot = torch.randperm(vocab, generator=g)[:draft_vocab].sort().values
    tensors["d2t"] = hot - torch.arange(draft_vocab)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[hot] = True
    tensors["t2d"] = t2d
    if stray_embed:
        tensors["embed_tokens.weight"] = torch.randn(vocab, hidden, generator=g)
    extra: dict[str, Any] = {"draft_vocab_size": draft_vocab}
    if aux_ids is not None:
        extra["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux_ids}
    return _write(path, _config(hidden, vocab, arch, **extra), tensors, weights)


def _write(path: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor], weights: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    half = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
    if weights.endswith(".safetensors"):
        save_file(half, str(path / weights))
    else:
        torch.save(half, path / weights)
    return path
