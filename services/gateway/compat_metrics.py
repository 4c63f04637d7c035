"""vLLM's and SGLang's Prometheus metric names, beside treespec's own, on the gateway's /metrics.

Dashboards, autoscalers and load-aware routers built for those servers read these names (vLLM's
Grafana dashboard, the Gateway API inference extension's `vllm:num_requests_waiting` and
`vllm:kv_cache_usage_perc`, SGLang's `sglang:num_queue_reqs`, benchmark scripts reading
`vllm:spec_decode_num_accepted_tokens_total`), so they work against treespec unchanged.

What each metric measures is a `Signal`; a dialect names the signals it has. Requests, tokens,
latencies and speculation are counted here, as the gateway sees them (so counters stay consistent
across verifier replicas); the engine's state (running, waiting, KV cache usage) is read from the
verifier at each scrape, the replica the call reaches when there are several. Every series carries
the `model_name` label, the served model's (first) name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from treespec.gateway.generation import SpecFigures
from treespec.gateway.request_record import FinishedRequest
from treespec.v1 import verifier_pb2


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


_LATENCY = (
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
)
_GAP = (
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
_TOKENS = (*(float(m * 10**e) for e in range(6) for m in (1, 2, 5)), 1_000_000.0)
_CHOICES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


class Signal(enum.Enum):
    """What a metric measures."""

    RUNNING = enum.auto()  # requests the verifier runs
    WAITING = enum.auto()  # ... and queues
    KV_USAGE = enum.auto()  # the verifier's KV blocks in use, 0 to 1
    CACHE_HIT_RATE = enum.auto()  # prompt tokens found in the prefix cache, since start
    ACCEPT_LENGTH = enum.auto()  # tokens per verify step, since start
    PROMPT_TOKENS = enum.auto()
    GENERATION_TOKENS = enum.auto()
    QUERIED_TOKENS = enum.auto()  # prompt tokens looked up in the prefix cache
    CACHED_TOKENS = enum.auto()  # ... and found there
    FINISHED = enum.auto()  # choices ended, by finish reason
    TTFT = enum.auto()
    ITL = enum.auto()  # the time between a choice's consecutive outputs
    TPOT = enum.auto()  # a request's mean time per output token after the first
    E2E = enum.auto()
    REQUEST_PROMPT_TOKENS = enum.auto()
    REQUEST_GENERATION_TOKENS = enum.auto()
    PARAMS_N = enum.auto()
    PARAMS_MAX_TOKENS = enum.auto()
    DRAFTS = enum.auto()  # verify steps that had a draft
    DRAFT_TOKENS = enum.auto()
    ACCEPTED_TOKENS = enum.auto()
    ACCEPTED_AT_POSITION = enum.auto()  # accepted at tree depth position + 1

    @property
    def shape(self) -> Shape:
        return _SHAPES.get(self, Shape(Kind.COUNTER))


@dataclass(frozen=True)
class Shape:
    """A signal's metric type, its labels besides `model_name`, and a histogram's buckets."""

    kind: Kind
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


_SHAPES = {  # the rest are counters without labels of their own
    **dict.fromkeys(
        (Signal.RUNNING, Signal.WAITING, Signal.KV_USAGE, Signal.CACHE_HIT_RATE, Signal.ACCEPT_LENGTH),
        Shape(Kind.GAUGE),
    ),
    Signal.FINISHED: Shape(Kind.COUNTER, ("finished_reason",)),
    Signal.ACCEPTED_AT_POSITION: Shape(Kind.COUNTER, ("position",)),
    Signal.TTFT: Shape(Kind.HISTOGRAM, buckets=_LATENCY),
    Signal.E2E: Shape(Kind.HISTOGRAM, buckets=_LATENCY),
    Signal.ITL: Shape(Kind.HISTOGRAM, buckets=_GAP),
    Signal.TPOT: Shape(Kind.HISTOGRAM, buckets=_GAP),
    Signal.REQUEST_PROMPT_TOKENS: Shape(Kind.HISTOGRAM, buckets=_TOKENS),
    Signal.REQUEST_GENERATION_TOKENS: Shape(Kind.HISTOGRAM, buckets=_TOKENS),
    Signal.PARAMS_N: Shape(Kind.HISTOGRAM, buckets=_CHOICES),
    Signal.PARAMS_MAX_TOKENS: Shape(Kind.HISTOGRAM, buckets=_TOKENS),
}


@dataclass(frozen=True)
class Family:
    """One metric of a dialect: the signal it shows, its name and help text."""

    signal: Signal
    name: str
    help: str


VLLM = (
    Family(Signal.RUNNING, "vllm:num_requests_running", "Number of requests in model execution batches."),
    Family(Signal.WAITING, "vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    Family(Signal.KV_USAGE, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
    Family(Signal.PROMPT_TOKENS, "vllm:prompt_tokens", "Number of prefill tokens processed."),
    Family(Signal.GENERATION_TOKENS, "vllm:generation_tokens", "Number of generation tokens processed."),
    Family(Signal.QUERIED_TOKENS, "vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens."),
    Family(Signal.CACHED_TOKENS, "vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens."),
    Family(Signal.FINISHED, "vllm:request_success", "Count of processed requests, by finish reason."),
    Family(Signal.TTFT, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    Family(Signal.ITL, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    Family(
        Signal.TPOT,
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time per output token in seconds, per request.",
    ),
    Family(
        Signal.TPOT,
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds (older name of the above).",
    ),
    Family(Signal.E2E, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    Family(Signal.REQUEST_PROMPT_TOKENS, "vllm:request_prompt_tokens", "Number of prefill tokens processed."),
    Family(
        Signal.REQUEST_GENERATION_TOKENS,
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
    ),
    Family(Signal.PARAMS_N, "vllm:request_params_n", "Histogram of the n request parameter."),
    Family(
        Signal.PARAMS_MAX_TOKENS,
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
    ),
    Family(Signal.DRAFTS, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
    Family(Signal.DRAFT_TOKENS, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
    Family(Signal.ACCEPTED_TOKENS, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
    Family(
        Signal.ACCEPTED_AT_POSITION,
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position (tree depth - 1).",
    ),
)

SGLANG = (
    Family(Signal.RUNNING, "sglang:num_running_reqs", "The number of running requests."),
    Family(Signal.WAITING, "sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    Family(Signal.KV_USAGE, "sglang:token_usage", "The token usage."),
    Family(Signal.CACHE_HIT_RATE, "sglang:cache_hit_rate", "The prefix cache hit rate."),
    Family(
        Signal.ACCEPT_LENGTH,
        "sglang:spec_accept_length",
        "The average acceptance length of speculative decoding.",
    ),
    Family(Signal.PROMPT_TOKENS, "sglang:prompt_tokens", "Number of prefill tokens processed."),
    Family(Signal.GENERATION_TOKENS, "sglang:generation_tokens", "Number of generation tokens processed."),
    Family(Signal.CACHED_TOKENS, "sglang:cached_tokens", "Number of cached prompt tokens."),
    Family(Signal.FINISHED, "sglang:num_requests", "Number of requests processed."),
    Family(Signal.TTFT, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    Family(Signal.ITL, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    Family(
        Signal.E2E, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"
    ),
)

DIALECTS: Mapping[str, Sequence[Family]] = {"vllm": VLLM, "sglang": SGLANG}

Metric = Counter | Gauge | Histogram


class CompatMetrics:
    """The dialects' metrics in `registry`, fed with what the gateway observes."""

    def __init__(
        self, registry: CollectorRegistry, model_name: str, dialects: Sequence[str] = tuple(DIALECTS)
    ) -> None:
        self._model_name = model_name
        self._metrics: dict[Signal, list[Metric]] = {}
        for dialect in dialects:
            for family in DIALECTS[dialect]:
                self._metrics.setdefault(family.signal, []).append(_metric(family, registry))
        self._zeros()
        self._prompt_tokens = self._cached_tokens = 0  # since start: the hit rate
        self._verify_steps = self._committed_tokens = 0  # ... and the acceptance length

    def request_finished(self, request: FinishedRequest) -> None:
        self._add(Signal.PROMPT_TOKENS, request.prompt_tokens)
        self._add(Signal.GENERATION_TOKENS, request.completion_tokens)
        self._add(Signal.QUERIED_TOKENS, request.prompt_tokens)
        self._add(Signal.CACHED_TOKENS, request.cached_tokens)
        self._prompt_tokens += request.prompt_tokens
        self._cached_tokens += request.cached_tokens
        for reason in request.finish_reasons:
            self._add(Signal.FINISHED, 1, finished_reason=reason)
        self._observe(Signal.E2E, request.e2e_s)
        if request.ttft_s is not None:
            self._observe(Signal.TTFT, request.ttft_s)
        if request.tpot_s is not None:
            self._observe(Signal.TPOT, request.tpot_s)
        self._observe(Signal.REQUEST_PROMPT_TOKENS, request.prompt_tokens)
        self._observe(Signal.REQUEST_GENERATION_TOKENS, request.completion_tokens)
        self._observe(Signal.PARAMS_N, request.choices)
        if request.max_tokens is not None:
            self._observe(Signal.PARAMS_MAX_TOKENS, request.max_tokens)

    def request_failed(self, choices: int, reason: str) -> None:
        """A request that ended without its outputs: `reason` is "abort" (the client left) or "error"."""
        self._add(Signal.FINISHED, choices, finished_reason=reason)

    def output_gap(self, seconds: float) -> None:
        self._observe(Signal.ITL, seconds)

    def speculation(self, spec: SpecFigures) -> None:
        """One choice's speculation figures."""
        self._add(Signal.DRAFTS, spec.drafting_steps)
        self._add(Signal.DRAFT_TOKENS, spec.drafted_tokens)
        self._add(Signal.ACCEPTED_TOKENS, spec.accepted_tokens)
        for position, accepted in enumerate(spec.accepted_by_depth):
            self._add(Signal.ACCEPTED_AT_POSITION, accepted, position=str(position))
        self._verify_steps += spec.verify_steps
        self._committed_tokens += spec.committed_tokens

    def scraped(self, engine: verifier_pb2.EngineStats | None) -> None:
        """Before a scrape: the engine's state (None when no verifier answered: those gauges go) and
        the rates since start."""
        if self._prompt_tokens:
            self._set(Signal.CACHE_HIT_RATE, self._cached_tokens / self._prompt_tokens)
        if self._verify_steps:
            self._set(Signal.ACCEPT_LENGTH, self._committed_tokens / self._verify_steps)
        if engine is None:
            for signal in (Signal.RUNNING, Signal.WAITING, Signal.KV_USAGE):
                for metric in self._metrics.get(signal, ()):
                    metric.clear()
            return
        self._set(Signal.RUNNING, engine.running_requests)
        self._set(Signal.WAITING, engine.waiting_requests)
        total = engine.kv_blocks_total
        self._set(Signal.KV_USAGE, (total - engine.kv_blocks_free) / total if total else 0.0)

    def _zeros(self) -> None:
        """The series a scraper expects from the start, at zero (as vLLM shows them)."""
        for signal, metrics in self._metrics.items():
            if signal.shape.kind is Kind.GAUGE:
                continue
            for metric in metrics:
                if not signal.shape.labels:
                    self._series(metric, {})
                elif signal is Signal.FINISHED:
                    for reason in ("stop", "length", "abort"):
                        self._series(metric, {"finished_reason": reason})

    def _add(self, signal: Signal, amount: float, **labels: str) -> None:
        if amount:
            for metric in self._metrics.get(signal, ()):
                self._series(metric, labels).inc(amount)  # type: ignore[union-attr]

    def _observe(self, signal: Signal, value: float) -> None:
        for metric in self._metrics.get(signal, ()):
            self._series(metric, {}).observe(value)  # type: ignore[union-attr]

    def _set(self, signal: Signal, value: float) -> None:
        for metric in self._metrics.get(signal, ()):
            self._series(metric, {}).set(value)  # type: ignore[union-attr]

    def _series(self, metric: Metric, labels: Mapping[str, str]) -> Metric:
        return metric.labels(model_name=self._model_name, **labels)


def _metric(family: Family, registry: CollectorRegistry) -> Metric:
    shape = family.signal.shape
    labels = ("model_name", *shape.labels)
    if shape.kind is Kind.COUNTER:
        return Counter(family.name, family.help, labels, registry=registry)
    if shape.kind is Kind.GAUGE:
        return Gauge(family.name, family.help, labels, registry=registry)
    return Histogram(family.name, family.help, labels, buckets=shape.buckets, registry=registry)
