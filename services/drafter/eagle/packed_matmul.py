"""How the head's matmuls run when it drafts on a CPU: weights packed once, in float32, bfloat16 or int8.

A drafting level multiplies a few rows by every weight of the head, so, like a target decode step, it
is bound by reading the weights. Weights in bfloat16 are half the bytes to read: with the shipped
SmolLM2 head on a CPU with native bfloat16 dot products (AVX512-BF16, AMX), drafting took 10.8 ms per
verify step against 13.8 ms in float32, at the same acceptance length (`treespec bench eagle --quick`,
docs/eagle.md). Only the weights are rounded to bfloat16; this moves the draft a little and never the output
(verification is exact).

The weights take the panel layout of the target's own kernel (kernels/panel_gemm.py) where it builds,
else oneDNN's: oneDNN streams the weights of a few rows several times slower on some CPUs (on a 2-core
AMD EPYC with AVX2 alone, a 576 x 1,536 product of 4 rows: 0.27 ms against 0.08 ms in panels), and
drafting there took a quarter of EAGLE3's time. In bfloat16 the panel kernel widens each weight to
float32 as it reads it (exact) and multiplies float32 rows, so it runs on any x86-64 CPU (oneDNN
multiplies bfloat16 only with AVX-512 or AMX): on that AVX2 machine the head's products of a drafting
step (a scratch script, the weights evicted by a target forward between steps) took 5.6 ms in bfloat16
panels against 7.5 ms in float32 ones. On a 2-core AMD EPYC with AVX512-BF16 (no AMX) the panels beat
oneDNN's native bfloat16 too, for the few rows of a drafting level (the head's six products, weights
evicted between steps: 0.7 against 1.2 ms for one row, 1.0 against 1.3 for four, even at eight; a
scratch script), and in the engine (the first bench prompt of each category, 128 tokens, interleaved)
drafting took 18% less time and EAGLE3 ran 3% faster at the same acceptance length; so bfloat16 weights
take the panels on every CPU.

On a CPU with AMX the panels win for a drafting level's few rows too, and oneDNN (whose bfloat16
products run on the AMX tiles there) for many, as in the catch-up over a prompt; so there a bfloat16
weight is kept in both layouts and each product takes the panels for at most `PANEL_ROWS_WITH_AMX`
rows. The head's six products on a 2-core Xeon with AMX (a scratch script, 2026-11-25; weights evicted
between calls by cycling through 32 copies): 1 row 0.84 ms in panels against 1.12 in oneDNN, 4 rows
0.84 against 1.14, 8 rows 1.01 against 1.31, 12 rows 1.24 against 1.18, 16 rows 1.71 against 1.25;
with the weights in cache, 64 rows 4.6 against 1.5 ms and 1,024 rows 86 against 23 ms. On a CPU with
AVX512-BF16 and no AMX the panels serve every row count (the many-row crossover there is not measured).
Elsewhere (a GPU, a head in another dtype) the head runs as plain torch modules.

int8 weights (a float32 scale per output column, symmetric: each column rounded to 255 levels over
its largest magnitude) are half bfloat16's bytes, and that matters beyond the bytes: a drafting step's
head passes read the same weights one after another, and the shipped SmolLM2 head's 19.6 MB in
bfloat16 did not stay in a 2-core VM's share of the cache between them (every pass took as long as
the first, 1.7-2.0 ms of products), where half as many bytes did (0.73 ms for the first pass after a
target forward, 0.43 ms for each pass after it; a scratch script, 2-core Xeon with AVX-512 and no
native bfloat16, 2026-11-27). The panel kernel widens int8 to float32 as it reads it (exact), so int8
runs wherever the panels do, and `auto` takes it there: in the engine (EAGLE3 in process, the first
bench prompt of each category, 96 tokens, bfloat16 and int8 interleaved) drafting took 9.57 against
11.64 ms per verify step, EAGLE3 ran at 26.98 against 25.56 tokens/s, acceptance length 1.783
against 1.775, every output the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

import torch

from treespec.kernels import cpu_features, panel_gemm
from treespec.kernels.panel_gemm import PanelWeight
from treespec.shared.model.linear import linear, pack_weight, packing_supported

log = logging.getLogger(__name__)


class MatmulDtype(StrEnum):
    """`--speculative-eagle-matmul-dtype`."""

    AUTO = "auto"  # int8 where the panel kernel builds, else bfloat16 where oneDNN multiplies it natively
    # (else float32)
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"  # int8 panels with a scale per column (the panel kernel only)


PANEL_ROWS_WITH_AMX = 12  # on a CPU with AMX: panels up to this many rows, oneDNN above (docstring)


@dataclass(frozen=True)
class PackedMatmul:
    """x [T, in] -> x @ weight + bias, with the weight packed in `dtype`; x and the result in x's dtype."""

    weight: torch.Tensor | PanelWeight  # [in, out] in oneDNN's packed layout or in panels
    bias: torch.Tensor | None  # [out], in `dtype`
    dtype: torch.dtype
    many_rows: torch.Tensor | None = None  # oneDNN's layout for more than PANEL_ROWS_WITH_AMX rows

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> PackedMatmul:
        """weight [out, in] and bias [out] as nn.Linear holds them."""
        if dtype == torch.int8:
            return cls._int8(weight, bias)
        dense = weight.detach().t().to(dtype).contiguous()
        packed_bias = None if bias is None else bias.detach().to(dtype).contiguous()
        gemm = _panels(dense.device)
        if gemm is None:
            return cls(pack_weight(dense), packed_bias, dtype)
        many_rows = pack_weight(dense) if dense.dtype == torch.bfloat16 and cpu_features.amx() else None
        return cls(gemm.pack(dense), packed_bias, dtype, many_rows)

    @classmethod
    def _int8(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> PackedMatmul:
        """int8 panels (packed_dtype checked that the kernel builds); the bias stays float32."""
        gemm = _panels(weight.device)
        if gemm is None:
            raise ValueError("int8 head matmuls need the panel kernel")
        packed_bias = None if bias is None else bias.detach().float().contiguous()
        return cls(gemm.pack_int8(weight.detach().t()), packed_bias, torch.int8)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if self.many_rows is not None and x.shape[0] > PANEL_ROWS_WITH_AMX:
            weight = self.many_rows
        if x.dtype == self.dtype or isinstance(weight, PanelWeight):  # panels take float32 rows
            return linear(x, weight, self.bias)
        return linear(x.to(self.dtype), weight, self.bias).to(x.dtype)


def _panels(device: torch.device) -> panel_gemm.PanelGemm | None:
    """The panel kernel, where it builds: it takes float32 rows and float32 or bfloat16 weights (widening
    each to float32 as it reads it, so bfloat16 ones need no native support)."""
    return panel_gemm.panel_gemm() if panel_gemm.applies(device, torch.float32) else None


def packed_dtype(choice: MatmulDtype, device: torch.device, dtype: torch.dtype) -> torch.dtype | None:
    """The dtype the head's packed weights take for a head in `dtype` on `device`; None: not packed.
    Packing applies where it does for the target (CPU, float32, oneDNN present)."""
    if not packing_supported(device, dtype):
        if choice is MatmulDtype.BFLOAT16:
            raise ValueError("bfloat16 head matmuls need a CPU target in float32 with oneDNN")
        return None
    if choice is MatmulDtype.FLOAT32:
        return torch.float32
    panels = _panels(device) is not None
    if choice is MatmulDtype.INT8 or (choice is MatmulDtype.AUTO and panels):
        if not panels:
            raise ValueError(
                "int8 head matmuls need the panel kernel (an x86-64 CPU and a C++ compiler): "
                "use --speculative-eagle-matmul-dtype auto, bfloat16 or float32"
            )
        return torch.int8
    fast = cpu_features.native_bf16() or panels
    if choice is MatmulDtype.AUTO and not fast:
        return torch.float32
    if not _bf16_packing_works():
        if choice is MatmulDtype.BFLOAT16:
            raise ValueError(
                "this CPU and torch build cannot multiply bfloat16 weights (oneDNN needs AVX-512 or AMX, "
                "the panel kernel did not build); use --speculative-eagle-matmul-dtype float32 or auto"
            )
        return torch.float32
    if not fast:
        log.warning("this CPU has no native bfloat16 dot products: bfloat16 head matmuls may be slow")
    return torch.bfloat16


def _bf16_packing_works() -> bool:
    """A small packed bfloat16 product against float32 torch.mm, within bfloat16's precision."""
    try:
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(48, 64, generator=generator)
        product = PackedMatmul.of(weight, None, torch.bfloat16)
        for rows in (3, PANEL_ROWS_WITH_AMX + 1):  # both layouts where a weight keeps two
            x = torch.randn(rows, 64, generator=generator)
            if not torch.allclose(product(x), x @ weight.t(), rtol=0.05, atol=0.1):
                return False
        return True
    except (RuntimeError, AttributeError) as exc:  # a torch build without bfloat16 oneDNN ops
        log.info("bfloat16 packing unavailable: %r", exc)
        return False
