"""Checking a `--device` flag before anything is loaded onto it."""

from __future__ import annotations

import torch


def device_problem(name: str) -> str | None:
    """Why `name` cannot be used as the torch device, if it cannot: not a device name, a kind other
    than cpu and cuda, or a CUDA device this machine does not have."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        return f"--device {name!r} is not a torch device ({exc})"
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return f"--device {name!r}: only cpu and cuda devices are supported"
    if not torch.cuda.is_available():
        return f"--device {name!r}: CUDA is not available here (torch {torch.__version__})"
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        return f"--device {name!r}: this machine has {count} CUDA device(s)"
    return None
