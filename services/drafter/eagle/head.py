"""The EAGLE head as a torch module, with parameter names exactly those of the public checkpoints.

One decoder layer, split into the steps both drafting and training need, so that each brings its own
attention (a per-request draft KV cache when drafting; the training-time-test masks when training):
`layer_input` -> `qkv` -> (caller's attention) -> `finish` -> `logits`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from treespec.drafter.eagle.head_config import EagleHeadConfig
from treespec.drafter.eagle.packed_matmul import MatmulDtype, PackedMatmul, packed_dtype
from treespec.kernels.row_ops import apply_rope, rms_norm, silu_mul
from treespec.shared.model.dual_layout import HeadWeight
from treespec.shared.model.linear import linear
from treespec.shared.model.rope import RopeTables, build_rope_tables


class PackedLinear(nn.Linear):
    """nn.Linear that, once `pack`ed for inference, multiplies with oneDNN's packed weight (CPU: a few
    rows cost about what one does, see shared/model/linear.py; in bfloat16 where that is faster, see
    packed_matmul.py); training uses the plain path."""

    packed: PackedMatmul | None = None

    def pack(self, dtype: torch.dtype) -> None:
        self.packed = PackedMatmul.of(self.weight, self.bias, dtype)


def apply(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    packed = getattr(layer, "packed", None)
    if packed is not None and not torch.is_grad_enabled():
        return packed(x)
    return layer(x)


def fused(layers: list[PackedLinear], dtype: torch.dtype) -> PackedMatmul:
    """One packed product for several layers reading the same input (their outputs side by side)."""
    weight = torch.cat([layer.weight for layer in layers])
    biases = [layer.bias for layer in layers]
    bias = None if any(b is None for b in biases) else torch.cat([b for b in biases if b is not None])
    return PackedMatmul.of(weight, bias, dtype)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class EagleAttention(nn.Module):
    def __init__(self, c: EagleHeadConfig, in_features: int) -> None:
        super().__init__()
        self.q_proj = PackedLinear(in_features, c.num_heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = PackedLinear(in_features, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = PackedLinear(in_features, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = PackedLinear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        self.packed_qkv: PackedMatmul | None = None  # q, k and v in one product, once packed

    def pack(self, dtype: torch.dtype) -> None:
        self.packed_qkv = fused([self.q_proj, self.k_proj, self.v_proj], dtype)
        self.o_proj.pack(dtype)


class EagleMlp(nn.Module):
    def __init__(self, c: EagleHeadConfig) -> None:
        super().__init__()
        self.gate_proj = PackedLinear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = PackedLinear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = PackedLinear(c.intermediate_size, c.hidden_size, bias=False)
        self.packed_gate_up: PackedMatmul | None = None  # gate and up in one product, once packed

    def pack(self, dtype: torch.dtype) -> None:
        self.packed_gate_up = fused([self.gate_proj, self.up_proj], dtype)
        self.down_proj.pack(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_gate_up is not None and not torch.is_grad_enabled():
            return apply(self.down_proj, silu_mul(self.packed_gate_up(x)))
        return apply(self.down_proj, F.silu(self.gate_proj(x)) * self.up_proj(x))


class EagleLayer(nn.Module):
    """EAGLE-3's `midlayer` (input and hidden norms, 2H-wide attention input) or EAGLE's `layers.0`."""

    def __init__(self, c: EagleHeadConfig) -> None:
        super().__init__()
        self.self_attn = EagleAttention(c, 2 * c.hidden_size if c.is_eagle3 else c.hidden_size)
        self.mlp = EagleMlp(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.is_eagle3:
            self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


@dataclass(frozen=True)
class LayerInput:
    residual: torch.Tensor  # [T, H]
    attn_in: torch.Tensor  # [T, 2H] (EAGLE-3) or [T, H]


@dataclass(frozen=True)
class QKV:
    q: torch.Tensor  # [T, heads, head_dim], rotated
    k: torch.Tensor  # [T, kv_heads, head_dim], rotated
    v: torch.Tensor  # [T, kv_heads, head_dim]


@dataclass(frozen=True)
class HeadOutput:
    hidden: torch.Tensor  # [T, H]: the next drafting step's input hidden state
    for_logits: torch.Tensor  # [T, H]: what the lm_head reads


class EagleHead(nn.Module):
    def __init__(self, config: EagleHeadConfig) -> None:
        super().__init__()
        self.config = c = config
        self.fc = PackedLinear(c.fc_in_features, c.hidden_size, bias=c.fc_bias)
        if c.is_eagle3:
            self.midlayer = EagleLayer(c)
            self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.lm_head = PackedLinear(c.hidden_size, c.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.ones(c.vocab_size, dtype=torch.bool))
        else:
            self.layers = nn.ModuleList([EagleLayer(c)])
        self.rope: RopeTables = build_rope_tables(c.rope_model_config(), torch.device("cpu"))
        self.matmul_dtype: torch.dtype | None = None  # set by to_device: the packed weights' dtype

    @property
    def layer(self) -> EagleLayer:
        layer = self.midlayer if self.config.is_eagle3 else self.layers[0]
        assert isinstance(layer, EagleLayer)
        return layer

    def to_device(
        self, device: torch.device, dtype: torch.dtype, matmuls: MatmulDtype = MatmulDtype.AUTO
    ) -> EagleHead:
        """Weights in `dtype` on `device`; for drafting on a CPU also packed, their products in the
        dtype `matmuls` asks for (packed_matmul.py)."""
        self.move_to(device, dtype)
        self.matmul_dtype = packed_dtype(matmuls, torch.device(device), dtype)
        if self.matmul_dtype is not None:
            self.fc.pack(self.matmul_dtype)
            self.layer.self_attn.pack(self.matmul_dtype)
            self.layer.mlp.pack(self.matmul_dtype)
            if self.config.is_eagle3:
                self.lm_head.pack(self.matmul_dtype)
        return self

    def move_to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> EagleHead:
        """Weights, buffers and the rotary tables on `device`, weights in `dtype`, nothing packed (as
        training reads them)."""
        self.to(device=device, dtype=dtype)
        self.rope = RopeTables(self.rope.cos.to(device), self.rope.sin.to(device))
        return self

    def step_weights(self) -> int:
        """Weights one drafting step (a tree level) multiplies by, besides an EAGLE-2 head's borrowed
        lm_head: the layer's projections; EAGLE-3's own lm_head (its fc reads only target features,
        at catch-up); EAGLE-2's fc (every step)."""
        matmuls = [m for m in self.layer.modules() if isinstance(m, nn.Linear)]
        matmuls.append(self.lm_head if self.config.is_eagle3 else self.fc)
        return sum(m.weight.numel() for m in matmuls)

    def draft_to_target(self) -> torch.Tensor:
        """Target id of every draft id (EAGLE-3: draft id + d2t[draft id])."""
        d2t = self.get_buffer("d2t")
        return torch.arange(d2t.shape[0], device=d2t.device) + d2t

    # ---- the steps of one layer ---------------------------------------------------------------

    def layer_input(self, embeds: torch.Tensor, hidden: torch.Tensor) -> LayerInput:
        """embeds [T, H] of the tokens; hidden [T, W]: target features (W = fc input for EAGLE-3) or
        the head's own previous output [T, H]."""
        c, layer = self.config, self.layer
        if c.is_eagle3:
            h = apply(self.fc, hidden) if hidden.shape[-1] != c.hidden_size else hidden
            attn_in = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(h)], dim=-1)
            return LayerInput(h, attn_in)
        x = apply(self.fc, torch.cat([embeds, hidden], dim=-1))
        return LayerInput(x, x)

    def qkv(self, attn_in: torch.Tensor, positions: torch.Tensor) -> QKV:
        c, attn = self.config, self.layer.self_attn
        cos, sin = self.rope.lookup(positions, attn_in.dtype)
        q_size, kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        if attn.packed_qkv is not None and not torch.is_grad_enabled():
            q_out, k_out, v_out = attn.packed_qkv(attn_in).split([q_size, kv_size, kv_size], dim=-1)
        else:
            q_out, k_out, v_out = attn.q_proj(attn_in), attn.k_proj(attn_in), attn.v_proj(attn_in)
        q = apply_rope(q_out.reshape(-1, c.num_heads, c.head_dim), cos, sin)
        k = apply_rope(k_out.reshape(-1, c.num_kv_heads, c.head_dim), cos, sin)
        return QKV(q, k, v_out.reshape(-1, c.num_kv_heads, c.head_dim))

    def finish(self, residual: torch.Tensor, attn_out: torch.Tensor) -> HeadOutput:
        """attn_out [T, heads * head_dim] -> the layer's output."""
        layer = self.layer
        h = residual + apply(layer.self_attn.o_proj, attn_out)
        out = h + layer.mlp(layer.post_attention_layernorm(h))
        return HeadOutput(out, self.norm(out) if self.config.is_eagle3 else out)

    def logits(self, for_logits: torch.Tensor, target_lm_head: HeadWeight | None = None) -> torch.Tensor:
        """EAGLE-3: over the draft vocabulary. EAGLE: the target's lm_head (`linear` layout), or rows
        of it (FR-Spec), passed by the caller."""
        if self.config.is_eagle3:
            return apply(self.lm_head, for_logits)
        if target_lm_head is None:
            raise ValueError("an EAGLE-2 head reads logits through the target's lm_head")
        return linear(for_logits, target_lm_head)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [T, heads, d], k/v [S, kv_heads, d], mask [T, S] bool (True: may attend) -> [T, heads * d]."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, enable_gqa=True
    )
    return out.transpose(0, 1).reshape(q.shape[0], -1)


def attend_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`attend` for a few query rows (a drafting step's tree nodes over the draft cache): each KV head's
    query heads and rows as one batched product over its keys. On a CPU this is two to three times
    faster than scaled_dot_product_attention with a mask for a handful of rows (which prepares the mask
    for flash attention's blocks); its scores take rows x keys x heads floats, so long prompts use
    `attend`."""
    rows, heads, d = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads  # query head h reads KV head h // group
    qg = (q * d**-0.5).view(rows, kv_heads, group, d).permute(1, 0, 2, 3).reshape(kv_heads, rows * group, d)
    scores = torch.bmm(qg, k.permute(1, 2, 0)).view(kv_heads, rows, group, -1)
    scores.masked_fill_(~mask[None, :, None, :], float("-inf"))
    probs = scores.softmax(dim=-1).view(kv_heads, rows * group, -1)
    out = torch.bmm(probs.to(v.dtype), v.transpose(0, 1))  # [kv_heads, rows * group, d]
    return out.view(kv_heads, rows, group, d).permute(1, 0, 2, 3).reshape(rows, heads * d)
