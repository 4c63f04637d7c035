"""Prefix caching on SmolLM2: prompts that share a system prompt reuse its K/V and answer as when every
prompt is computed (near-tie rule), also under a drafter that reads the target's features (EAGLE),
which gets the cached prefix's features from the verifier."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from treespec.bench.greedy_match import compare_greedy, hf_next_logits
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.slow
SYSTEM = (
    "You are a careful assistant for a small bookshop. Answer in one or two sentences, name the "
    "book's author when you know it, never invent prices, and say so when a title is unknown to you."
)
QUESTIONS = ["Who wrote Emma?", "Do you sell maps?", "Is Dracula scary?", "What is a novella?"]


@pytest.fixture(scope="module")
def prompts(tokenizer: transformers.PreTrainedTokenizerBase) -> list[list[int]]:
    rendered = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for q in QUESTIONS
    ]
    return [list(tokenizer(str(text), add_special_tokens=False)["input_ids"]) for text in rendered]


def _run(
    path: Path, model: CausalLM, prompts: list[list[int]], drafter: Drafter | None, caching: bool
) -> tuple[list[list[int]], Engine]:
    """The first prompt alone, then the others together (they find its blocks cached)."""
    # A fixed node cost: a measured one moves with the machine's load, and the trees with it.
    config = EngineConfig(model_path=path, max_total_tokens=4096, prefix_caching=caching, node_cost=0.03)
    engine = Engine(config, drafter, model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=24)
    spec = SpeculationParams(enabled=drafter is not None)
    outputs: dict[str, list[int]] = {}
    for wave in ([0], list(range(1, len(prompts)))):
        got = engine.generate(GenerationRequest(str(i), prompts[i], sampling, spec) for i in wave)
        outputs.update({rid: r.token_ids for rid, r in got.items()})
    assert engine.num_free_blocks == engine.config.num_blocks
    return [outputs[str(i)] for i in range(len(prompts))], engine


def _common_prefix(prompts: list[list[int]]) -> int:
    n = 0
    while all(len(p) > n and p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n


def test_a_shared_system_prompt_is_computed_once(
    smollm_path: Path,
    smollm: CausalLM,
    smollm_hf: transformers.PreTrainedModel,
    prompts: list[list[int]],
) -> None:
    want, _ = _run(smollm_path, smollm, prompts, None, caching=False)
    got, engine = _run(smollm_path, smollm, prompts, None, caching=True)
    next_logits = hf_next_logits(smollm_hf)
    for prompt, ours, theirs in zip(prompts, got, want, strict=True):
        match = compare_greedy(prompt, ours, theirs, next_logits)
        assert match.ok, f"diverged at {match.diverged_at} (gap {match.gap})"
    cache = engine.prefix_cache
    shared = _common_prefix(prompts)
    assert shared > 3 * engine.config.page_size
    assert cache is not None and cache.hit_tokens >= (len(prompts) - 1) * (shared - engine.config.page_size)


def _eagle_run(
    path: Path, model: CausalLM, prompts: list[list[int]], caching: bool
) -> tuple[list[list[int]], Engine]:
    vocab = model.config.vocab_size
    drafter = create_drafter("eagle3", DrafterContext(vocab, path, {}, LocalTargetAccess(model)))
    try:
        return _run(path, model, prompts, drafter, caching)
    finally:
        drafter.shutdown()


def test_eagle_reuses_a_shared_prefix_with_its_features(
    smollm_path: Path,
    smollm: CausalLM,
    smollm_hf: transformers.PreTrainedModel,
    prompts: list[list[int]],
) -> None:
    got, engine = _eagle_run(smollm_path, smollm, prompts, caching=True)
    _, uncached = _eagle_run(smollm_path, smollm, prompts, caching=False)
    want, _ = _run(smollm_path, smollm, prompts, None, caching=False)
    next_logits = hf_next_logits(smollm_hf)
    for prompt, ours, theirs in zip(prompts, got, want, strict=True):
        assert compare_greedy(prompt, ours, theirs, next_logits).ok
    shared = _common_prefix(prompts)
    cache = engine.prefix_cache
    assert cache is not None and cache.hit_tokens >= (len(prompts) - 1) * (shared - engine.config.page_size)
    # The head read the cached prefix's features as if computed: its drafts fare as well (features
    # missing or wrong there would leave it guessing from the last few positions).
    assert uncached.stats.accepted_tokens > 0
    assert engine.stats.accepted_tokens >= 0.9 * uncached.stats.accepted_tokens
