"""The gateway's Prometheus metrics, in the app's own registry (exposed at /metrics).

Per request: status by endpoint, time to first token, time per output token, end-to-end latency,
tokens in and out, and a predicted output's tokens the reply used or not; per choice: the
speculation figures the verifier reported. The same, and the engine's state, under vLLM's and
SGLang's names too (compat_metrics.py).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from treespec.gateway.compat_metrics import CompatMetrics
from treespec.gateway.generation import SpecFigures
from treespec.gateway.prediction import CompletionTokensDetails
from treespec.gateway.request_record import FinishedRequest
from treespec.v1 import verifier_pb2

PREFIX = "treespec_gateway"
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
_TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.0, 2.5)
_ACCEPT_BUCKETS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 12.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        self.registry = registry
        self.compat = CompatMetrics(registry, model_name)
        self.requests = Counter(
            f"{PREFIX}_requests",
            "HTTP requests by endpoint and status",
            ["endpoint", "status"],
            registry=registry,
        )
        self.time_to_first_token = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Time from a request's arrival to its first output",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.time_per_output_token = Histogram(
            f"{PREFIX}_time_per_output_token_seconds",
            "Mean time per output token after the first, per request",
            buckets=_TPOT_BUCKETS,
            registry=registry,
        )
        self.e2e_latency = Histogram(
            f"{PREFIX}_e2e_request_latency_seconds",
            "Time from a generation request's arrival to its last output",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(f"{PREFIX}_prompt_tokens", "Prompt tokens", registry=registry)
        self.completion_tokens = Counter(f"{PREFIX}_completion_tokens", "Generated tokens", registry=registry)
        self.spec_acceptance_length = Histogram(
            f"{PREFIX}_spec_acceptance_length",
            "Tokens committed per verify step (bonus included), per choice",
            buckets=_ACCEPT_BUCKETS,
            registry=registry,
        )
        self.spec_verify_steps = Counter(f"{PREFIX}_spec_verify_steps", "Verify steps", registry=registry)
        self.spec_accepted_tokens = Counter(
            f"{PREFIX}_spec_accepted_tokens", "Draft tokens accepted", registry=registry
        )
        self.spec_drafted_tokens = Counter(
            f"{PREFIX}_spec_drafted_tokens", "Draft tokens proposed", registry=registry
        )
        self.prediction_tokens = Counter(
            f"{PREFIX}_prediction_tokens",
            "Predicted outputs' tokens (OpenAI's prediction), by whether the reply used them",
            ["outcome"],
            registry=registry,
        )

    def observe_spec(self, spec: SpecFigures) -> None:
        if spec.verify_steps:
            self.spec_acceptance_length.observe(spec.acceptance_length)
        self.spec_verify_steps.inc(spec.verify_steps)
        self.spec_accepted_tokens.inc(spec.accepted_tokens)
        self.spec_drafted_tokens.inc(spec.drafted_tokens)
        self.compat.speculation(spec)

    def request_finished(self, request: FinishedRequest, details: CompletionTokensDetails | None) -> None:
        """A request that ended with its outputs; `details`: its predicted output's, if it had one."""
        self.e2e_latency.observe(request.e2e_s)
        self.prompt_tokens.inc(request.prompt_tokens)
        self.completion_tokens.inc(request.completion_tokens)
        if details is not None:
            self.prediction_tokens.labels("accepted").inc(details.accepted_prediction_tokens)
            self.prediction_tokens.labels("rejected").inc(details.rejected_prediction_tokens)
        if request.ttft_s is not None:
            self.time_to_first_token.observe(request.ttft_s)
        if request.tpot_s is not None:
            self.time_per_output_token.observe(request.tpot_s)
        self.compat.request_finished(request)

    def render(self, engine: verifier_pb2.EngineStats | None) -> bytes:
        """The metrics' text, with the engine's state (None: no verifier answered) as of now."""
        self.compat.scraped(engine)
        return generate_latest(self.registry)


class RequestCounter:
    """ASGI middleware: counts every HTTP response by endpoint and status (401s and 413s included)."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = path if path in ENDPOINTS else "other"

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(endpoint, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
