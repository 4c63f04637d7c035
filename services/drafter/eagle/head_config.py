"""An EAGLE head's architecture, read from (and written to) the public checkpoints' `config.json`.

EAGLE-1/2 (`LlamaForCausalLMEagle`, or `LlamaForCausalLM` with `layers.0.*` tensors): `fc` maps
concat(embedding, target feature) 2H -> H, one decoder layer without input norm, the target's lm_head.
EAGLE-3 (`LlamaForCausalLMEagle3`, or `midlayer.*` tensors): `fc` maps the concatenated auxiliary
target layers to H, `midlayer` attends over concat(norm(embedding), norm(hidden)) (2H wide), own `norm`
and `lm_head` over `draft_vocab_size`, `d2t`/`t2d` between draft and target ids.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from treespec.shared.model.config import ModelConfig
from treespec.shared.model.errors import ModelLoadError


class EagleFormat(enum.Enum):
    EAGLE = "eagle"  # EAGLE-1 / EAGLE-2 heads (same weights; EAGLE-2 is the dynamic tree)
    EAGLE3 = "eagle3"


ARCHITECTURES = {
    "LlamaForCausalLMEagle": EagleFormat.EAGLE,
    "LlamaForCausalLMEagle3": EagleFormat.EAGLE3,
    "Qwen2ForCausalLMEagle": EagleFormat.EAGLE,
    "Qwen2ForCausalLMEagle3": EagleFormat.EAGLE3,
}
# Architectures that name the base model only: the tensors tell the format.
GENERIC_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


class HeadConfigError(ModelLoadError, ValueError):
    """A head checkpoint that cannot be read, or that does not fit the target (a ValueError too, as
    the drafter registry reports bad options)."""


@dataclass(frozen=True)
class EagleHeadConfig:
    format: EagleFormat
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int  # EAGLE-3's own lm_head rows; the target vocabulary for EAGLE
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...] = ()  # EAGLE-3 ("output of layer id"); () means the target's default
    fc_bias: bool = False
    attention_bias: bool = False  # q/k/v biases (Qwen-family heads)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_eagle3(self) -> bool:
        return self.format is EagleFormat.EAGLE3

    @property
    def fc_in_features(self) -> int:
        if self.is_eagle3:
            return self.target_hidden_size * (len(self.aux_layer_ids) or 3)
        return 2 * self.hidden_size

    @classmethod
    def from_dict(
        cls, raw: dict[str, Any], fmt: EagleFormat, fc_bias: bool, attention_bias: bool
    ) -> EagleHeadConfig:
        try:
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            vocab = int(raw["vocab_size"])
            eagle_config = raw.get("eagle_config") or {}
            aux = eagle_config.get("eagle_aux_hidden_state_layer_ids") or ()
            return cls(
                format=fmt,
                hidden_size=hidden,
                intermediate_size=int(raw["intermediate_size"]),
                num_heads=heads,
                num_kv_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                vocab_size=vocab,
                draft_vocab_size=int(raw.get("draft_vocab_size") or vocab)
                if fmt is EagleFormat.EAGLE3
                else vocab,
                target_hidden_size=int(raw.get("target_hidden_size") or hidden),
                aux_layer_ids=tuple(int(i) for i in aux),
                fc_bias=fc_bias,
                attention_bias=attention_bias,
                raw=dict(raw),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HeadConfigError(f"the head's config.json is missing or has a bad value: {exc!r}") from exc

    def to_dict(self) -> dict[str, Any]:
        """config.json in the public format (keys from `raw` are kept; ours override)."""
        out = dict(self.raw)
        out.update(
            {
                "architectures": ["LlamaForCausalLMEagle3" if self.is_eagle3 else "LlamaForCausalLMEagle"],
                "model_type": "llama",
                "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size,
                "num_attention_heads": self.num_heads,
                "num_key_value_heads": self.num_kv_heads,
                "head_dim": self.head_dim,
                "num_hidden_layers": 1,
                "rms_norm_eps": self.rms_norm_eps,
                "vocab_size": self.vocab_size,
                "attention_bias": self.attention_bias,
                "hidden_act": "silu",
            }
        )
        out.setdefault("rope_theta", 10000.0)
        out.setdefault("max_position_embeddings", 8192)
        if self.is_eagle3:
            out["draft_vocab_size"] = self.draft_vocab_size
            out["target_hidden_size"] = self.target_hidden_size
            if self.aux_layer_ids:
                out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids)}
        else:
            out["bias"] = self.fc_bias
        return out

    def rope_model_config(self) -> ModelConfig:
        """A one-layer Llama config with the head's rotary settings (for the shared RoPE tables)."""
        raw = {k: v for k, v in self.to_dict().items() if k != "eagle_config"}
        raw.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
        return ModelConfig.from_dict(raw)
