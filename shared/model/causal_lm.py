"""The own forward pass of a Llama-family causal LM over a ragged batch and a paged KV cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from treespec.kernels.row_ops import apply_rope, centered_norm, gelu_tanh_mul, rms_norm, silu_mul
from treespec.shared.model.attention.backend import AttentionBackend
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.kv_cache import KVCache
from treespec.shared.model.layer_run import LayerRun, StepRows
from treespec.shared.model.linear import linear
from treespec.shared.model.moe_forward import moe_forward
from treespec.shared.model.rope import LayerRopes
from treespec.shared.model.weights import (
    AttentionWeights,
    ExpertWeights,
    LayerWeights,
    MlpWeights,
    ModelWeights,
)


@dataclass(frozen=True)
class HiddenCapture:
    """Which tokens' hidden states to return, and which layers' inputs besides the final normed state."""

    rows: torch.Tensor  # [C] long: token rows of the batch
    aux_layers: tuple[int, ...] = ()  # residual stream entering these layers (HF hidden_states[i])


@dataclass(frozen=True)
class ForwardOutput:
    logits: torch.Tensor  # [R, vocab] float32 for the requested rows
    hidden: torch.Tensor | None  # [C, hidden]: final normed state of the captured rows
    aux_hidden: torch.Tensor | None  # [C, len(aux_layers) * hidden]: the aux layers' states, concatenated


class CausalLM:
    def __init__(self, config: ModelConfig, weights: ModelWeights, rope: LayerRopes) -> None:
        self.config = config
        self.weights = weights
        self.rope = rope
        # Run a decode or verify step's layers in one call to the own kernels where they allow it
        # (layer_run.py: the same results); False keeps the Python loop.
        self.fused_layers = True
        self._run: LayerRun | None = None

    @property
    def device(self) -> torch.device:
        return self.weights.norm.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.dtype

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T] long
        positions: torch.Tensor,  # [T] long
        backend: AttentionBackend,
        plan: Any,
        cache: KVCache,
        logits_rows: torch.Tensor,  # [R] long
        capture: HiddenCapture | None = None,
    ) -> ForwardOutput:
        ropes = self.rope.lookup(positions, self.dtype)
        cos, sin = ropes[0]
        h = self.weights.embed_tokens(input_ids)
        multipliers = self.config.multipliers
        if multipliers.embedding != 1.0:
            h = h * multipliers.embedding
        aux: list[torch.Tensor] = []
        run = self._layer_run(backend, plan, cache, h, cos, sin)
        if run is not None:
            h = self._run_layers(run, h, cache, capture, aux)
        for i, layer in enumerate(self.weights.layers if run is None else ()):
            if capture is not None and i in capture.aux_layers:
                aux.append(h[capture.rows])
            h = self._layer(i, layer, h, ropes[self.rope.layer_table[i]], backend, plan, cache)
        logits_rows_h = self._norm(h[logits_rows], self.weights.norm)
        logits = linear(logits_rows_h, self.weights.lm_head).float()
        if multipliers.logits_scaling != 1.0:
            logits = logits / multipliers.logits_scaling
        cap = self.config.final_logit_softcapping
        if cap is not None:  # Gemma 2
            logits = torch.tanh(logits / cap) * cap
        hidden = aux_hidden = None
        if capture is not None:
            hidden = self._norm(h[capture.rows], self.weights.norm)
            aux_hidden = torch.cat(aux, dim=-1) if aux else None
        return ForwardOutput(logits=logits, hidden=hidden, aux_hidden=aux_hidden)

    def _layer(
        self,
        i: int,
        layer: LayerWeights,
        h: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        backend: AttentionBackend,
        plan: Any,
        cache: KVCache,
    ) -> torch.Tensor:
        """One decoder layer in the Python loop: its norms wherever the family has them."""
        cos, sin = rope
        attn_in = h if layer.input_norm is None else self._norm(h, layer.input_norm)
        attn_out = self._attention(layer.attn, attn_in, cos, sin, i, backend, plan, cache)
        if layer.attn_out_norm is not None:
            attn_out = self._norm(attn_out, layer.attn_out_norm)
        if self.config.parallel_blocks:  # Cohere: the MLP reads the attention's input; both join at once
            return h + attn_out + self._feed_forward(layer.mlp, attn_in)
        h = h + attn_out
        mlp_in = h if layer.post_attention_norm is None else self._norm(h, layer.post_attention_norm)
        mlp_out = self._feed_forward(layer.mlp, mlp_in)
        if layer.mlp_out_norm is not None:
            mlp_out = self._norm(mlp_out, layer.mlp_out_norm)
        return h + mlp_out

    def _layer_run(
        self,
        backend: AttentionBackend,
        plan: Any,
        cache: KVCache,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> tuple[LayerRun, StepRows] | None:
        """The layers in one C++ call where this step and this model allow (layer_run.py)."""
        if not self.fused_layers or h.dtype != torch.float32 or not h.is_cpu:
            return None
        rows = backend.row_kernel_plan(plan, h.dtype, cache, self.config.num_heads)
        if rows is None:
            return None
        if self._run is None or not self._run.serves(self.weights):
            self._run = LayerRun.of(self.config, self.weights)
            if self._run is None:
                self.fused_layers = False  # not this model's layers: never look again
                return None
        step = StepRows(cos.squeeze(1).contiguous(), sin.squeeze(1).contiguous(), plan.write_slots, rows)
        return self._run, step

    def _run_layers(
        self,
        run: tuple[LayerRun, StepRows],
        h: torch.Tensor,
        cache: KVCache,
        capture: HiddenCapture | None,
        aux: list[torch.Tensor],
    ) -> torch.Tensor:
        """Every layer in C++ calls, split where a layer's input is captured (appended to `aux` in layer
        order, as the Python loop does)."""
        layer_run, step = run
        num_layers = len(self.weights.layers)
        start = 0
        cuts = sorted({i for i in capture.aux_layers if i < num_layers}) if capture is not None else []
        for cut in cuts:
            h = layer_run.run(h, range(start, cut), step, cache, self.config)
            assert capture is not None
            aux.append(h[capture.rows])
            start = cut
        return layer_run.run(h, range(start, num_layers), step, cache, self.config)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        eps = self.config.rms_norm_eps
        if self.config.norm_centered:  # Cohere's LayerNorm without bias, in float32 as transformers'
            return centered_norm(x, weight, eps)
        if weight.dtype != x.dtype:  # a float32 norm of a lower-precision model (Gemma's 1 + w)
            return rms_norm(x.float(), weight, eps).to(x.dtype)
        return rms_norm(x, weight, eps)

    def _attention(
        self,
        w: AttentionWeights,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        layer: int,
        backend: AttentionBackend,
        plan: Any,
        cache: KVCache,
    ) -> torch.Tensor:
        c = self.config
        qkv = linear(x, w.qkv, w.qkv_bias)
        qk, v = qkv.split([c.q_size + c.kv_size, c.kv_size], dim=-1)
        if c.qk_norm_over_heads and w.q_norm is not None and w.k_norm is not None:
            q, k = qk.split([c.q_size, c.kv_size], dim=-1)
            qk = torch.cat([self._norm(q, w.q_norm), self._norm(k, w.k_norm)], dim=-1)
        qk = qk.view(-1, c.num_heads + c.num_kv_heads, c.head_dim)
        v = v.view(-1, c.num_kv_heads, c.head_dim)
        if w.q_norm is not None and w.k_norm is not None and not c.qk_norm_over_heads:
            q, k = qk.split([c.num_heads, c.num_kv_heads], dim=1)
            qk = torch.cat([self._norm(q, w.q_norm), self._norm(k, w.k_norm)], dim=1)
        # One rotation for the query and key heads together: fewer small ops per layer.
        if layer not in c.nope_layers:
            qk = self._rotate(qk, cos, sin)
        q, k = qk.split([c.num_heads, c.num_kv_heads], dim=1)
        return linear(backend.attend(plan, layer, q, k, v, cache), w.o, w.o_bias)

    def _rotate(self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """The rotary embedding over each head's leading rotated dims (all of them but for a partial
        rotary factor, whose other dims pass through)."""
        rotated = self.config.rotary_dim
        if rotated == qk.shape[-1]:
            return apply_rope(qk, cos, sin)
        return torch.cat([apply_rope(qk[..., :rotated], cos, sin), qk[..., rotated:]], dim=-1)

    def _feed_forward(self, w: MlpWeights | ExpertWeights, x: torch.Tensor) -> torch.Tensor:
        if isinstance(w, ExpertWeights):
            assert self.config.moe is not None
            return moe_forward(w, x, self.config.moe, self._mlp)
        return self._mlp(w, x)

    def _mlp(self, w: MlpWeights, x: torch.Tensor) -> torch.Tensor:
        gate_up = linear(x, w.gate_up, w.gate_up_bias)
        gated = silu_mul(gate_up) if self.config.activation == "silu" else gelu_tanh_mul(gate_up)
        return linear(gated, w.down, w.down_bias)
