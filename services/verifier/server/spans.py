"""The span of one Generate call, named and attributed after OpenTelemetry's GenAI conventions.

The caller's trace context is read from the call's metadata (W3C headers) and the span is never made
current: a streaming handler is an async generator that may be closed from another context, where
detaching an attached context fails (which is why no server interceptor attaches one). The span's
context reaches the drafters explicitly, as W3C headers in `GenerationRequest.trace_context`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from treespec.verifier.request import GenerationRequest, RequestOutput

SYSTEM = "treespec"
OPERATION = "text_completion"
_W3C = TraceContextTextMapPropagator()


def remote_context(metadata: Sequence[tuple[str, str | bytes]] | None) -> Context:
    """The caller's trace context from gRPC metadata (keys are lower case: traceparent, tracestate)."""
    carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
    return _W3C.extract(carrier)


@contextmanager
def generate_span(tracer: trace.Tracer, model_name: str, parent: Context) -> Iterator[trace.Span]:
    """A span (child of the caller's span) ended on exit, with the error recorded if the body raises
    (a client going away included)."""
    span = tracer.start_span(
        f"{OPERATION} {model_name}",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": OPERATION,
            "gen_ai.system": SYSTEM,
            "gen_ai.request.model": model_name,
        },
    )
    try:
        yield span
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(trace.StatusCode.ERROR, str(exc) or type(exc).__name__)
        raise
    finally:
        span.end()


def trace_context(span: trace.Span) -> dict[str, str]:
    """W3C `traceparent` (and `tracestate`) headers naming `span` as the parent."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def describe_request(span: trace.Span, request: GenerationRequest) -> None:
    sampling = request.sampling
    span.set_attributes(
        {
            "gen_ai.request.max_tokens": sampling.max_new_tokens,
            "gen_ai.request.temperature": sampling.temperature,
            "gen_ai.request.top_p": sampling.top_p,
            "gen_ai.usage.input_tokens": len(request.prompt_ids),
        }
    )
    if sampling.top_k > 0:
        span.set_attribute("gen_ai.request.top_k", sampling.top_k)
    if sampling.seed is not None:
        span.set_attribute("gen_ai.request.seed", sampling.seed)


def describe_result(span: trace.Span, last: RequestOutput, num_output_tokens: int) -> None:
    """Usage, finish reason and the request's speculation figures (attributes, not a span per step)."""
    assert last.finish_reason is not None
    span.set_attributes(
        {
            "gen_ai.usage.output_tokens": num_output_tokens,
            "gen_ai.response.finish_reasons": [last.finish_reason.value],
        }
    )
    stats = last.stats
    if stats is not None:
        span.set_attributes(
            {
                "treespec.speculation.verify_steps": stats.verify_steps,
                "treespec.speculation.drafted_tokens": stats.drafted_tokens,
                "treespec.speculation.accepted_tokens": stats.accepted_tokens,
                "treespec.speculation.acceptance_length": stats.acceptance_length,
            }
        )
