"""Fixtures over the bundled SmolLM2-135M-Instruct (imported by `make test` before pytest runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from treespec.bench.prompts import chat_prompt_ids, default_prompts_path, load_prompts
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.shared.model.store import models_dir, resolve_model_path


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return resolve_model_path(None, models_dir())


@pytest.fixture(scope="session")
def smollm(smollm_path: Path) -> CausalLM:
    return load_model(smollm_path)


@pytest.fixture(scope="session")
def smollm_hf(smollm_path: Path) -> transformers.PreTrainedModel:
    return transformers.AutoModelForCausalLM.from_pretrained(smollm_path, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tokenizer(smollm_path: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(smollm_path)


@pytest.fixture(scope="session")
def bench_prompt_ids(tokenizer: transformers.PreTrainedTokenizerBase) -> list[list[int]]:
    """Ten Spec-Bench prompts: the first of each category, the ten shortest of those."""
    firsts = load_prompts(default_prompts_path(), per_category=1)
    ids = [chat_prompt_ids(tokenizer, p.text) for p in firsts]
    return sorted(ids, key=len)[:10]
