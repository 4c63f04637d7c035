from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = tmp_path_factory.mktemp("tiny-llama")
    make_checkpoint(path, "llama")
    return path


@pytest.fixture(scope="session")
def tiny_model(tiny_path: Path) -> CausalLM:
    return load_model(tiny_path)
