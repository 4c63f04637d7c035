"""One generation request seen from outside: its GenAI span and its latency and speculation metrics.

The span ("chat {model}" or "text_completion {model}") follows the OpenTelemetry GenAI semantic
conventions; the speculation figures are attributes on it (not a span per token). The gRPC calls
to the verifier are its children, so the trace continues there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from treespec.gateway.generation import ChoiceEnd, Event
from treespec.gateway.metrics import GatewayMetrics
from treespec.gateway.outcome import Outcome
from treespec.gateway.request_log import RequestLog
from treespec.gateway.request_record import FinishedRequest
from treespec.gateway.schemas import SamplingFields

GEN_AI_SYSTEM = "treespec"


class Observation:
    def __init__(
        self,
        metrics: GatewayMetrics,
        tracer: Tracer,
        operation: str,
        body: SamplingFields,
        token_limit: int | None,
        response_id: str,
        request_log: RequestLog | None = None,
    ) -> None:
        self._metrics = metrics
        self._response_id = response_id
        self._request_log = request_log
        self._start = time.perf_counter()
        self._first_output: float | None = None
        self._last_output: dict[int, float] = {}  # per choice: when its latest output came
        self._choices = body.n
        self._token_limit = token_limit
        self.span: Span = tracer.start_span(
            f"{operation} {body.model}",
            kind=trace.SpanKind.INTERNAL,
            attributes=_request_attributes(operation, body, token_limit, response_id),
        )

    @property
    def trace_context(self) -> Context:
        return trace.set_span_in_context(self.span)

    async def observe(self, events: AsyncIterator[Event], outcome: Outcome) -> AsyncGenerator[Event, None]:
        """Pass `events` through, gathering them into `outcome` and recording what they show."""
        try:
            async for event in events:
                self._output(event)
                outcome.add(event)
                if isinstance(event, ChoiceEnd) and event.spec is not None:
                    self._metrics.observe_spec(event.spec)
                yield event
        except BaseException as exc:
            self._failed(exc, outcome.num_choices)
            raise
        else:
            if outcome.prediction:  # the only work settling does, off the loop
                await asyncio.to_thread(outcome.settle)
            self._succeeded(outcome)
        finally:
            self.span.end()

    def _output(self, event: Event) -> None:
        """When an output came: the first's, and the gap since the choice's previous one."""
        now = time.perf_counter()
        if self._first_output is None:
            self._first_output = now
        if event.token_ids:
            previous = self._last_output.get(event.index)
            if previous is not None:
                self._metrics.compat.output_gap(now - previous)
            self._last_output[event.index] = now

    def _succeeded(self, outcome: Outcome) -> None:
        now = time.perf_counter()
        first = self._first_output
        request = FinishedRequest(
            e2e_s=now - self._start,
            ttft_s=None if first is None else first - self._start,
            tpot_s=(
                (now - first) / (outcome.completion_tokens - 1)
                if first is not None and outcome.completion_tokens > 1
                else None
            ),
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            cached_tokens=outcome.cached_tokens,
            finish_reasons=tuple(outcome.finish_reasons),
            choices=self._choices,
            max_tokens=self._token_limit,
        )
        self._metrics.request_finished(request, outcome.usage.completion_tokens_details)
        self.span.set_attributes(_outcome_attributes(outcome))
        if self._request_log is not None:
            self._request_log.ended(self._response_id, now - self._start, outcome)

    def _failed(self, exc: BaseException, choices: int) -> None:
        left = isinstance(exc, (asyncio.CancelledError, GeneratorExit))
        self._metrics.compat.request_failed(choices, "abort" if left else "error")
        error_type = type(exc).__name__
        if isinstance(exc, Exception):
            self.span.record_exception(exc)
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(Status(StatusCode.ERROR, str(exc) or error_type))
        if self._request_log is not None:
            elapsed = time.perf_counter() - self._start
            self._request_log.ended(self._response_id, elapsed, None, str(exc) or error_type)


def _request_attributes(
    operation: str, body: SamplingFields, token_limit: int | None, response_id: str
) -> dict[str, str | int | float | bool]:
    attributes: dict[str, str | int | float | bool] = {
        "gen_ai.operation.name": operation,
        "gen_ai.system": GEN_AI_SYSTEM,
        "gen_ai.provider.name": GEN_AI_SYSTEM,
        "gen_ai.request.model": body.model,
        "gen_ai.response.model": body.model,
        "gen_ai.response.id": response_id,
        "gen_ai.request.choice.count": body.n,
        "gen_ai.request.stream": body.stream,
    }
    optional = {
        "gen_ai.request.max_tokens": token_limit,
        "gen_ai.request.temperature": body.temperature,
        "gen_ai.request.top_p": body.top_p,
        "gen_ai.request.top_k": body.top_k,
        "gen_ai.request.seed": body.seed,
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})
    return attributes


def _outcome_attributes(outcome: Outcome) -> dict[str, str | int | float | list[str]]:
    attributes: dict[str, str | int | float | list[str]] = {
        "gen_ai.usage.input_tokens": outcome.prompt_tokens,
        "gen_ai.usage.output_tokens": outcome.completion_tokens,
        "gen_ai.response.finish_reasons": outcome.finish_reasons,
    }
    spec = outcome.spec
    if spec is not None:
        attributes.update(
            {
                "treespec.spec.verify_steps": spec.verify_steps,
                "treespec.spec.accept_length": spec.acceptance_length,
                "treespec.spec.accepted_tokens": spec.accepted_tokens,
                "treespec.spec.drafted_tokens": spec.drafted_tokens,
            }
        )
    return attributes
