"""500 randomized requests with aborts, preemptions and speculation leave the KV pool whole."""

from __future__ import annotations

import random
from pathlib import Path

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import FinishReason, GenerationRequest, SamplingParams, SpeculationParams

VOCAB = 97


def random_request(rng: random.Random, i: int) -> GenerationRequest:
    prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 60))]
    sampling = SamplingParams(
        temperature=rng.choice([0.0, 0.0, 0.8, 1.0]),
        top_k=rng.choice([-1, 5]),
        top_p=rng.choice([1.0, 0.9]),
        seed=i,
        max_new_tokens=rng.randint(1, 40),
        ignore_eos=rng.random() < 0.5,
    )
    speculation = SpeculationParams(
        enabled=rng.random() < 0.8,
        num_draft_tokens=rng.randint(2, 10),
        num_steps=rng.randint(1, 6),
        eagle_topk=rng.randint(1, 4),
    )
    return GenerationRequest(f"q{i}", prompt, sampling, speculation)


def test_pool_is_whole_after_random_traffic(tiny_path: Path, tiny_model: CausalLM) -> None:
    rng = random.Random(0)
    # A small pool (48 blocks of 4 tokens) under 16 concurrent requests forces preemption.
    config = EngineConfig(
        model_path=tiny_path,
        page_size=4,
        max_total_tokens=192,
        max_running_requests=16,
        chunked_prefill_size=48,
        context_length=120,
    )
    e = Engine(config, RandomTreeDrafter(VOCAB, seed=1, with_probs=True), tiny_model)
    pending = [random_request(rng, i) for i in range(500)]
    finished: dict[str, FinishReason] = {}
    tokens: dict[str, int] = {}
    live: list[str] = []
    preemptions = aborts = 0
    while pending or e.has_work():
        for _ in range(rng.randint(0, 6)):
            if pending:
                r = pending.pop()
                e.add_request(r)
                live.append(r.request_id)
        if live and rng.random() < 0.1:
            e.abort(live[rng.randrange(len(live))])
            aborts += 1
        for out in e.step():
            tokens[out.request_id] = tokens.get(out.request_id, 0) + len(out.token_ids)
            if out.finish_reason is not None:
                finished[out.request_id] = out.finish_reason
                live.remove(out.request_id)
        preemptions = max(preemptions, sum(s.num_preemptions for s in e._states.values()))
    assert len(finished) == 500
    assert aborts > 10 and FinishReason.ABORT in finished.values()
    assert preemptions > 0, "the pool was never short: the test does not exercise preemption"
    assert e.scheduler.num_preemptions >= preemptions  # the total counts finished requests' too
    assert e.num_free_blocks == config.num_blocks
    assert e.num_running == e.num_waiting == 0
    assert e.allocator._refs == [0] * config.num_blocks
