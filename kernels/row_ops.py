"""The forward's per-row steps between its matmuls, fused on a CPU (cpu/row_ops.cpp): RMSNorm, the
rotary embedding and the MLP's silu(gate) * up; and a drafting level's top-k log-probabilities.

A decode or verify step normalises, rotates and gates a few rows of a few hundred floats, where every
torch op costs microseconds of dispatch: a norm as torch ops is six of them (about 30 us for one row
of 576 on a 2-core Xeon), a rotation another six, the gate three, and a forward of SmolLM2-135M takes
61 norms, 30 rotations and 30 gates. The kernels do each in one call. Where they cannot be built
(another architecture, no compiler), for other dtypes or devices, and for training (the kernels have
no backward), the torch references below serve; the results agree to float32 rounding (a sum's order
differs, and the gate's exp is the kernels' own polynomial).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from treespec.kernels.cpu_extension import load_cpu_kernels
from treespec.kernels.speed_check import fast_enough


@dataclass(frozen=True)
class RowOps:
    """The built kernels."""

    module: Any

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x [..., H] -> the same shape. (A forward's rows come contiguous and 2-D: no reshaping, which
        would cost as much again as the kernel's call for one row.)"""
        if x.dim() == 2 and x.is_contiguous():
            return self.module.rms_norm(x, weight.contiguous(), eps)
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        return self.module.rms_norm(rows, weight.contiguous(), eps).view(x.shape)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, heads, D], cos and sin [T, 1, D] (as RopeTables.lookup gives them)."""
        return self.module.rope(x.contiguous(), cos.squeeze(1).contiguous(), sin.squeeze(1).contiguous())

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [T, 2I] -> [T, I]."""
        return self.module.silu_mul(gate_up.contiguous())

    def top_logprobs(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [T, V] -> (log-probabilities [T, k] best first, indices [T, k])."""
        values, indices = self.module.top_logprobs(logits.contiguous(), k)
        return values, indices


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Spelled out: on CPU, F.rms_norm decomposes into more small ops than this (same result).
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps)) * weight


def reference_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim] rotated by the half-split convention of HF Llama."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def reference_silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def reference_top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = logits.topk(k, dim=-1)
    return values - logits.logsumexp(dim=-1, keepdim=True), indices


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] * rsqrt(mean(x^2, -1) + eps) * weight [H]."""
    ops = _kernels_for(x, weight)
    return ops.rms_norm(x, weight, eps) if ops is not None else reference_rms_norm(x, weight, eps)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim], cos and sin [T, 1, head_dim]: x * cos + rotate_half(x) * sin."""
    ops = _kernels_for(x, cos, sin)
    return ops.rope(x, cos, sin) if ops is not None else reference_rope(x, cos, sin)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] (gate then up) -> silu(gate) * up [T, I]."""
    ops = _kernels_for(gate_up)
    return ops.silu_mul(gate_up) if ops is not None else reference_silu_mul(gate_up)


def centered_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm without bias (Cohere's), over the last dim in float32: (x - mean) * rsqrt(var + eps) *
    weight, `weight` broadcasting over the leading dims (per-head norms: [heads, head_dim])."""
    x32 = x.float()
    centered = x32 - x32.mean(-1, keepdim=True)
    normed = centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * weight.float()).to(x.dtype)


def gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [T, 2I] (gate then up) -> gelu(gate, tanh approximation) * up [T, I]: GeGLU (Gemma), in
    torch on every device."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, V] -> each row's k largest log-probabilities (logit - logsumexp), best first, and
    their indices: one pass over each row where the kernels run (two torch ops otherwise, each about
    0.1 ms for a few rows of an 8,192-token draft vocabulary on a 2-core Xeon)."""
    ops = top_logprobs_ops() if _eligible(logits) else None
    return ops.top_logprobs(logits, k) if ops is not None else reference_top_logprobs(logits, k)


def _kernels_for(*tensors: torch.Tensor) -> RowOps | None:
    """The kernels, for float32 CPU tensors outside autograd; else None (the references)."""
    return row_ops() if _eligible(*tensors) else None


def _eligible(*tensors: torch.Tensor) -> bool:
    """float32 CPU tensors outside autograd (this runs 91 times a forward: no more than it needs)."""
    grad = torch.is_grad_enabled()
    return all(t.is_cpu and t.dtype == torch.float32 and not (grad and t.requires_grad) for t in tensors)


@functools.lru_cache(maxsize=1)
def row_ops() -> RowOps | None:
    """The kernels, built on first use, or None where they cannot be built or run slower than torch's ops
    on a decode step's rows (speed_check.py)."""
    ops = build_row_ops()
    return ops if ops is not None and _fast_enough(ops) else None


def build_row_ops() -> RowOps | None:
    """The kernels however fast they run (their tests), or None where they cannot be built."""
    module = load_cpu_kernels()
    return None if module is None else RowOps(module)


def _fast_enough(ops: RowOps) -> bool:
    """A decode step's norm, rotation and gate (one row of SmolLM2-135M: 576 wide; 12 heads of 64; 1,536
    gates), against the references."""
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(1, 576, generator=generator), torch.randn(576, generator=generator)
    q = torch.randn(1, 12, 64, generator=generator)
    cos, sin = torch.randn(1, 1, 64, generator=generator), torch.randn(1, 1, 64, generator=generator)
    gate_up = torch.randn(1, 2 * 1536, generator=generator)
    return (
        fast_enough(
            "rms_norm", lambda: ops.rms_norm(x, weight, 1e-5), lambda: reference_rms_norm(x, weight, 1e-5)
        )
        and fast_enough("rope", lambda: ops.rope(q, cos, sin), lambda: reference_rope(q, cos, sin))
        and fast_enough("silu_mul", lambda: ops.silu_mul(gate_up), lambda: reference_silu_mul(gate_up))
    )


@functools.lru_cache(maxsize=1)
def top_logprobs_ops() -> RowOps | None:
    """The kernels for `top_logprobs`, checked on their own (a drafting level's rows, not a forward's:
    a slow top-k here must not take the forward's row kernels away, nor the other way round)."""
    ops = build_row_ops()
    if ops is None:
        return None
    logits = torch.randn(4, 8192, generator=torch.Generator().manual_seed(0))  # 4 rows, a draft vocabulary
    fast = fast_enough(
        "top_logprobs", lambda: ops.top_logprobs(logits, 4), lambda: reference_top_logprobs(logits, 4)
    )
    return ops if fast else None
