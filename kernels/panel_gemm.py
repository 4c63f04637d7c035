"""CPU float32 matmuls over weights packed into column panels (cpu/panel_gemm.cpp), for the few rows
of decode and verify steps. Weights lie in float32, bfloat16 or int8 with a scale per column
(`pack_int8`, for a draft head: a quarter of float32's bytes), or in an exact block form (`pack_exact`:
4-bit or int8 values with a scale and offset per block of 32 inputs, where a weight is exactly that, as
a model imported from GGUF's Q4_1 or Q8_0 is; kernels/exact_blocks.py), widened to float32 as they are
read.

A decode step multiplies 1 row by every weight, a verify step 2-16 rows (tree nodes), and both are
bound by streaming the weights from memory once. Library GEMMs do not reach that bound at these sizes
(on a 2-core Xeon with AMX, the layer products of SmolLM2-135M, timed alone with a scratch script: 14.8
ms for 1 row with torch.mm, 22-25 ms for 4 rows and 26-30 ms for 8 with MKL or oneDNN, in any of their
layouts), so every tree node cost several percent of a step. The panel kernel streams each 32-column
panel once, prefetched into L2 ahead of use, and multiplies every row by it while it is in cache: 14.6
ms for 1 row, 14.1 for 4 and 16.5 for 8 the same way. `treespec bench layout` times whole forwards in
each layout. Larger forwards (prefill) run through the same loop, about 10% slower than MKL's sgemm.

Each output element is one FMA chain over the input in order, whatever the row count, so a row's
result does not depend on the rows beside it: a verify step's logits for a token equal a decode
step's bit for bit.

The kernel is built once per machine (kernels/cpu_extension.py). Where it cannot be built,
`panel_gemm()` returns None and the loader keeps its other layouts. The reference is `x @ dense`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from treespec.kernels.cpu_extension import load_cpu_kernels, on_x86
from treespec.kernels.exact_blocks import Blocks, find_blocks, same_bits
from treespec.kernels.speed_check import fast_enough

PANEL = 32  # columns per panel (kPanel in the source)
INT8_MAX = 127  # int8 panels hold -127..127 (symmetric: -128 is never used)


@dataclass(frozen=True)
class PanelGemm:
    """The built kernel."""

    module: Any

    def pack(self, dense: torch.Tensor) -> PanelWeight:
        """[in, out] float32 or bfloat16 -> panels in that dtype (columns padded with zeros to a multiple of
        PANEL). Products read bfloat16 panels widened to float32 (exactly) and take float32 rows."""
        out = dense.shape[1]
        return PanelWeight(self.module.pack(_padded(dense).contiguous()), out, self)

    def pack_int8(self, dense: torch.Tensor) -> PanelWeight:
        """[in, out] float -> int8 panels and a float32 scale per column: each column rounded to the
        nearest of 255 evenly spaced values over [-max |w|, max |w|] (symmetric, per output channel).
        Products widen the int8 values to float32 (exactly) and scale the sums."""
        out = dense.shape[1]
        columns = _padded(dense.float())
        scales = columns.abs().amax(dim=0) / INT8_MAX
        scales = torch.where(scales > 0, scales, torch.ones_like(scales))  # a zero column stays zero
        quantized = torch.round(columns / scales).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
        return PanelWeight(self.module.pack(quantized.contiguous()), out, self, scales.contiguous())

    def pack_exact(self, dense: torch.Tensor) -> PanelWeight:
        """[in, out] float32 -> panels in the narrowest form that holds every weight exactly: block
        values (4-bit, then int8) where the weight is of that form, else bfloat16 where every weight is
        a bfloat16 value, else float32. Products give the float32 weight's results bit for bit."""
        blocks = find_blocks(dense)
        if blocks is not None:
            return self.pack_blocks(blocks, dense.shape[1])
        as_bf16 = dense.to(torch.bfloat16)
        if same_bits(as_bf16.float(), dense):
            return self.pack(as_bf16)
        return self.pack(dense)

    def pack_blocks(self, blocks: Blocks, out: int) -> PanelWeight:
        """Block values [in, out] -> panels [P, in, 16] uint8 (4-bit values: column c of a panel row in
        byte c % 16, its low nibble below 16, its high one above) or [P, in, 32] int8, with their
        scales [P, in / BLOCK, 2, PANEL] (each block's d, then m); padding columns are zeros."""
        q = _padded(blocks.q)
        values = q.view(q.shape[0], -1, PANEL).permute(1, 0, 2)  # [P, in, PANEL]
        if blocks.bits == 4:
            values = values[..., : PANEL // 2] | (values[..., PANEL // 2 :] << 4)
        d, m = _padded(blocks.d), _padded(blocks.m)  # [in / BLOCK, P * PANEL]
        panels = d.shape[1] // PANEL
        scales = torch.stack([d, m], dim=1).view(d.shape[0], 2, panels, PANEL).permute(2, 0, 1, 3)
        return PanelWeight(values.contiguous(), out, self, block_scales=scales.contiguous())

    def matmul(self, x: torch.Tensor, weight: PanelWeight) -> torch.Tensor:
        if weight.block_scales is not None:
            y = self.module.matmul_blocks(x, weight.panels, weight.block_scales)
        else:
            y = self.module.matmul(x, weight.panels, weight.scales)
        if y.shape[1] != weight.out_features:
            y = y[:, : weight.out_features].contiguous()
        return y


@dataclass(frozen=True)
class PanelWeight:
    """A matmul weight [in, out] in the panel layout, with the kernel that reads it."""

    panels: torch.Tensor  # [ceil(out / PANEL), in, PANEL]: float32, bfloat16 or int8; block values below
    out_features: int
    gemm: PanelGemm
    scales: torch.Tensor | None = None  # [ceil(out / PANEL) * PANEL] float32: int8 panels' column scales
    # Block values (`pack_blocks`; panels [P, in, PANEL / 2] uint8 or [P, in, PANEL] int8): each block's
    # d and m, [P, in / BLOCK, 2, PANEL] float32.
    block_scales: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.panels.shape[1], self.out_features)

    def to_dense(self) -> torch.Tensor:
        """[in, out], exactly the packed values (int8 ones times their scales, block values widened, in
        float32)."""
        if self.block_scales is not None:
            return self._blocks().to_dense()[:, : self.out_features].contiguous()
        width = self.panels.shape[0] * PANEL
        dense = self.panels.permute(1, 0, 2).reshape(self.panels.shape[1], width)
        if self.scales is not None:
            dense = dense.float() * self.scales
        return dense[:, : self.out_features].contiguous()

    def _blocks(self) -> Blocks:
        """The block values as [in, P * PANEL] with their d and m."""
        assert self.block_scales is not None
        values = self.panels
        if values.dtype == torch.uint8:
            values = torch.cat([values & 15, values >> 4], dim=-1)
        width = values.shape[0] * PANEL
        q = values.permute(1, 0, 2).reshape(values.shape[1], width)
        d, m = self.block_scales.permute(1, 2, 0, 3).reshape(-1, 2, width).unbind(dim=1)
        return Blocks(q, d, m)


def _padded(dense: torch.Tensor) -> torch.Tensor:
    """Zero columns added up to a multiple of PANEL."""
    pad = -dense.shape[1] % PANEL
    return torch.nn.functional.pad(dense, (0, pad)) if pad else dense


def panel_linear(x: torch.Tensor, weight: PanelWeight) -> torch.Tensor:
    """x [T, in] @ weight -> [T, out]."""
    return weight.gemm.matmul(x, weight)


def reference_linear(x: torch.Tensor, weight: PanelWeight) -> torch.Tensor:
    return x @ weight.to_dense().to(x.dtype)


def applies(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32 and on_x86()


@functools.lru_cache(maxsize=1)
def panel_gemm() -> PanelGemm | None:
    """The kernel, built on first use (seconds; then loaded from torch's extension cache), or None
    where it cannot be built (no compiler or ninja, another architecture) or takes more than twice
    torch.mm's time on this CPU (speed_check.py)."""
    gemm = build_panel_gemm()
    return gemm if gemm is not None and _fast_enough(gemm) else None


def build_panel_gemm() -> PanelGemm | None:
    """The kernel however fast it runs (its tests), or None where it cannot be built."""
    module = load_cpu_kernels()
    return None if module is None else PanelGemm(module)


def _fast_enough(gemm: PanelGemm) -> bool:
    """A verify step's product: 4 rows by a 576 x 1,536 weight (SmolLM2's MLP), against torch.mm. The
    weight stays in cache here, where torch.mm does better than on weights streamed from memory as in
    use (the panels took 0.25x its time with 2 threads, 0.45x with 1, on a 2-core AMD EPYC with
    AVX-512), so the bound is 2x: a fault in the vector code costs several times."""
    generator = torch.Generator().manual_seed(0)
    dense = torch.randn(576, 1536, generator=generator)
    x = torch.randn(4, 576, generator=generator)
    panels = gemm.pack(dense)
    return fast_enough(
        "panel_gemm", lambda: gemm.matmul(x, panels), lambda: torch.mm(x, dense), max_slowdown=2.0
    )
