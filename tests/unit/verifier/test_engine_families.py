"""Speculation stays lossless over each family's own maths (experts, sliding and global layers,
layers without rotary embeddings, folded multipliers): random trees, several requests batched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.model.test_forward_vs_hf import make_checkpoint
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

VOCAB = 97


@pytest.mark.parametrize(
    "family",
    [
        "qwen3-moe",
        "qwen2-moe",
        "mixtral",
        "gemma3",
        "smollm3",
        "granite",
        "phi3-partial-rotary",
        "olmo2",
        "olmo3",
        "glm4",
        "cohere-qk-norm",
        "gemma2",
    ],
)
def test_speculation_is_lossless(tmp_path: Path, family: str) -> None:
    """Random trees, several requests batched: greedy outputs as plain decoding's."""
    make_checkpoint(tmp_path, family)
    model = load_model(tmp_path)
    prompts = [[(5 * i + 3 * j) % VOCAB for j in range(4 + 5 * i)] for i in range(4)]

    def run(spec: bool) -> dict[str, list[int]]:
        drafter = RandomTreeDrafter(VOCAB, seed=2) if spec else None
        engine = Engine(EngineConfig(model_path=tmp_path, page_size=4, max_total_tokens=1024), drafter, model)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=20, ignore_eos=True)
        requests = (
            GenerationRequest(f"r{i}", p, sampling, SpeculationParams(enabled=spec))
            for i, p in enumerate(prompts)
        )
        results = engine.generate(requests)
        if spec:
            assert engine.stats.drafted_tokens > 0
        return {k: v.token_ids for k, v in results.items()}

    assert run(spec=True) == run(spec=False)
