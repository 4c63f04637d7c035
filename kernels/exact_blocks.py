"""Finding a float32 weight's exact block form: W = q * d + m, blocks of 32 along its input dimension.

A model imported from a block-quantized checkpoint (GGUF's Q4_1 and Q8_0: the bundled SmolLM2 is Q4_1
in its layers and Q8_0 in its embedding) holds float32 weights that are exactly q * d + m for each
block of 32 inputs of an output: q a 4-bit integer (0-15) with d and m per block, or an int8 (-127 to
127) with d and m = 0, d a float16. Kept in that form, a weight streams in 0.75 or 1.25 bytes instead
of 4, and the panel kernel widens it back to the very same float32 as it reads it (q * d is exact, as
d has float16's 11 significant bits at most and q 8 bits, so q * d + m rounds once, whether fused or
not), so the forward's results stay bit for bit those of the float32 weights.

`find_blocks` recovers q, d and m (Q4_1: m is each block's smallest value, where q is 0, and d its
span over 15; Q8_0: d is its largest magnitude over 127; each d rounded to float16) and accepts them
only if q * d + m gives back every weight bit for bit. Other quantizations are not recognised: GGUF's
Q4_0 gives -0.0 for a zero in a block of negative d, which q * d + m cannot, and K-quants' and 5-bit
blocks take other forms; any other weight, such as one trained or stored in float32 or bfloat16,
returns None and keeps its own form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32  # inputs per block (kBlock in cpu/panel_gemm.cpp)


@dataclass(frozen=True)
class Blocks:
    """W [K, N] = q * d + m, d and m repeated over each block of BLOCK rows of q."""

    q: torch.Tensor  # [K, N] uint8 (4-bit values) or int8
    d: torch.Tensor  # [K / BLOCK, N] float32
    m: torch.Tensor  # [K / BLOCK, N] float32 (zeros for int8 values)

    @property
    def bits(self) -> int:
        return 4 if self.q.dtype == torch.uint8 else 8

    def to_dense(self) -> torch.Tensor:
        """The float32 weight, q * d + m computed as the kernel widens it."""
        d = self.d.repeat_interleave(BLOCK, dim=0)
        m = self.m.repeat_interleave(BLOCK, dim=0)
        return self.q.float() * d + m


def find_blocks(dense: torch.Tensor) -> Blocks | None:
    """The 4-bit form of a float32 weight [K, N] if it has one, else its int8 form, else None."""
    if dense.dtype != torch.float32 or dense.dim() != 2 or dense.shape[0] % BLOCK or dense.numel() == 0:
        return None
    blocks = dense.reshape(dense.shape[0] // BLOCK, BLOCK, dense.shape[1])
    return _four_bit(dense, blocks) or _eight_bit(dense, blocks)


def _four_bit(dense: torch.Tensor, blocks: torch.Tensor) -> Blocks | None:
    low = blocks.amin(dim=1)
    d = _as_float16((blocks.amax(dim=1) - low) / 15)
    q = ((blocks - low[:, None]) / _nonzero(d)[:, None]).round_().clamp_(0, 15)
    return _exact(dense, Blocks(q.reshape(dense.shape).to(torch.uint8), d, low))


def _eight_bit(dense: torch.Tensor, blocks: torch.Tensor) -> Blocks | None:
    d = _as_float16(blocks.abs().amax(dim=1) / 127)
    q = (blocks / _nonzero(d)[:, None]).round_().clamp_(-127, 127)
    return _exact(dense, Blocks(q.reshape(dense.shape).to(torch.int8), d, torch.zeros_like(d)))


def _as_float16(d: torch.Tensor) -> torch.Tensor:
    """d rounded to float16's precision (inf where it overflows: the check then fails)."""
    return d.to(torch.float16).float()


def _nonzero(d: torch.Tensor) -> torch.Tensor:
    """d with 1 where it is 0 (a block of one value: every q is 0, m or 0 gives it back)."""
    return torch.where(d == 0, torch.ones_like(d), d)


def _exact(dense: torch.Tensor, blocks: Blocks) -> Blocks | None:
    """`blocks` if they give back every weight bit for bit (-0.0 and NaN included), else None."""
    if not bool(torch.isfinite(blocks.d).all()):
        return None
    return blocks if same_bits(blocks.to_dense(), dense) else None


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Float32 tensors equal bit for bit (-0.0 is not 0.0; a NaN equals the same NaN)."""
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))
