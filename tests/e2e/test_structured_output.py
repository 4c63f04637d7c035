"""Structured output on SmolLM2: every output matches its constraint, greedy output with speculation
equals plain decoding under the same constraint, seeded sampling too (its output does not depend on
the drafter), and a grammar's end wins over min_tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import transformers

from treespec.bench.prompts import chat_prompt_ids
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.grammar.constraint import ConstraintKind, OutputConstraint
from treespec.verifier.request import (
    FinishReason,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
    SpeculationParams,
)

pytestmark = pytest.mark.slow
NEW_TOKENS = 48
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
DATE = r"(Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day, [0-9]{1,2} (May|June)"
CHOICES = ("positive", "negative", "neutral")
CONSTRAINTS = {
    "json_schema": OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(SCHEMA)),
    "json_object": OutputConstraint(ConstraintKind.JSON_OBJECT),
    "regex": OutputConstraint(ConstraintKind.REGEX, DATE),
    "choice": OutputConstraint(ConstraintKind.CHOICE, choices=CHOICES),
}
QUESTIONS = [
    "Describe a person as JSON with a name and an age.",
    "Which day was it yesterday?",
    "Is the review 'I love this phone' positive or negative?",
]


@pytest.fixture(scope="module")
def prompts(tokenizer: transformers.PreTrainedTokenizerBase) -> list[list[int]]:
    return [chat_prompt_ids(tokenizer, q) for q in QUESTIONS]


def _run(
    path: Path,
    model: CausalLM,
    prompts: list[list[int]],
    drafter: Drafter | None,
    constraint: OutputConstraint,
    **sampling: object,
) -> list[GenerationResult]:
    engine = Engine(EngineConfig(model_path=path, max_total_tokens=4096), drafter, model)
    params = SamplingParams(
        **{"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "constraint": constraint, **sampling}  # type: ignore[arg-type]
    )
    spec = SpeculationParams(enabled=drafter is not None)
    got = engine.generate(GenerationRequest(str(i), p, params, spec) for i, p in enumerate(prompts))
    assert engine.num_free_blocks == engine.config.num_blocks
    return [got[str(i)] for i in range(len(prompts))]


def _check(name: str, result: GenerationResult, tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    """A finished output matches its constraint; one cut by the token limit is a prefix of a match."""
    text = str(tokenizer.decode(result.token_ids, skip_special_tokens=True))
    if result.finish_reason is FinishReason.LENGTH:
        assert name == "json_object", f"{name} ran out of tokens: {text!r}"
        assert text.lstrip().startswith("{")
        return
    assert result.finish_reason is FinishReason.STOP
    if name == "json_schema":
        value = json.loads(text)
        assert set(value) == {"name", "age"} and isinstance(value["age"], int)
        assert isinstance(value["name"], str) and len(value["name"]) <= 12
    elif name == "json_object":
        assert isinstance(json.loads(text), dict)
    elif name == "regex":
        assert re.fullmatch(DATE, text), text
    else:
        assert text in CHOICES


@pytest.mark.parametrize("name", list(CONSTRAINTS))
def test_greedy_structured_output_is_valid_and_lossless(
    smollm_path: Path,
    smollm: CausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    prompts: list[list[int]],
    name: str,
) -> None:
    constraint = CONSTRAINTS[name]
    plain = _run(smollm_path, smollm, prompts, None, constraint)
    for result in plain:
        _check(name, result, tokenizer)
    want = [r.token_ids for r in plain]
    vocab = smollm.config.vocab_size
    if name in ("json_schema", "regex"):  # random trees: rejections through the grammar's masks
        drafted = _run(smollm_path, smollm, prompts, RandomTreeDrafter(vocab, seed=3), constraint)
        assert [r.token_ids for r in drafted] == want
    # Trees that hold the answer are accepted through the grammar's masks.
    oracle = OracleDrafter({tuple(p): w for p, w in zip(prompts, want, strict=True)}, vocab, seed=1)
    guided = _run(smollm_path, smollm, prompts, oracle, constraint)
    assert [r.token_ids for r in guided] == want
    assert sum(r.stats.accepted_tokens for r in guided) > 0.5 * sum(len(w) for w in want)


@pytest.mark.parametrize("name", ["json_schema", "regex"])
def test_seeded_sampling_follows_the_grammar_whatever_the_drafter(
    smollm_path: Path,
    smollm: CausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    prompts: list[list[int]],
    name: str,
) -> None:
    constraint = CONSTRAINTS[name]
    vocab = smollm.config.vocab_size
    sampling = {"temperature": 1.0, "top_p": 0.95, "seed": 1}
    plain = _run(smollm_path, smollm, prompts, None, constraint, **sampling)
    drafter = RandomTreeDrafter(vocab, seed=1, with_probs=True)
    drafted = _run(smollm_path, smollm, prompts, drafter, constraint, **sampling)
    assert [r.token_ids for r in drafted] == [r.token_ids for r in plain]
    for result in plain:
        _check(name, result, tokenizer)


def test_unseeded_sampling_with_draft_probabilities_follows_the_grammar(
    smollm_path: Path,
    smollm: CausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    prompts: list[list[int]],
) -> None:
    drafter = RandomTreeDrafter(smollm.config.vocab_size, seed=5, with_probs=True)
    for result in _run(smollm_path, smollm, prompts * 2, drafter, CONSTRAINTS["choice"], temperature=1.5):
        _check("choice", result, tokenizer)


def test_the_grammar_end_wins_over_min_tokens(
    smollm_path: Path,
    smollm: CausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    prompts: list[list[int]],
) -> None:
    drafter = RandomTreeDrafter(smollm.config.vocab_size, seed=0)
    for result in _run(smollm_path, smollm, prompts, drafter, CONSTRAINTS["choice"], min_tokens=20):
        _check("choice", result, tokenizer)
        assert len(result.token_ids) < 20


def test_an_invalid_constraint_is_refused_before_it_runs(smollm_path: Path, smollm: CausalLM) -> None:
    engine = Engine(EngineConfig(model_path=smollm_path, max_total_tokens=1024), None, smollm)
    bad = OutputConstraint(ConstraintKind.JSON_SCHEMA, '{"type": "nonsense"}')
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4, constraint=bad)
    with pytest.raises(InvalidRequestError, match="invalid json_schema"):
        engine.add_request(GenerationRequest("bad", [1, 2, 3], sampling, SpeculationParams(enabled=False)))
    assert not engine.has_work()
