"""Draft models for the tests: the target with noisy weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def perturbed_copy(source: Path, dest: Path, scale: float, seed: int = 7) -> Path:
    """A draft model that agrees with `source` often but not always: its weights plus Gaussian noise
    of `scale` times each tensor's spread."""
    shutil.copytree(source, dest)
    generator = torch.Generator().manual_seed(seed)
    tensors = load_file(str(source / "model.safetensors"))
    noisy = {
        name: t + scale * t.std() * torch.randn(t.shape, generator=generator) if t.numel() > 1 else t
        for name, t in tensors.items()
    }
    save_file(noisy, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest
