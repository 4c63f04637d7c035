"""An EAGLE head's pass over a drafting level's rows in one call to the own kernels (cpu/eagle_pass.cpp).

A drafting step runs the head's one layer two to six times (the catch-up, then a pass per tree level)
over a handful of rows, and as torch modules each pass is some forty small operations (norms, the
concatenation, the products, the rotation, the cache write, the masked attention, residuals), each
through Python and torch's dispatch: in a profile of EAGLE3 over the first bench prompt of each
category (128 tokens, the shipped head, a 2-core Xeon with AMX) a drafting step took 4.3 ms, of which
the head's products 1.2 ms. Where the head was packed into the panel layout (packed_matmul.py) and the
row kernels build here, the pass runs in C++ instead: the same products and row kernels, and the row
attention kernel (tree_attention.cpp) over the request's draft cache in place of `attend_rows`, so a
node's output agrees with the torch modules' to float32 rounding (the attention sums in another
order; tested), and the draft, never the output, may differ in a near tie. Rows past the row kernel's
reach (a catch-up over a whole prompt) keep the torch modules. The same prompts through two engines
in one process, one drafter each way, in turns, twice over (a scratch script): drafting 5.45 -> 4.22
and 5.09 -> 3.98 ms a step, EAGLE3 68.9 -> 74.4 and 64.4 -> 67.5 tokens/s, the same acceptance
lengths and outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from treespec.drafter.eagle.head import EagleHead, HeadOutput
from treespec.drafter.eagle.packed_matmul import PackedMatmul
from treespec.kernels.panel_gemm import PANEL, PanelWeight
from treespec.kernels.row_ops import row_ops
from treespec.kernels.tree_attention import HEAD_DIMS, MAX_QUERIES, MAX_ROWS, tree_attention

NONE = torch.empty(0)


@dataclass(frozen=True)
class PassRows:
    """One request's rows in a pass: its draft cache (capacity for them already made), the keys cached
    before the step, the step's earlier rows (scratch) and which of those each row sees."""

    k_cache: torch.Tensor  # [capacity, kv_heads, head_dim]
    v_cache: torch.Tensor
    count: int
    cached: int
    scratch: int
    mask: torch.Tensor  # [count, scratch + count] bool: earlier rows, then the rows themselves


@dataclass(frozen=True)
class NativePass:
    """A packed head's tensors as eagle_pass takes them."""

    module: Any  # the CPU kernels' module
    tensors: list[torch.Tensor]  # 16 (eagle_pass.cpp)
    heads: int
    kv_heads: int
    head_dim: int
    eps: float

    @classmethod
    def of(cls, head: EagleHead) -> NativePass | None:
        """The head's pass, or None where it is not packed into panels or the kernels do not serve it."""
        c, layer = head.config, head.layer
        attn, mlp = layer.self_attn, layer.mlp
        products = [
            head.fc.packed,
            attn.packed_qkv,
            attn.o_proj.packed,
            mlp.packed_gate_up,
            mlp.down_proj.packed,
        ]
        if not all(_fits(p) for p in products) or c.head_dim not in HEAD_DIMS or c.num_heads % c.num_kv_heads:
            return None  # (a head on a GPU is never packed, and no CPU kernel is built for it)
        ops, attention = row_ops(), tree_attention()
        if ops is None or attention is None:
            return None
        fc, qkv, o, gate_up, down = (p for p in products if p is not None)
        norms = [layer.input_layernorm, layer.hidden_norm] if c.is_eagle3 else []
        if any(n.weight.dtype != torch.float32 for n in [*norms, layer.post_attention_layernorm]):
            return None
        tensors = [
            *_product(fc, with_bias=True),
            *(n.weight.detach().contiguous() for n in norms),
            *([] if c.is_eagle3 else [NONE, NONE]),
            *_product(qkv, with_bias=True),
            *_product(o),
            layer.post_attention_layernorm.weight.detach().contiguous(),
            *_product(gate_up),
            *_product(down),
            head.norm.weight.detach().contiguous() if c.is_eagle3 else NONE,
        ]
        return cls(ops.module, tensors, c.num_heads, c.num_kv_heads, c.head_dim, c.rms_norm_eps)

    def serves(self, counts: Sequence[int]) -> bool:
        """Whether every request's rows (`counts`) are within the row attention kernel's reach."""
        group = self.heads // self.kv_heads
        return all(count <= MAX_ROWS and count * group <= MAX_QUERIES for count in counts)

    def run(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        groups: Sequence[PassRows],
    ) -> HeadOutput:
        """embeds [T, H], hidden [T, W] (as EagleHead.layer_input takes them), cos and sin [T, head_dim]."""
        table = torch.tensor([[g.count, g.cached, g.scratch] for g in groups], dtype=torch.long)
        masks = torch.cat([g.mask.reshape(-1) for g in groups])
        out, for_logits = self.module.eagle_pass(
            embeds.contiguous(),
            hidden.contiguous(),
            self.tensors,
            cos,
            sin,
            [g.k_cache for g in groups],
            [g.v_cache for g in groups],
            table,
            masks,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.eps,
        )
        return HeadOutput(out, for_logits)


def _fits(product: PackedMatmul | None) -> bool:
    """Panels whose products come out at the layer's width, no second layout for many rows."""
    if product is None or product.many_rows is not None or not isinstance(product.weight, PanelWeight):
        return False
    weight = product.weight
    return weight.block_scales is None and weight.panels.shape[0] * PANEL == weight.out_features


def _product(product: PackedMatmul, with_bias: bool = False) -> list[torch.Tensor]:
    """Panels and scales (and the bias, in float32: the torch path adds it to float32 rows exactly)."""
    weight = product.weight
    assert isinstance(weight, PanelWeight)
    parts = [weight.panels, NONE if weight.scales is None else weight.scales]
    if with_bias:
        parts.append(NONE if product.bias is None else product.bias.float().contiguous())
    return parts
