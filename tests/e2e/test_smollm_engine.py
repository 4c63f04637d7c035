"""The engine on SmolLM2-135M: HF transformers' greedy output, and speculation that changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from treespec.bench.greedy_match import compare_greedy, hf_next_logits
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.slow
NEW_TOKENS = 64


def run(
    path: Path,
    model: CausalLM,
    prompts: list[list[int]],
    drafter: Drafter | None,
    *,
    spec: SpeculationParams | None = None,
    **sampling: Any,
) -> list[list[int]]:
    engine = Engine(EngineConfig(model_path=path, max_total_tokens=8192), drafter, model)
    params = SamplingParams(**{"temperature": 0.0, "max_new_tokens": NEW_TOKENS, **sampling})
    spec = spec or SpeculationParams(enabled=drafter is not None)
    results = engine.generate(GenerationRequest(str(i), p, params, spec) for i, p in enumerate(prompts))
    assert engine.num_free_blocks == engine.config.num_blocks
    return [results[str(i)].token_ids for i in range(len(prompts))]


@pytest.fixture(scope="module")
def plain(smollm_path: Path, smollm: CausalLM, bench_prompt_ids: list[list[int]]) -> list[list[int]]:
    return run(smollm_path, smollm, bench_prompt_ids, None)


def test_plain_greedy_reproduces_hf_generate(
    smollm_hf: transformers.PreTrainedModel, bench_prompt_ids: list[list[int]], plain: list[list[int]]
) -> None:
    assert len(bench_prompt_ids) >= 10
    next_logits = hf_next_logits(smollm_hf)
    # HF's generate on the six shortest (each of another category): its decoding is the slow side.
    for prompt, ours in zip(bench_prompt_ids[:6], plain[:6], strict=True):
        with torch.no_grad():
            out = smollm_hf.generate(  # type: ignore[operator]
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False
            )
        theirs = out[0, len(prompt) :].tolist()
        match = compare_greedy(prompt, ours, theirs, next_logits)
        assert match.ok, f"diverged from HF at token {match.diverged_at} (top-2 gap {match.gap})"


@pytest.mark.parametrize("kind", ["random", "oracle", "ngram", "eagle3", "eagle3-ngram"])
def test_speculation_is_lossless_batched(
    smollm_path: Path,
    smollm: CausalLM,
    smollm_hf: transformers.PreTrainedModel,
    bench_prompt_ids: list[list[int]],
    plain: list[list[int]],
    kind: str,
) -> None:
    vocab = smollm.config.vocab_size
    drafter: Drafter
    budget = None
    if kind == "random":
        drafter = RandomTreeDrafter(vocab, seed=0)
    elif kind == "oracle":
        drafter = OracleDrafter({tuple(p): o for p, o in zip(bench_prompt_ids, plain, strict=True)}, vocab)
    elif kind.startswith("eagle3"):  # the head shipped for this model, in process (with n-gram matches)
        options: dict[str, Any] = {"ngram": {}} if kind == "eagle3-ngram" else {}
        context = DrafterContext(vocab, smollm_path, options, LocalTargetAccess(smollm))
        drafter = create_drafter("eagle3", context)
    else:
        drafter = NgramDrafter.create(DrafterContext(vocab, smollm_path))
        b = drafter.config.default_budget()
        budget = SpeculationParams(
            num_draft_tokens=b.num_draft_tokens, num_steps=b.num_steps, eagle_topk=b.topk
        )
    spec = run(smollm_path, smollm, bench_prompt_ids, drafter, spec=budget)
    drafter.shutdown()
    next_logits = hf_next_logits(smollm_hf)
    for prompt, got, want in zip(bench_prompt_ids, spec, plain, strict=True):
        match = compare_greedy(prompt, got, want, next_logits)
        assert match.ok, f"{kind}: diverged from plain decoding at {match.diverged_at} (gap {match.gap})"


def test_sampling_with_a_seed_reproduces(
    smollm_path: Path, smollm: CausalLM, bench_prompt_ids: list[list[int]]
) -> None:
    prompts = bench_prompt_ids[:2]
    kw: dict[str, Any] = dict(temperature=0.8, top_p=0.95, seed=1234)
    a = run(
        smollm_path,
        smollm,
        prompts,
        RandomTreeDrafter(smollm.config.vocab_size, seed=1, with_probs=True),
        **kw,
    )
    b = run(
        smollm_path,
        smollm,
        prompts,
        RandomTreeDrafter(smollm.config.vocab_size, seed=1, with_probs=True),
        **kw,
    )
    assert a == b
    c = run(smollm_path, smollm, prompts, None, **{**kw, "seed": 4321})
    assert c != a
