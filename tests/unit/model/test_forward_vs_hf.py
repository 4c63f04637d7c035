"""The own forward equals HF transformers' on tiny random models of each supported family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from tests.unit.model.paged import PagedDriver, Seq
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.loader import LoadOptions, load_model

TINY: dict[str, Any] = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)

FAMILIES: dict[str, tuple[type[transformers.PretrainedConfig], dict[str, Any]]] = {
    "llama": (transformers.LlamaConfig, dict(tie_word_embeddings=False)),
    "llama-tied-bias": (transformers.LlamaConfig, dict(tie_word_embeddings=True, attention_bias=True)),
    "llama3-rope": (
        transformers.LlamaConfig,
        dict(
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=50000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=32,
            )
        ),
    ),
    "mistral": (transformers.MistralConfig, dict(sliding_window=None)),
    "qwen2": (transformers.Qwen2Config, dict(tie_word_embeddings=True)),
    "qwen3": (transformers.Qwen3Config, dict(head_dim=24, tie_word_embeddings=False)),
    # SmolLM3: its second layer without rotary embeddings (a NoPE layer every second one).
    "smollm3": (
        transformers.SmolLM3Config,
        dict(no_rope_layer_interval=2, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    ),
    # Granite: muP multipliers of the embedding, the residual branches, the attention and the logits.
    "granite": (
        transformers.GraniteConfig,
        dict(
            tie_word_embeddings=True,
            embedding_multiplier=3.0,
            residual_multiplier=0.4,
            attention_multiplier=0.05,
            logits_scaling=2.5,
        ),
    ),
    # Gemma 3: two sliding-window layers (6 tokens, each with its own rotary base) around a global
    # one with linear rope scaling; GeGLU, (1 + w) sandwich norms, q/k norms, its attention scale.
    "gemma3": (
        transformers.Gemma3TextConfig,
        dict(
            head_dim=16,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=24,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
            },
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # Phi-3/Phi-4: fused q/k/v and gate/up tensors; Phi-4-mini's rotary over part of each head.
    "phi3": (transformers.Phi3Config, dict(pad_token_id=0, eos_token_id=2, bos_token_id=1)),
    "phi3-partial-rotary": (
        transformers.Phi3Config,
        dict(
            partial_rotary_factor=0.5,
            tie_word_embeddings=True,
            pad_token_id=0,
            eos_token_id=2,
            bos_token_id=1,
        ),
    ),
    # OLMo 2: norms after the attention and the MLP instead of before; q/k norms over all heads.
    "olmo2": (transformers.Olmo2Config, dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # OLMo 3: OLMo 2's layers, the first and last with a 6-token sliding window.
    "olmo3": (
        transformers.Olmo3Config,
        dict(
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # GLM-4-0414: rotary over half of each head in interleaved pairs, q/k/v biases, norms after each
    # block too, fused gate/up.
    "glm4": (transformers.Glm4Config, dict(head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # Command R / Aya Expanse: LayerNorm without bias, attention and MLP in parallel, interleaved
    # rotary pairs, scaled logits; Command R+'s per-head q/k LayerNorms.
    "cohere": (
        transformers.CohereConfig,
        dict(logit_scale=0.25, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    ),
    "cohere-qk-norm": (
        transformers.CohereConfig,
        dict(use_qk_norm=True, logit_scale=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    ),
    # Gemma 2: Gemma 3's layers without q/k norms, sliding and global in turn, attention scores and
    # logits soft-capped (caps small enough to bite on these random weights).
    "gemma2": (
        transformers.Gemma2Config,
        dict(
            head_dim=16,
            sliding_window=6,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=0.1,
            final_logit_softcapping=0.3,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
    ),
    # Mixture of experts: every token takes 2 of 6 experts; Qwen3-MoE's second layer is dense (its
    # mlp_only_layers), its kept probabilities renormalized; Mixtral always renormalizes.
    "qwen3-moe": (
        transformers.Qwen3MoeConfig,
        dict(
            head_dim=24,
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=40,
            norm_topk_prob=True,
            mlp_only_layers=[1],
        ),
    ),
    "qwen3-moe-unnormalized": (
        transformers.Qwen3MoeConfig,
        dict(num_experts=5, num_experts_per_tok=3, moe_intermediate_size=24, decoder_sparse_step=2),
    ),
    # Qwen2-MoE: a shared expert with its sigmoid gate beside 4 routed experts (2 per token).
    "qwen2-moe": (
        transformers.Qwen2MoeConfig,
        dict(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=40,
            tie_word_embeddings=False,
        ),
    ),
    "mixtral": (
        transformers.MixtralConfig,
        dict(num_local_experts=6, num_experts_per_tok=2, sliding_window=None),
    ),
}
MOE = ("qwen3-moe", "qwen3-moe-unnormalized", "qwen2-moe", "mixtral")


def make_checkpoint(tmp: Path, family: str, shard: bool = False) -> transformers.PreTrainedModel:
    config_cls, extra = FAMILIES[family]
    config = config_cls(**TINY, **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # norms start at one; perturb them so that a missed norm shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp, max_shard_size="40KB" if shard else "5GB")
    return model


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("length", [21, 80])  # 80: past the row kernel: the prefill kernel (qwen3: SDPA)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_hf(tmp_path: Path, family: str, length: int) -> None:
    hf = make_checkpoint(tmp_path, family)
    ids = torch.randint(0, TINY["vocab_size"], (length,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
    got = PagedDriver(load_model(tmp_path)).forward([(Seq(), ids, None)])[0]
    assert rel_err(got, want) < 1e-4


def test_sharded_checkpoint_loads(tmp_path: Path) -> None:
    hf = make_checkpoint(tmp_path, "llama", shard=True)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    ids = torch.arange(10)
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
    got = PagedDriver(load_model(tmp_path)).forward([(Seq(), ids, None)])[0]
    assert rel_err(got, want) < 1e-4


def test_hidden_capture_matches_hf_hidden_states(tmp_path: Path) -> None:
    hf = make_checkpoint(tmp_path, "llama")
    ids = torch.arange(12)
    with torch.no_grad():
        out = hf(ids[None], output_hidden_states=True)
    model = load_model(tmp_path)
    driver = PagedDriver(model)
    from treespec.shared.model.attention.layout import BatchLayout
    from treespec.shared.model.causal_lm import HiddenCapture

    layout = BatchLayout([driver.layout(Seq(), len(ids))])
    plan = driver.backend.plan(layout, model.device)
    rows = torch.tensor([3, 11])
    res = model.forward(
        ids, layout.positions(), driver.backend, plan, driver.cache, rows, HiddenCapture(rows, (1, 2))
    )
    want_aux = torch.cat([out.hidden_states[1][0, rows], out.hidden_states[2][0, rows]], dim=-1)
    assert res.aux_hidden is not None and res.hidden is not None
    assert rel_err(res.aux_hidden, want_aux) < 1e-5
    # HF's last hidden state is after the final norm.
    assert rel_err(res.hidden, out.hidden_states[-1][0, rows]) < 1e-4


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - set(MOE)))
def test_step_weights_count_every_matmul_weight_of_the_hf_model(tmp_path: Path, family: str) -> None:
    hf = make_checkpoint(tmp_path, family)
    matmuls = [m for m in hf.modules() if isinstance(m, torch.nn.Linear)]  # projections and lm_head
    assert ModelConfig.from_dir(tmp_path).step_weights == sum(m.weight.numel() for m in matmuls)


@pytest.mark.parametrize("family", MOE)
def test_step_weights_of_a_mixture_count_the_experts_a_token_takes(tmp_path: Path, family: str) -> None:
    """Every dense weight, each sparse block's router, top-k of its experts (not all of them) and a
    shared expert with its gate."""
    hf = make_checkpoint(tmp_path, family)
    config = ModelConfig.from_dir(tmp_path)
    assert config.moe is not None
    experts = [m for name, m in hf.named_modules() if name.endswith("experts")]
    assert len(experts) == len(config.moe.sparse_layers) > 0
    weights = [  # every matmul's weight (a shared expert's too), no norm, bias or embedding
        p
        for name, p in hf.named_parameters()
        if "norm" not in name and not name.endswith("bias") and name != "model.embed_tokens.weight"
    ]
    per_expert = sum(p[0].numel() for block in experts for p in block.parameters()) // len(experts)
    all_experts = sum(p.numel() for block in experts for p in block.parameters())
    taken = len(experts) * config.moe.top_k * per_expert
    assert config.step_weights == sum(p.numel() for p in weights) - all_experts + taken


def test_gemma_norms_stay_float32_in_a_bfloat16_model(tmp_path: Path) -> None:
    """Gemma's 1 + w is kept in float32 (a bfloat16 1 + w would round w away), and the norms run in
    float32 as transformers runs them: the bfloat16 model stays near the float32 one."""
    hf = make_checkpoint(tmp_path, "gemma3")
    ids = torch.arange(3, 40)
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
    model = load_model(tmp_path, LoadOptions(dtype="bfloat16"))
    layer = model.weights.layers[0]
    assert model.dtype == torch.bfloat16 and model.weights.norm.dtype == torch.float32
    assert all(
        n.dtype == torch.float32
        for n in (*layer.norms(), layer.attn.q_norm, layer.attn.k_norm)
        if n is not None
    )
    assert rel_err(PagedDriver(model).forward([(Seq(), ids, None)])[0].float(), want) < 5e-2
