"""OpenTelemetry set-up from the standard OTEL_* variables; nothing is exported unless asked.

OTEL_TRACES_EXPORTER: "otlp" (OTLP over gRPC or HTTP per OTEL_EXPORTER_OTLP_PROTOCOL, endpoint from
OTEL_EXPORTER_OTLP_ENDPOINT), "console", or "none"/unset (spans are still created, for context
propagation, but go nowhere). OTEL_SERVICE_NAME overrides the service's own name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

TRACER_NAME = "treespec"


def build_tracer_provider(
    service_name: str, environ: Mapping[str, str] = os.environ, processors: tuple[SpanProcessor, ...] = ()
) -> TracerProvider:
    """A provider for this service; `processors` lets tests attach an in-memory exporter."""
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    exporter = _exporter(environ)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def install_tracer_provider(provider: TracerProvider) -> None:
    """Make `provider` the process's provider (instrumentations look it up there)."""
    trace.set_tracer_provider(provider)


def _exporter(environ: Mapping[str, str]) -> SpanExporter | None:
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    for name in names:
        if name == "console":
            return ConsoleSpanExporter()
        if name == "otlp":
            protocol = environ.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            )
            if protocol.startswith("http"):
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter as HttpExporter,
                )

                return HttpExporter()
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()
    return None
