"""vLLM's bad_words and allowed_token_ids in the engine: greedy output with speculation equals plain
decoding with the same bans, the bans hold down the drafted trees, and bad ids are refused. (Sampling
with bans: test_sampling_distribution.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
PROMPTS = [[(7 * i + 3 * j) % VOCAB for j in range(5 + 3 * i)] for i in range(4)]
NEW = 24


def _engine(path: Path, model: CausalLM, drafter: Drafter | None = None) -> Engine:
    return Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=4096), drafter, model)


def _generate(
    path: Path, model: CausalLM, drafter: Drafter | None, bans: dict[str, Any]
) -> dict[str, list[int]]:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=NEW, ignore_eos=True, **bans)
    spec = SpeculationParams(enabled=drafter is not None)
    requests = (GenerationRequest(f"r{i}", p, sampling, spec) for i, p in enumerate(PROMPTS))
    return {rid: r.token_ids for rid, r in _engine(path, model, drafter).generate(requests).items()}


def _holds(tokens: list[int], word: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + len(word)]) == word for i in range(len(tokens) - len(word) + 1))


def _check_speculation_keeps(path: Path, model: CausalLM, bans: dict[str, Any]) -> dict[str, list[int]]:
    want = _generate(path, model, None, bans)
    assert _generate(path, model, RandomTreeDrafter(VOCAB, seed=3), bans) == want
    # Trees that mostly hold the right answer: their banned branches are rejected, the rest accepted.
    continuations = {tuple(PROMPTS[int(rid[1:])]): tokens for rid, tokens in want.items()}
    assert _generate(path, model, OracleDrafter(continuations, VOCAB, seed=1, error_rate=0.2), bans) == want
    return want


def test_bad_words_never_complete_and_speculation_keeps_the_output(
    tiny_path: Path, tiny_model: CausalLM
) -> None:
    plain = _generate(tiny_path, tiny_model, None, {})
    # Words the unbanned output holds: a pair from one request's output and a single token of another's.
    pair = tuple(plain["r0"][2:4])
    single = (plain["r1"][5],)
    got = _check_speculation_keeps(tiny_path, tiny_model, {"bad_words": (pair, single)})
    assert got != plain, "the bans changed nothing"
    for tokens in got.values():
        assert not _holds(tokens, pair) and single[0] not in tokens
    assert (
        got["r0"][:3] == plain["r0"][:3]
    )  # the pair's first token may still come, just not the second after it


def test_allowed_token_ids_keep_the_output_among_them(tiny_path: Path, tiny_model: CausalLM) -> None:
    plain = _generate(tiny_path, tiny_model, None, {})
    allowed = tuple(sorted({t for tokens in plain.values() for t in tokens[::2]}))
    got = _check_speculation_keeps(tiny_path, tiny_model, {"allowed_token_ids": allowed})
    assert got != plain and all(set(tokens) <= set(allowed) for tokens in got.values())


@pytest.mark.parametrize(
    ("bans", "named"),
    [
        ({"bad_words": ((3, VOCAB),)}, "bad_words"),
        ({"allowed_token_ids": (VOCAB + 5,)}, "allowed_token_ids"),
    ],
)
def test_ids_beyond_the_vocabulary_are_refused(
    tiny_path: Path, tiny_model: CausalLM, bans: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidRequestError, match=named):
        _engine(tiny_path, tiny_model).add_request(GenerationRequest("r", [1, 2], SamplingParams(**bans)))


@pytest.mark.parametrize(
    "bans",
    [
        {"bad_words": ((),)},
        {"bad_words": ((1, -2),)},
        {"allowed_token_ids": (-1,)},
        {"bad_words": ((1,),) * 257},
    ],
)
def test_malformed_bans_are_refused(bans: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        SamplingParams(**bans).validate()
