"""What the CPU offers for bfloat16, as torch reads it: where a choice of dtype or kernel depends on it."""

from __future__ import annotations

import torch


def native_bf16() -> bool:
    """AVX512-BF16 or AMX (False on a torch build that cannot tell)."""
    return cpu_has("_is_avx512_bf16_supported") or amx()


def amx() -> bool:
    """AMX tiles: bfloat16 products of many rows run several times faster than float32 on them."""
    return cpu_has("_is_amx_tile_supported")


def cpu_has(check: str) -> bool:
    """torch.cpu's `check` (False on a torch build without it)."""
    return bool(getattr(torch.cpu, check, lambda: False)())
