"""The GPU tests' fixtures: a CUDA device (a failure, never a skip, where there is none) and the tiny
models of the CPU tests loaded onto it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.smol_tiny import make_smol_tiny
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import LoadOptions, load_model


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.fail(f"the gpu tests need a CUDA device; torch {torch.__version__} sees none")
    return torch.device("cuda", 0)


@pytest.fixture(scope="session")
def tiny_cuda_model(tiny_path: Path, cuda: torch.device) -> CausalLM:
    """tests/conftest.py's tiny Llama on the GPU, in float32 (the CPU tests' dtype)."""
    return load_model(tiny_path, LoadOptions(device=str(cuda), dtype="float32"))


@pytest.fixture(scope="module")
def smol_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with SmolLM2's vocabulary, tokenizer and chat template."""
    return make_smol_tiny(tmp_path_factory.mktemp("tiny-smol"))
