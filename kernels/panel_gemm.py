"""CPU float32 matmuls over weights packed into column panels (cpu/panel_gemm.cpp), for the few rows
of decode and verify steps. Weights lie in float32, bfloat16 or int8 with a scale per column
(`pack_int8`, for a draft head: a quarter of float32's bytes).

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

    def matmul(self, x: torch.Tensor, weight: PanelWeight) -> torch.Tensor:
        y = self.module.matmul(x, weight.panels, weight.scales)
        if y.shape[1] != weight.out_features:
            y = y[:, : weight.out_features].contiguous()
        return y


@dataclass(frozen=True)
class PanelWeight:
    """A matmul weight [in, out] in the panel layout, with the kernel that reads it."""

    panels: torch.Tensor  # [ceil(out / PANEL), in, PANEL]: float32, bfloat16 or int8
    out_features: int
    gemm: PanelGemm
    scales: torch.Tensor | None = None  # [ceil(out / PANEL) * PANEL] float32: int8 panels' column scales

    @property
    def shape(self) -> tuple[int, int]:
        return (self.panels.shape[1], self.out_features)

    def to_dense(self) -> torch.Tensor:
        """[in, out], exactly the packed values (int8 ones times their scales, in float32)."""
        width = self.panels.shape[0] * PANEL
        dense = self.panels.permute(1, 0, 2).reshape(self.panels.shape[1], width)
        if self.scales is not None:
            dense = dense.float() * self.scales
        return dense[:, : self.out_features].contiguous()


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
