"""vLLM's and SGLang's metric names on the gateway's /metrics, against a real verifier drafting random
trees (conftest.py), driven with the official `openai` client: the counts match what the responses
reported, the engine's gauges follow the verifier, and a scrape still answers without one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.services.gateway_stack import HI, KEY, MODEL, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(http: httpx.Client) -> Samples:
    response = http.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({"model_name": MODEL, **labels}.items())))]


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


def _sum(samples: Samples, name: str) -> float:
    return sum(value for (sample, _), value in samples.items() if sample == name)


def _meta(response: Any) -> dict[str, Any]:
    return dict((response.model_extra or {})["meta_info"])


def test_counts_match_the_responses(client: openai.OpenAI, http: httpx.Client) -> None:
    before = _scrape(http)
    chat = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=12, temperature=0, n=2)
    text = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=9, temperature=0)
    after = _scrape(http)
    usages = [chat.usage, text.usage]
    assert all(usage is not None for usage in usages)
    generated = sum(u.completion_tokens for u in usages if u is not None)
    prompted = sum(u.prompt_tokens for u in usages if u is not None)
    for name in ("vllm:generation_tokens_total", "sglang:generation_tokens_total"):
        assert _delta(before, after, name) == generated
    for name in ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "vllm:prefix_cache_queries_total"):
        assert _delta(before, after, name) == prompted
    reasons = [c.finish_reason for c in chat.choices] + [c.finish_reason for c in text.choices]
    for reason in ("stop", "length"):
        expected = reasons.count(reason)
        assert _delta(before, after, "vllm:request_success_total", finished_reason=reason) == expected
    assert _delta(before, after, "vllm:e2e_request_latency_seconds_count") == 2
    assert _delta(before, after, "sglang:time_to_first_token_seconds_count") == 2
    assert _delta(before, after, "vllm:request_params_n_sum") == 3  # n=2, then n=1
    assert _delta(before, after, "vllm:request_params_max_tokens_sum") == 12 + 9
    assert _delta(before, after, "vllm:request_generation_tokens_sum") == generated

    # Speculation: the figures the responses reported, under vLLM's names.
    meta = [_meta(chat), _meta(text)]
    drafted = sum(m["spec_drafted_tokens"] for m in meta)
    accepted = sum(m["spec_accepted_tokens"] for m in meta)
    assert drafted > 0
    assert _delta(before, after, "vllm:spec_decode_num_draft_tokens_total") == drafted
    assert _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total") == accepted
    per_position = _sum(after, "vllm:spec_decode_num_accepted_tokens_per_pos_total") - _sum(
        before, "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    )
    assert per_position == accepted
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    assert 0 < drafts <= sum(m["spec_verify_steps"] for m in meta)
    assert 1.0 <= _value(after, "sglang:spec_accept_length") <= 1.0 + drafted
    assert 0.0 <= _value(after, "sglang:cache_hit_rate") <= 1.0


def test_engine_gauges_follow_the_verifier(url: str, http: httpx.Client) -> None:
    idle = _scrape(http)
    assert _value(idle, "vllm:num_requests_running") == _value(idle, "sglang:num_running_reqs") == 0
    assert _value(idle, "vllm:num_requests_waiting") == 0
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    with (
        httpx.Client(base_url=url, headers=headers, timeout=60) as streamer,
        streamer.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        busy = _scrape(http)
        gaps = _value(busy, "vllm:inter_token_latency_seconds_count")
    assert _value(busy, "vllm:num_requests_running") == _value(busy, "sglang:num_running_reqs") == 1
    assert 0.0 < _value(busy, "vllm:kv_cache_usage_perc") == _value(busy, "sglang:token_usage") <= 1.0
    # The client left mid-stream: an aborted request, its outputs' gaps counted as they came.
    after = _wait_idle(http)
    assert _delta(idle, after, "vllm:request_success_total", finished_reason="abort") == 1
    assert gaps > _value(idle, "vllm:inter_token_latency_seconds_count")
    assert _value(after, "vllm:kv_cache_usage_perc") < _value(busy, "vllm:kv_cache_usage_perc")


def _wait_idle(http: httpx.Client, timeout_s: float = 20.0) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = _scrape(http)
        if _value(samples, "vllm:num_requests_running") == 0 or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


@pytest.fixture
def lonely_gateway(model_path: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    service = start_gateway(model_path, free_port(), port, tmp_path)  # no verifier listens there
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        service.stop()


def test_a_scrape_answers_without_a_verifier(lonely_gateway: str) -> None:
    """The counts come; the engine's gauges, which nothing answered for, are left out."""
    with httpx.Client(base_url=lonely_gateway, timeout=30) as http:
        samples = _scrape(http)
    assert _value(samples, "vllm:prompt_tokens_total") == 0
    assert _value(samples, "vllm:request_success_total", finished_reason="stop") == 0
    names = {name for name, _ in samples}
    assert not names & {"vllm:num_requests_running", "sglang:num_queue_reqs", "vllm:kv_cache_usage_perc"}
