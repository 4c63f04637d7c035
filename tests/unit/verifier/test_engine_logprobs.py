"""Log-probabilities of output tokens: the target's own, whether a step verified a tree or decoded one
token, greedy or sampled, and cut where the output is."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.kernels.logprobs import TokenLogprobs
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import (
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
    SpeculationParams,
)

VOCAB = 97
PROMPTS = [[(5 * i + 2 * j) % VOCAB for j in range(4 + 3 * i)] for i in range(4)]


def _run(
    path: Path, model: CausalLM, speculate: bool, k: int | None, temperature: float = 0.0, n: int = 20
) -> dict[str, GenerationResult]:
    drafter = RandomTreeDrafter(VOCAB, seed=5, with_probs=True) if speculate else None
    engine = Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=2048), drafter, model)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=n, ignore_eos=True, logprobs=k, seed=3)
    spec = SpeculationParams(enabled=speculate)
    return engine.generate(GenerationRequest(f"r{i}", p, sampling, spec) for i, p in enumerate(PROMPTS))


def _reference(path: Path, prompt: list[int], output: list[int]) -> torch.Tensor:
    """HF's log-softmax over the whole sequence: [len(output), vocab], the rows output came from."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + output])).logits[0]
    return torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logprobs_are_the_targets_with_or_without_trees(
    tiny_path: Path, tiny_model: CausalLM, temperature: float
) -> None:
    plain = _run(tiny_path, tiny_model, False, 3, temperature)
    spec = _run(tiny_path, tiny_model, True, 3, temperature)
    for rid, result in spec.items():
        prompt = PROMPTS[int(rid[1:])]
        lp = result.logprobs
        assert lp is not None and len(lp.chosen) == len(result.token_ids) == 20
        want = _reference(tiny_path, prompt, result.token_ids)
        chosen = want.gather(1, torch.tensor(result.token_ids).view(-1, 1)).squeeze(1)
        assert torch.allclose(torch.tensor(lp.chosen), chosen, atol=1e-4)
        top = want.topk(3, dim=-1)
        assert torch.allclose(torch.tensor(lp.top_logprobs), top.values, atol=1e-4)
        assert all(len(ids) == 3 for ids in lp.top_ids)
        if temperature == 0.0:  # the same tokens, so the same figures as plain decoding
            other = plain[rid].logprobs
            assert other is not None and plain[rid].token_ids == result.token_ids
            assert torch.allclose(torch.tensor(other.chosen), torch.tensor(lp.chosen), atol=1e-4)
            assert [row[0] for row in lp.top_ids] == result.token_ids  # greedy: the best token


def test_none_by_default_and_zero_means_the_chosen_token_only(tiny_path: Path, tiny_model: CausalLM) -> None:
    assert all(r.logprobs is None for r in _run(tiny_path, tiny_model, True, None, n=6).values())
    for result in _run(tiny_path, tiny_model, True, 0, n=6).values():
        lp = result.logprobs
        assert isinstance(lp, TokenLogprobs) and len(lp.chosen) == 6
        assert lp.top_ids == [[]] * 6 and all(x <= 0.0 for x in lp.chosen)


@pytest.mark.parametrize("k", [-1, 21])
def test_out_of_range_is_refused(k: int) -> None:
    with pytest.raises(InvalidRequestError, match="logprobs"):
        SamplingParams(logprobs=k).validate()


@pytest.mark.parametrize("chunk", [4, 512])
def test_prompt_logprobs_over_chunked_prefill(tiny_path: Path, tiny_model: CausalLM, chunk: int) -> None:
    config = EngineConfig(
        model_path=tiny_path, page_size=4, max_total_tokens=2048, chunked_prefill_size=chunk
    )
    engine = Engine(config, RandomTreeDrafter(VOCAB, seed=5), tiny_model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3, ignore_eos=True, prompt_logprobs=2)
    requests = [GenerationRequest(f"r{i}", p, sampling) for i, p in enumerate(PROMPTS)]
    results = engine.generate(requests)
    for rid, result in results.items():
        prompt = PROMPTS[int(rid[1:])]
        lp = result.prompt_logprobs
        assert lp is not None and len(lp.chosen) == len(prompt) - 1  # the first token has no context
        assert result.logprobs is None  # not asked for the output's
        want = _reference(tiny_path, prompt[:1], prompt[1:])
        chosen = want.gather(1, torch.tensor(prompt[1:]).view(-1, 1)).squeeze(1)
        assert torch.allclose(torch.tensor(lp.chosen), chosen, atol=1e-4)
        assert torch.allclose(torch.tensor(lp.top_logprobs), want.topk(2, dim=-1).values, atol=1e-4)


def test_a_one_token_prompt_has_no_prompt_logprobs(tiny_path: Path, tiny_model: CausalLM) -> None:
    engine = Engine(EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=2048), None, tiny_model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=2, prompt_logprobs=0)
    (result,) = engine.generate([GenerationRequest("r", [5], sampling)]).values()
    assert result.prompt_logprobs is None and len(result.token_ids) == 2


def test_prompt_logprobs_come_once_through_preemption(tiny_path: Path, tiny_model: CausalLM) -> None:
    """A small pool under 12 requests preempts some; their recompute reads no prompt row twice."""
    config = EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=96, chunked_prefill_size=8)
    engine = Engine(config, RandomTreeDrafter(VOCAB, seed=1), tiny_model)
    sampling = SamplingParams(
        temperature=0.0, max_new_tokens=20, ignore_eos=True, prompt_logprobs=0, logprobs=0
    )
    prompts = {f"r{i}": PROMPTS[i % len(PROMPTS)] for i in range(12)}
    for rid, prompt in prompts.items():
        engine.add_request(GenerationRequest(rid, prompt, sampling))
    seen: dict[str, int] = {}
    preempted = 0
    while engine.has_work():
        for out in engine.step():
            if out.prompt_logprobs is not None:
                seen[out.request_id] = seen.get(out.request_id, 0) + 1
                assert len(out.prompt_logprobs.chosen) == len(prompts[out.request_id]) - 1
            assert out.logprobs is not None and len(out.logprobs.chosen) == len(out.token_ids)
        preempted = max(preempted, sum(s.num_preemptions for s in engine._states.values()))
    assert preempted > 0, "the pool was never short: the test does not exercise preemption"
    assert seen == {rid: 1 for rid in prompts}
