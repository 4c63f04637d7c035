"""vLLM's and SGLang's metric names: each a series of its own, fed from what the gateway observes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from treespec.gateway.compat_metrics import DIALECTS, CompatMetrics
from treespec.gateway.generation import SpecFigures
from treespec.gateway.request_record import FinishedRequest
from treespec.v1 import verifier_pb2

MODEL = "m"


def _metrics() -> tuple[CompatMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return CompatMetrics(registry, MODEL), registry


def _get(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"model_name": MODEL, **labels})


def test_names_are_unique_and_in_their_dialects_namespace() -> None:
    for dialect, families in DIALECTS.items():
        names = [family.name for family in families]
        assert len(set(names)) == len(names)
        assert all(name.startswith(f"{dialect}:") for name in names)


def test_every_counter_counts_its_own_figure() -> None:
    metrics, registry = _metrics()
    metrics.request_finished(
        FinishedRequest(
            e2e_s=2.0,
            ttft_s=0.5,
            tpot_s=0.1,
            prompt_tokens=100,
            completion_tokens=16,
            cached_tokens=64,
            finish_reasons=("stop", "length", "length"),
            choices=3,
            max_tokens=32,
        )
    )
    assert _get(registry, "vllm:prompt_tokens_total") == 100
    assert _get(registry, "vllm:generation_tokens_total") == 16
    assert _get(registry, "vllm:prefix_cache_queries_total") == 100
    assert _get(registry, "vllm:prefix_cache_hits_total") == 64
    assert _get(registry, "sglang:cached_tokens_total") == 64
    assert _get(registry, "vllm:request_success_total", finished_reason="stop") == 1
    assert _get(registry, "vllm:request_success_total", finished_reason="length") == 2
    assert _get(registry, "vllm:request_success_total", finished_reason="abort") == 0
    assert _get(registry, "vllm:time_to_first_token_seconds_sum") == 0.5
    assert _get(registry, "vllm:e2e_request_latency_seconds_sum") == 2.0
    assert _get(registry, "vllm:request_time_per_output_token_seconds_sum") == 0.1
    assert _get(registry, "vllm:time_per_output_token_seconds_sum") == 0.1  # the older name too
    assert _get(registry, "vllm:request_params_n_sum") == 3
    assert _get(registry, "vllm:request_params_max_tokens_sum") == 32
    assert _get(registry, "vllm:request_prompt_tokens_sum") == 100
    assert _get(registry, "vllm:spec_decode_num_drafts_total") == 0  # there from the start
    metrics.scraped(None)
    assert _get(registry, "sglang:cache_hit_rate") == 0.64


def test_speculation_per_draft_position() -> None:
    metrics, registry = _metrics()
    # Ten verify steps: eight drafted (three trees reached depth 3), six accepted at depth 1 ...
    metrics.speculation(SpecFigures(10, 30, 9, 19, (8, 5, 3), (6, 2, 1)))
    assert _get(registry, "vllm:spec_decode_num_drafts_total") == 8
    assert _get(registry, "vllm:spec_decode_num_draft_tokens_total") == 30
    assert _get(registry, "vllm:spec_decode_num_accepted_tokens_total") == 9
    per_position = [
        _get(registry, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
        for p in range(3)
    ]
    assert per_position == [6, 2, 1]
    metrics.scraped(None)
    assert _get(registry, "sglang:spec_accept_length") == 1.9


def test_engine_gauges_come_from_the_scrape_and_go_without_a_verifier() -> None:
    metrics, registry = _metrics()
    engine = verifier_pb2.EngineStats(
        running_requests=3, waiting_requests=2, kv_blocks_total=200, kv_blocks_free=150
    )
    metrics.scraped(engine)
    assert _get(registry, "vllm:num_requests_running") == _get(registry, "sglang:num_running_reqs") == 3
    assert _get(registry, "vllm:num_requests_waiting") == _get(registry, "sglang:num_queue_reqs") == 2
    assert _get(registry, "vllm:kv_cache_usage_perc") == _get(registry, "sglang:token_usage") == 0.25
    metrics.scraped(None)
    assert _get(registry, "vllm:num_requests_running") is None
    assert _get(registry, "sglang:token_usage") is None


def test_a_failed_request_counts_each_choice_with_its_reason() -> None:
    metrics, registry = _metrics()
    metrics.request_failed(2, "abort")
    metrics.request_failed(1, "error")
    assert _get(registry, "vllm:request_success_total", finished_reason="abort") == 2
    assert _get(registry, "vllm:request_success_total", finished_reason="error") == 1
    assert _get(registry, "sglang:num_requests_total", finished_reason="abort") == 2
    assert _get(registry, "vllm:generation_tokens_total") == 0


def test_output_gaps_are_inter_token_latency() -> None:
    metrics, registry = _metrics()
    for gap in (0.02, 0.03):
        metrics.output_gap(gap)
    assert _get(registry, "vllm:inter_token_latency_seconds_count") == 2
    assert _get(registry, "sglang:inter_token_latency_seconds_count") == 2
