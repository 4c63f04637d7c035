"""The target model's architecture, read from a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.moe import MoeConfig

SLIDING, FULL = "sliding_attention", "full_attention"  # Gemma 3's kinds of layer
QKV_BIAS_FAMILIES = ("qwen2", "qwen2_moe", "glm4")  # biases on q, k and v, none on the output projection

# Architectures whose weights and maths the own forward implements: decoder-only transformers, each
# family's differences from Llama named by ModelConfig's fields.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "SmolLM3ForCausalLM": "smollm3",  # some layers without rotary embeddings (no_rope_layers)
    "GraniteForCausalLM": "granite",  # Llama with muP multipliers (Multipliers)
    "Phi3ForCausalLM": "phi3",  # fused qkv and gate-up tensors; rotary over part of each head
    "Olmo2ForCausalLM": "olmo2",  # norms after each block, not before; q/k norms over all heads
    "Olmo3ForCausalLM": "olmo3",  # OLMo 2's, with sliding-window layers between global ones
    # GLM-4-0414: q/k/v biases, norms after each block too, rotary over half of each head in
    # interleaved pairs (rope_interleaved)
    "Glm4ForCausalLM": "glm4",
    # Command R, Aya Expanse: LayerNorm without bias, attention and MLP in parallel from one norm,
    # interleaved rotary pairs, scaled logits
    "CohereForCausalLM": "cohere",
    # Gemma 3 (text): GeGLU, (1 + w) norms around each block, q/k norms, sliding-window layers
    # between global ones, each kind with its own rotary base.
    "Gemma3ForCausalLM": "gemma3",
    "Gemma2ForCausalLM": "gemma2",  # Gemma 3's layers without q/k norms, with logit soft-capping
    # Sparse mixture-of-experts feed-forward layers (moe.py) on the same attention.
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe",  # and a shared expert beside the routed ones
    "MixtralForCausalLM": "mixtral",
}

# Vision-language checkpoints whose text model is served (text in, text out; images are not taken):
# the wrapper's architecture -> its text model's, read from the config's `text_config`.
TEXT_MODELS = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
    "Mistral3ForConditionalGeneration": "MistralForCausalLM",
}


@dataclass(frozen=True)
class LayerNorms:
    """The names of a layer's RMSNorms by where they sit; None: the family has none there."""

    before_attention: str | None = "input_layernorm"
    after_attention: str | None = None  # on the attention's output, before it joins the residual
    before_mlp: str | None = "post_attention_layernorm"  # HF's Llama name for the pre-MLP norm
    after_mlp: str | None = None


FAMILY_LAYER_NORMS = {
    # before and after each block
    **dict.fromkeys(
        ("gemma2", "gemma3"),
        LayerNorms(
            after_attention="post_attention_layernorm",
            before_mlp="pre_feedforward_layernorm",
            after_mlp="post_feedforward_layernorm",
        ),
    ),
    "glm4": LayerNorms(after_attention="post_self_attn_layernorm", after_mlp="post_mlp_layernorm"),
    "cohere": LayerNorms(before_mlp=None),  # its MLP reads the attention's input norm
    # after each block only
    **dict.fromkeys(
        ("olmo2", "olmo3"),
        LayerNorms(None, "post_attention_layernorm", None, "post_feedforward_layernorm"),
    ),
}


@dataclass(frozen=True)
class Multipliers:
    """Scalings around the layers: of the embedding, of each block's output before it joins the
    residual stream, the attention's scale (instead of 1/sqrt(head_dim)), and the logits' divisor
    (Granite's muP multipliers; Gemma's embedding and attention scales; Cohere's logit scale)."""

    embedding: float = 1.0
    residual: float = 1.0
    attention: float | None = None
    logits_scaling: float = 1.0

    @classmethod
    def from_raw(cls, raw: dict[str, Any], family: str) -> Multipliers:
        if family in ("gemma2", "gemma3"):  # the embedding scaled by sqrt(hidden); its attention scale
            scalar = float(raw.get("query_pre_attn_scalar") or raw.get("head_dim") or 256)
            return cls(embedding=float(raw["hidden_size"]) ** 0.5, attention=scalar**-0.5)
        if family == "cohere":  # logits multiplied by logit_scale
            return cls(logits_scaling=1.0 / float(raw.get("logit_scale", 0.0625)))
        if family != "granite":
            return cls()
        return cls(
            embedding=float(raw.get("embedding_multiplier", 1.0)),
            residual=float(raw.get("residual_multiplier", 1.0)),
            attention=float(raw["attention_multiplier"])
            if raw.get("attention_multiplier") is not None
            else None,
            logits_scaling=float(raw.get("logits_scaling", 1.0)),
        )


@dataclass(frozen=True)
class ModelConfig:
    """What the forward pass needs to know about a checkpoint of a supported architecture."""

    architecture: str
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int  # the leading dims of each head that the rotary embedding turns (partial_rotary_factor)
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_window: int | None
    eos_token_ids: tuple[int, ...]
    raw: dict[str, Any]
    moe: MoeConfig | None = None  # the sparse blocks of a mixture-of-experts family
    nope_layers: frozenset[int] = frozenset()  # layers without rotary embeddings (SmolLM3)
    multipliers: Multipliers = Multipliers()
    # Each layer's kind where they differ (Gemma 3): "sliding_attention" layers see the last
    # `sliding_window` tokens and rotate with their own base, "full_attention" ones see all.
    layer_types: tuple[str, ...] = ()
    activation: str = "silu"  # of the MLP's gate: "silu" (SwiGLU) or "gelu_tanh" (GeGLU)
    norm_offset: float = 0.0  # the norms scale by offset + weight (Gemma: 1 + w)
    # The layer's norms by where they sit (LayerNorms: before the attention, after it on its output,
    # before the MLP, after it): each the checkpoint's name, or None where the family has none there.
    layer_norms: LayerNorms = LayerNorms()
    qk_norm_over_heads: bool = False  # the q/k norms over all heads' dims at once (OLMo 2), not per head
    # The rotary embedding turns dims (0, 1), (2, 3)... (GLM-4), not (i, i + d/2): the loader reorders
    # each head's q and k dims so that the usual rotation computes it (attention scores unchanged).
    rope_interleaved: bool = False
    # Gemma 2's soft-capping (None: none): attention scores, and the final logits, pass through
    # cap * tanh(x / cap).
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    norm_centered: bool = False  # LayerNorm without bias (mean removed) instead of RMSNorm (Cohere)
    parallel_blocks: bool = False  # the attention and the MLP read one norm's output, both added at once

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (None: it attends to every earlier token)."""
        if not self.layer_types:
            return (self.sliding_window,) * self.num_layers
        return tuple(self.sliding_window if t == SLIDING else None for t in self.layer_types)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def step_weights(self) -> int:
        """Weights one forward step multiplies by (every layer's projections and the lm_head; a sparse
        block's router and the experts one token takes): what a decode step reads, and so what it
        costs where decoding is bound by memory bandwidth."""
        h = self.hidden_size
        attention = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        sparse = self.moe.sparse_layers if self.moe is not None else frozenset()
        dense_mlp = 3 * h * self.intermediate_size
        sparse_mlp = self.moe.step_weights(h) if self.moe is not None else 0
        mlps = (self.num_layers - len(sparse)) * dense_mlp + len(sparse) * sparse_mlp
        return self.num_layers * attention + mlps + h * self.vocab_size

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        raw = _text_model(raw)
        architecture = _architecture(raw)
        family = SUPPORTED_ARCHITECTURES[architecture]
        num_heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        num_layers = int(raw["num_hidden_layers"])
        head_dim = int(raw.get("head_dim") or hidden // num_heads)
        return cls(
            architecture=architecture,
            family=family,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
            head_dim=head_dim,
            rotary_dim=_rotary_dim(raw, head_dim),
            rms_norm_eps=float(raw.get("rms_norm_eps") or raw.get("layer_norm_eps") or 1e-6),
            max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases; Llama and Mistral only when the config says so.
            attention_bias=_attention_bias(raw, family),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            qk_norm=family in ("qwen3", "qwen3_moe", "gemma3", "olmo2", "olmo3")
            or (family == "cohere" and bool(raw.get("use_qk_norm"))),
            sliding_window=_sliding_window(raw, family),
            eos_token_ids=_eos_ids(raw.get("eos_token_id")),
            raw=raw,
            moe=MoeConfig.from_raw(raw, family, num_layers),
            nope_layers=_nope_layers(raw, family, num_layers),
            multipliers=Multipliers.from_raw(raw, family),
            layer_types=_layer_types(raw, family, num_layers),
            activation="gelu_tanh" if family in ("gemma2", "gemma3") else "silu",
            norm_offset=1.0 if family in ("gemma2", "gemma3") else 0.0,
            layer_norms=FAMILY_LAYER_NORMS.get(family, LayerNorms()),
            qk_norm_over_heads=family in ("olmo2", "olmo3"),
            rope_interleaved=family in ("glm4", "cohere"),
            attn_logit_softcapping=_optional_float(raw.get("attn_logit_softcapping")),
            final_logit_softcapping=_optional_float(raw.get("final_logit_softcapping")),
            norm_centered=family == "cohere",
            parallel_blocks=family == "cohere",
        )

    @classmethod
    def from_dir(cls, path: Path) -> ModelConfig:
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ModelLoadError(f"{path}: no config.json; expected a Hugging Face model directory")
        try:
            raw = json.loads(config_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{config_file}: not valid JSON ({exc})") from exc
        try:
            return cls.from_dict(raw)
        except KeyError as exc:
            raise ModelLoadError(f"{config_file}: missing key {exc}") from exc


def _text_model(raw: dict[str, Any]) -> dict[str, Any]:
    """A vision-language config's text model as a causal LM's config: its `text_config` with
    transformers' defaults for what it leaves out (the makers' files leave out much), the wrapper's
    end tokens and embedding tying; any other config as it is."""
    wrapper = next((name for name in raw.get("architectures") or () if name in TEXT_MODELS), None)
    text = raw.get("text_config")
    if wrapper is None or not isinstance(text, dict) or not text.get("model_type"):
        return raw
    model_type = str(text["model_type"])
    from transformers import AutoConfig  # here: the command line reads this module without torch

    try:
        hf = AutoConfig.for_model(model_type, **{k: v for k, v in text.items() if k != "model_type"})
    except (ValueError, TypeError) as exc:
        raise ModelLoadError(f"text_config of {wrapper}: {exc}") from exc
    full = {**hf.to_dict(), "model_type": model_type, "architectures": [TEXT_MODELS[wrapper]]}
    for key in ("eos_token_id", "tie_word_embeddings"):
        if raw.get(key) is not None:
            full[key] = raw[key]
    return full


def _architecture(raw: dict[str, Any]) -> str:
    names = raw.get("architectures") or []
    for name in names:
        if name in SUPPORTED_ARCHITECTURES:
            return str(name)
    supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
    found = ", ".join(names) or f"model_type={raw.get('model_type')!r}"
    raise ModelLoadError(f"unsupported architecture {found}; treespec supports {supported}")


def _sliding_window(raw: dict[str, Any], family: str) -> int | None:
    window = raw.get("sliding_window")
    if not window:
        return None
    # Qwen2/Qwen3 configs carry a window but only use it when use_sliding_window is set; Gemma 3's
    # is that of its sliding layers (ModelConfig.layer_windows).
    if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not raw.get("use_sliding_window", False):
        return None
    return int(window)


def _attention_bias(raw: dict[str, Any], family: str) -> bool:
    """Qwen2's q/k/v biases (and Qwen2-MoE's unless its qkv_bias says no); others' where their
    attention_bias says so."""
    if family == "glm4":
        return bool(raw.get("attention_bias", True))
    if family in QKV_BIAS_FAMILIES:
        return family == "qwen2" or bool(raw.get("qkv_bias", True))
    return bool(raw.get("attention_bias", False))


def _rotary_dim(raw: dict[str, Any], head_dim: int) -> int:
    """The rotated dims of each head: all, or `partial_rotary_factor` of them (top level, or in the
    rope parameters as transformers 5 writes it)."""
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    factor = raw.get("partial_rotary_factor") or params.get("partial_rotary_factor") or 1.0
    dim = int(head_dim * float(factor))
    if dim <= 0 or dim > head_dim or dim % 2:
        raise ModelLoadError(f"partial_rotary_factor {factor} gives {dim} rotated dims of {head_dim}")
    return dim


# Families whose layers differ in kind, and every how many layers one is global where the config
# leaves `layer_types` out (as transformers fills them in).
LAYER_TYPE_PATTERNS = {"gemma3": 6, "gemma2": 2, "olmo3": 4}


def _layer_types(raw: dict[str, Any], family: str, num_layers: int) -> tuple[str, ...]:
    """Gemma 3's and OLMo 3's kind of each layer: its `layer_types`, else every
    `sliding_window_pattern`-th layer global; the maths it has no form for are errors."""
    if family not in LAYER_TYPE_PATTERNS:
        return ()
    if raw.get("use_bidirectional_attention"):
        raise ModelLoadError("use_bidirectional_attention is not supported")
    types = raw.get("layer_types")
    if types is None:
        pattern = int(raw.get("sliding_window_pattern", LAYER_TYPE_PATTERNS[family]))
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]
    if len(types) != num_layers or not set(types) <= {SLIDING, FULL}:
        raise ModelLoadError(f"layer_types must name {SLIDING!r} or {FULL!r} for each of {num_layers} layers")
    return tuple(types)


def _nope_layers(raw: dict[str, Any], family: str, num_layers: int) -> frozenset[int]:
    """SmolLM3's layers without rotary embeddings: `no_rope_layers[i]` is 0 (else every
    `no_rope_layer_interval`-th layer, as transformers fills the list in)."""
    if family != "smollm3":
        return frozenset()
    if raw.get("use_sliding_window"):
        raise ModelLoadError("SmolLM3 with use_sliding_window: per-layer sliding windows are not supported")
    flags = raw.get("no_rope_layers")
    if flags is None:
        interval = int(raw.get("no_rope_layer_interval", 4))
        flags = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if len(flags) < num_layers:
        raise ModelLoadError(f"no_rope_layers has {len(flags)} entries for {num_layers} layers")
    return frozenset(i for i, use_rope in enumerate(flags[:num_layers]) if not use_rope)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _eos_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    return (int(value),)
