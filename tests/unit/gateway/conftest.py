"""The bundled SmolLM2 tokenizer (only the tokenizer: no model weights are loaded)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.model.store import models_dir, resolve_model_path


@pytest.fixture(scope="session")
def prompt_tokenizer() -> PromptTokenizer:
    return PromptTokenizer(resolve_model_path(None, models_dir()))


@pytest.fixture(scope="session")
def tokenizer(prompt_tokenizer: PromptTokenizer) -> Tokenizer:
    return prompt_tokenizer.backend
