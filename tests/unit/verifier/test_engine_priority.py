"""vLLM's priority scheduling through the engine: under the priority policy requests finish in order
of priority (one runs at a time), their outputs unchanged; first come, first served refuses a
priority, and an unknown policy is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, InvalidRequestError, SamplingParams

VOCAB = 97
PRIORITIES = {"a": 4, "b": 0, "c": 2, "d": -1}


def _finish_order(path: Path, model: CausalLM, policy: str) -> tuple[list[str], dict[str, list[int]]]:
    config = EngineConfig(
        model_path=path, page_size=4, max_total_tokens=2048, max_running_requests=1, scheduling_policy=policy
    )
    engine = Engine(config, RandomTreeDrafter(VOCAB, seed=1), model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=6, ignore_eos=True)
    requests = [
        GenerationRequest(
            name, [3 + i, 7, 11 + i], sampling, priority=PRIORITIES[name] if policy == "priority" else 0
        )
        for i, name in enumerate(PRIORITIES)
    ]
    order: list[str] = []
    results = engine.generate(requests, lambda out: order.append(out.request_id) if out.finished else None)
    return order, {rid: r.token_ids for rid, r in results.items()}


def test_requests_finish_in_order_of_priority(tiny_path: Path, tiny_model: CausalLM) -> None:
    order, outputs = _finish_order(tiny_path, tiny_model, "priority")
    assert order == ["d", "b", "c", "a"]
    fcfs_order, fcfs_outputs = _finish_order(tiny_path, tiny_model, "fcfs")
    assert fcfs_order == ["a", "b", "c", "d"] and fcfs_outputs == outputs


def test_a_priority_needs_the_priority_policy(tiny_path: Path, tiny_model: CausalLM) -> None:
    config = EngineConfig(model_path=tiny_path, page_size=4, max_total_tokens=1024)
    with pytest.raises(InvalidRequestError, match="priority"):
        Engine(config, None, tiny_model).add_request(GenerationRequest("r", [1, 2], priority=1))
    with pytest.raises(ValueError, match="scheduling_policy"):
        replace(config, scheduling_policy="lifo")
