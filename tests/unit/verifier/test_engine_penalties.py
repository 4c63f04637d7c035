"""Presence, frequency and repetition penalties, and logit bias: greedy output with speculation equals
plain decoding with the same settings, and plain decoding equals transformers' greedy loop under
vLLM's rules. (Sampling with penalties: test_sampling_distribution.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import (
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
    SpeculationParams,
)

VOCAB = 97
PROMPTS = [[(3 * i + 5 * j) % VOCAB for j in range(6 + 2 * i)] for i in range(5)]
NEW = 24
PENALTIES = {
    "presence": {"presence_penalty": 1.5},
    "frequency": {"frequency_penalty": 0.7},
    "repetition": {"repetition_penalty": 1.8},
    "all": {"presence_penalty": -0.5, "frequency_penalty": 0.4, "repetition_penalty": 1.3},
}


def _generate(
    path: Path, model: CausalLM, drafter: Drafter | None, penalties: dict[str, Any]
) -> dict[str, list[int]]:
    engine = Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=4096), drafter, model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=NEW, ignore_eos=True, **penalties)
    spec = SpeculationParams(enabled=drafter is not None)
    got = engine.generate(GenerationRequest(f"r{i}", p, sampling, spec) for i, p in enumerate(PROMPTS))
    return {rid: r.token_ids for rid, r in got.items()}


def _reference(path: Path, prompt: list[int], p: dict[str, float]) -> list[int]:
    """transformers' logits, penalised token by token: repetition over prompt and output, then
    frequency and presence over the output; greedy."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(NEW):
            row = hf(torch.tensor([ids])).logits[0, -1].clone()
            output = ids[len(prompt) :]
            for token in set(ids):
                value = float(row[token])
                rep = p.get("repetition_penalty", 1.0)
                row[token] = value / rep if value > 0 else value * rep
            for token in set(output):
                count = output.count(token)
                row[token] -= p.get("frequency_penalty", 0.0) * count + p.get("presence_penalty", 0.0)
            ids.append(int(row.argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("name", list(PENALTIES))
def test_speculation_keeps_penalised_greedy_output(tiny_path: Path, tiny_model: CausalLM, name: str) -> None:
    penalties = PENALTIES[name]
    want = _generate(tiny_path, tiny_model, None, penalties)
    assert want != _generate(tiny_path, tiny_model, None, {}), "the penalties changed nothing"
    assert _generate(tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=2), penalties) == want
    # Trees that hold the right answer: accepted, with the penalties counted along their paths.
    continuations = {tuple(PROMPTS[int(rid[1:])]): tokens for rid, tokens in want.items()}
    oracle = OracleDrafter(continuations, VOCAB, seed=1, error_rate=0.2)
    assert _generate(tiny_path, tiny_model, oracle, penalties) == want


@pytest.mark.parametrize("name", ["presence", "all"])
def test_penalised_plain_decoding_matches_the_reference(
    tiny_path: Path, tiny_model: CausalLM, name: str
) -> None:
    got = _generate(tiny_path, tiny_model, None, PENALTIES[name])
    for i in (0, 3):
        assert got[f"r{i}"] == _reference(tiny_path, PROMPTS[i], PENALTIES[name])


@pytest.mark.parametrize(
    "fields",
    [
        {"presence_penalty": 2.5},
        {"frequency_penalty": -3.0},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": float("inf")},
    ],
)
def test_out_of_range_penalties_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(InvalidRequestError, match="penalty"):
        SamplingParams(**fields).validate()  # type: ignore[arg-type]


def test_logit_bias_with_speculation_equals_plain(tiny_path: Path, tiny_model: CausalLM) -> None:
    first = _generate(tiny_path, tiny_model, None, {})["r0"][0]
    bias = {"logit_bias": ((first, -100.0), (7, 3.0))}
    want = _generate(tiny_path, tiny_model, None, bias)
    assert want["r0"][0] != first
    assert _generate(tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=4), bias) == want
    forced = _generate(
        tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=4), {"logit_bias": ((11, 100.0),)}
    )
    assert all(tokens == [11] * NEW for tokens in forced.values())


def test_logit_bias_beyond_the_vocabulary_is_refused(tiny_path: Path, tiny_model: CausalLM) -> None:
    engine = Engine(EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=4096), None, tiny_model)
    sampling = SamplingParams(logit_bias=((VOCAB, 1.0),))
    with pytest.raises(InvalidRequestError, match="logit_bias"):
        engine.add_request(GenerationRequest("r", [1, 2], sampling))
    with pytest.raises(InvalidRequestError, match="logit_bias"):
        SamplingParams(logit_bias=((3, 101.0),)).validate()


@pytest.mark.parametrize("speculate", [False, True])
def test_min_tokens_holds_back_eos_and_stop_tokens(
    tiny_path: Path, tiny_model: CausalLM, speculate: bool
) -> None:
    """EOS pushed up by a bias would end every request at once; min_tokens holds it (and a stop token
    id) back row by row, down the trees too, until the fifth token is out."""
    drafter = RandomTreeDrafter(VOCAB, seed=6) if speculate else None
    engine = Engine(
        EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=4096), drafter, tiny_model
    )
    (eos,) = sorted(engine.eos_token_ids)[:1]
    bias = ((eos, 100.0), (9, 99.0))
    sampling = SamplingParams(
        temperature=0.0, max_new_tokens=NEW, logit_bias=bias, stop_token_ids=(9,), min_tokens=5
    )
    spec = SpeculationParams(enabled=speculate)
    got = engine.generate(GenerationRequest(f"r{i}", p, sampling, spec) for i, p in enumerate(PROMPTS))
    for result in got.values():
        assert len(result.token_ids) == 6 and result.token_ids[-1] == eos
        assert eos not in result.token_ids[:5] and 9 not in result.token_ids[:5]
        assert result.finish_reason.value == "stop"
    with pytest.raises(InvalidRequestError, match="min_tokens"):
        SamplingParams(max_new_tokens=4, min_tokens=5).validate()
