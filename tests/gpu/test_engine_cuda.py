"""The verifier engine on a CUDA device: plain decoding agrees with the CPU engine, and every drafter
kind (in process) stays lossless there; bfloat16 (the GPU default) and sampling run.

Run on a GPU machine: `make test-gpu` (or `pytest --run-gpu tests/gpu`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import LoadOptions, load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.gpu

VOCAB, HIDDEN, LAYERS = 97, 64, 3  # tests/conftest.py's tiny model
# Prompts with repeats, so that n-gram matches exist.
PROMPTS = [[(7 * i + 3 * j) % VOCAB for j in range(5 + 3 * i)] * 2 for i in range(6)]
NEW_TOKENS = 24
NEAR_TIE = 1e-3  # a log-probability gap the two devices' float32 rounding may flip


def engine(path: Path, model: CausalLM, drafter: Drafter | None = None, **kw: Any) -> Engine:
    config = EngineConfig(model_path=path, device=str(model.device), page_size=4, max_total_tokens=4096, **kw)
    return Engine(config, drafter, model)


def requests(spec: bool, **sampling: Any) -> list[GenerationRequest]:
    params = SamplingParams(
        **{"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True, **sampling}
    )
    speculation = SpeculationParams(enabled=spec)
    return [GenerationRequest(f"r{i}", p, params, speculation) for i, p in enumerate(PROMPTS)]


def tokens(results: dict[str, GenerationResult]) -> dict[str, list[int]]:
    return {k: v.token_ids for k, v in results.items()}


def test_plain_greedy_on_cuda_is_the_cpu_engines(
    tiny_path: Path, tiny_model: CausalLM, tiny_cuda_model: CausalLM
) -> None:
    """Both in float32: the same tokens, except after a near tie in the CPU's own log-probabilities
    (where the devices' rounding may pick either token; from there on the outputs are free to differ)."""
    cpu = engine(tiny_path, tiny_model).generate(requests(False, logprobs=2))
    gpu = engine(tiny_path, tiny_cuda_model).generate(requests(False))
    diverged = 0
    for rid, want in cpu.items():
        got = gpu[rid].token_ids
        assert len(got) == len(want.token_ids) == NEW_TOKENS
        first = next((k for k, (a, b) in enumerate(zip(got, want.token_ids, strict=True)) if a != b), None)
        if first is None:
            continue
        assert want.logprobs is not None
        top = want.logprobs.top_logprobs[first]
        assert top[0] - top[1] < NEAR_TIE, (rid, first, top)
        diverged += 1
    assert diverged <= 1  # a random model with a vocabulary of 97 rarely ties


def _drafter(kind: str, tiny_path: Path, model: CausalLM, tmp_path: Path) -> Drafter:
    if kind == "random_tree":
        return RandomTreeDrafter(VOCAB, seed=3, with_probs=True)
    if kind == "ngram":
        return create_drafter("ngram", DrafterContext(VOCAB, tiny_path, {"min_path_prob": 0.0}))
    head = (
        write_eagle3(tmp_path / "head", HIDDEN, VOCAB, LAYERS, draft_vocab=64)
        if kind == "eagle3"
        else write_eagle(tmp_path / "head", HIDDEN, VOCAB, weights="model.safetensors")
    )
    context = DrafterContext(VOCAB, tiny_path, {"draft_path": str(head)}, LocalTargetAccess(model))
    return create_drafter(kind, context)


@pytest.mark.parametrize("kind", ["random_tree", "ngram", "eagle3", "eagle"])
def test_drafted_greedy_on_cuda_is_plain_decoding(
    kind: str, tiny_path: Path, tiny_cuda_model: CausalLM, tmp_path: Path
) -> None:
    want = tokens(engine(tiny_path, tiny_cuda_model).generate(requests(False)))
    drafter = _drafter(kind, tiny_path, tiny_cuda_model, tmp_path)
    e = engine(tiny_path, tiny_cuda_model, drafter, node_cost=0.0)
    assert tokens(e.generate(requests(True))) == want
    assert e.stats.drafted_tokens > 0


def test_bfloat16_on_cuda_decodes_and_accepts_its_own_continuations(
    tiny_path: Path, cuda: torch.device
) -> None:
    """dtype auto is bfloat16 on a GPU. An oracle drafting the plain output back is accepted deep."""
    model = load_model(tiny_path, LoadOptions(device=str(cuda)))
    assert model.dtype == torch.bfloat16 and model.device.type == "cuda"
    plain = engine(tiny_path, model).generate(requests(False))
    assert all(len(r.token_ids) == NEW_TOKENS for r in plain.values())
    continuations = {tuple(PROMPTS[i]): plain[f"r{i}"].token_ids for i in range(len(PROMPTS))}
    e = engine(tiny_path, model, OracleDrafter(continuations, VOCAB, seed=1), node_cost=0.0)
    drafted = e.generate(requests(True))
    assert all(len(r.token_ids) == NEW_TOKENS for r in drafted.values())
    assert e.stats.acceptance_length > 2.0


def test_sampling_on_cuda_is_seeded(tiny_path: Path, tiny_cuda_model: CausalLM) -> None:
    """Temperature 1 with a seed: in the vocabulary, and the same seed draws the same tokens."""

    def sample() -> dict[str, list[int]]:
        e = engine(
            tiny_path, tiny_cuda_model, RandomTreeDrafter(VOCAB, seed=3, with_probs=True), node_cost=0.0
        )
        return tokens(e.generate(requests(True, temperature=1.0, seed=11)))

    first = sample()
    assert all(len(t) == NEW_TOKENS and all(0 <= x < VOCAB for x in t) for t in first.values())
    assert sample() == first
