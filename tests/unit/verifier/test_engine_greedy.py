"""Speculation never changes greedy output; stop rules, aborts and bad requests behave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import (
    FinishReason,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
    SpeculationParams,
)

VOCAB = 97
PROMPTS = [[(7 * i + 3 * j) % VOCAB for j in range(5 + 3 * i)] for i in range(6)]


def engine(path: Path, model: CausalLM, drafter: Drafter | None = None, **kw: Any) -> Engine:
    return Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=2048, **kw), drafter, model)


def greedy(i: int, spec: bool = True, n: int = 24, **kw: Any) -> GenerationRequest:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True, **kw)
    return GenerationRequest(f"r{i}", PROMPTS[i], sampling, SpeculationParams(enabled=spec))


def plain(path: Path, model: CausalLM) -> dict[str, GenerationResult]:
    return engine(path, model).generate(greedy(i, spec=False) for i in range(len(PROMPTS)))


@pytest.mark.parametrize("with_probs", [False, True])
def test_random_trees_are_lossless_batched(tiny_path: Path, tiny_model: CausalLM, with_probs: bool) -> None:
    want = plain(tiny_path, tiny_model)
    e = engine(tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=3, with_probs=with_probs))
    got = e.generate(greedy(i) for i in range(len(PROMPTS)))
    assert {k: v.token_ids for k, v in got.items()} == {k: v.token_ids for k, v in want.items()}
    assert e.stats.drafted_tokens > 0


@pytest.mark.parametrize("error_rate", [0.0, 0.3])
def test_oracle_trees_are_lossless_and_accepted(
    tiny_path: Path, tiny_model: CausalLM, error_rate: float
) -> None:
    want = plain(tiny_path, tiny_model)
    continuations = {tuple(PROMPTS[i]): want[f"r{i}"].token_ids for i in range(len(PROMPTS))}
    e = engine(tiny_path, tiny_model, OracleDrafter(continuations, VOCAB, seed=1, error_rate=error_rate))
    got = e.generate(greedy(i) for i in range(len(PROMPTS)))
    assert {k: v.token_ids for k, v in got.items()} == {k: v.token_ids for k, v in want.items()}
    if error_rate == 0.0:
        # 8-node trees with a 5-token chain: every step commits the chain and the bonus, but the last.
        assert e.stats.acceptance_by_depth == [1.0] * 5
        assert e.stats.acceptance_length > 5.0
    else:
        assert 1.0 < e.stats.acceptance_length < 5.0


def test_per_request_speculation_settings(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = plain(tiny_path, tiny_model)
    # Every step drafts for the requests that speculate (no speculation gate: random trees never pay).
    e = engine(tiny_path, tiny_model, RandomTreeDrafter(VOCAB, seed=5), adaptive_speculation=False)
    reqs = [greedy(0, spec=False), greedy(1)]
    reqs.append(
        GenerationRequest(
            "r2",
            PROMPTS[2],
            reqs[1].sampling,
            SpeculationParams(num_draft_tokens=3, num_steps=1, eagle_topk=2),
        )
    )
    got = e.generate(reqs)
    assert got["r0"].stats.drafted_tokens == 0 and got["r0"].stats.verify_steps == 23
    assert got["r1"].stats.drafted_tokens == 7 * got["r1"].stats.verify_steps
    assert got["r2"].stats.drafted_tokens <= 2 * got["r2"].stats.verify_steps
    for k in ("r0", "r1", "r2"):
        assert got[k].token_ids == want[k].token_ids


def test_stop_tokens_max_new_tokens_and_eos(tiny_path: Path, tiny_model: CausalLM) -> None:
    ref = plain(tiny_path, tiny_model)["r0"].token_ids
    e = engine(tiny_path, tiny_model, RandomTreeDrafter(VOCAB))
    stop_at = ref[5]
    got = e.generate([greedy(0, stop_token_ids=(stop_at,))])["r0"]
    assert got.token_ids == ref[: ref.index(stop_at) + 1] and got.finish_reason is FinishReason.STOP
    got = e.generate([greedy(0, n=7)])["r0"]
    assert got.token_ids == ref[:7] and got.finish_reason is FinishReason.LENGTH
    # EOS (id 2 in the tiny config) stops unless ignore_eos.
    assert 2 in e.model.config.eos_token_ids


def test_context_limit_finishes_with_length(tiny_path: Path, tiny_model: CausalLM) -> None:
    e = engine(tiny_path, tiny_model, context_length=20)
    got = e.generate([greedy(1, n=100)])["r1"]  # prompt of 8 tokens
    assert got.finish_reason is FinishReason.LENGTH and len(got.token_ids) == 20 - 8


def test_abort_frees_kv(tiny_path: Path, tiny_model: CausalLM) -> None:
    e = engine(tiny_path, tiny_model, RandomTreeDrafter(VOCAB))
    for i in range(3):
        e.add_request(greedy(i, n=50))
    for _ in range(4):
        e.step()
    assert e.num_free_blocks < e.config.num_blocks
    e.abort("r1")
    outs = e.step()
    assert any(o.request_id == "r1" and o.finish_reason is FinishReason.ABORT for o in outs)
    while e.has_work():
        e.step()
    assert e.num_free_blocks == e.config.num_blocks


@pytest.mark.parametrize(
    "request_",
    [
        GenerationRequest("x", []),
        GenerationRequest("x", [1, VOCAB]),
        GenerationRequest("x", [1, -1]),
        GenerationRequest("x", list(range(40)) * 10),  # beyond the 256-token context
        GenerationRequest("x", [1], SamplingParams(temperature=-1)),
        GenerationRequest("x", [1], SamplingParams(top_p=0)),
        GenerationRequest("x", [1], SamplingParams(max_new_tokens=0)),
        GenerationRequest("x", [1], speculation=SpeculationParams(num_draft_tokens=0)),
    ],
)
def test_bad_requests_are_refused(tiny_path: Path, tiny_model: CausalLM, request_: GenerationRequest) -> None:
    e = engine(tiny_path, tiny_model)
    with pytest.raises(InvalidRequestError):
        e.add_request(request_)
    assert not e.has_work()


class ExplodingDrafter(RandomTreeDrafter):
    def propose(self, queries):
        raise RuntimeError("drafter down")


class LyingDrafter(RandomTreeDrafter):
    """Trees breaking every rule in turn: wrong root, over budget, bad parents, out-of-vocab tokens."""

    def propose(self, queries):
        import torch

        from treespec.shared.drafting.token_tree import TokenTree

        bad = [
            TokenTree(torch.tensor([0, 1]), torch.tensor([-1, 0])),
            TokenTree.chain([0] * 30),
            TokenTree(torch.tensor([0, 1, 2]), torch.tensor([-1, 2, 0])),
            TokenTree(torch.tensor([0, VOCAB + 5]), torch.tensor([-1, 0])),
        ]
        return [bad[i % len(bad)] for i, _ in enumerate(queries)]


@pytest.mark.parametrize("drafter_cls", [ExplodingDrafter, LyingDrafter])
def test_broken_drafter_degrades_to_plain_decoding(
    tiny_path: Path, tiny_model: CausalLM, drafter_cls: type[RandomTreeDrafter]
) -> None:
    want = plain(tiny_path, tiny_model)
    e = engine(tiny_path, tiny_model, drafter_cls(VOCAB))
    got = e.generate(greedy(i) for i in range(len(PROMPTS)))
    assert {k: v.token_ids for k, v in got.items()} == {k: v.token_ids for k, v in want.items()}
