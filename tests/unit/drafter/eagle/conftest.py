from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.drafter.eagle.smol_tiny import make_smol_tiny


@pytest.fixture(scope="module")
def smol_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with SmolLM2's vocabulary, tokenizer and chat template."""
    return make_smol_tiny(tmp_path_factory.mktemp("tiny-smol"))
