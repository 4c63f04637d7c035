"""One trace per request across gateway, verifier and drafter; /metrics shows acceptance figures.

The three services run in this process (each on its own event loop and port, talking over real
gRPC and HTTP on loopback) so that one in-memory exporter sees every service's spans; each has its
own TracerProvider, hence its own service.name.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.drafter.server.app import DrafterServer
from treespec.gateway.app import create_app
from treespec.gateway.config import GatewayConfig
from treespec.shared.launcher.health import http_ok
from treespec.shared.launcher.ports import free_port
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.telemetry.tracing import build_tracer_provider
from treespec.verifier.config import EngineConfig
from treespec.verifier.server.app import VerifierServer, VerifierServerConfig
from treespec.verifier.server.drafters import DrafterSpec

pytestmark = pytest.mark.slow


@dataclass
class InProcessStack:
    exporter: InMemorySpanExporter
    providers: dict[str, TracerProvider]
    gateway_url: str

    def spans(self) -> list[ReadableSpan]:
        for provider in self.providers.values():
            provider.force_flush()
        return list(self.exporter.get_finished_spans())


def provider(service: str, exporter: InMemorySpanExporter) -> TracerProvider:
    return build_tracer_provider(service, environ={}, processors=(SimpleSpanProcessor(exporter),))


@pytest.fixture(scope="module")
def stack(smollm_path: Path, smollm: CausalLM) -> Iterator[InProcessStack]:
    exporter = InMemorySpanExporter()
    providers = {name: provider(name, exporter) for name in ("gateway", "verifier", "drafter")}
    drafter = DrafterServer(
        RandomTreeDrafter(smollm.config.vocab_size),
        "random",
        tracer=providers["drafter"].get_tracer("treespec"),
    )
    drafter_port = drafter.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    verifier = VerifierServer(
        VerifierServerConfig(
            EngineConfig(model_path=smollm_path, max_total_tokens=4096),
            port=0,
            drafter=DrafterSpec(remote_targets=(f"127.0.0.1:{drafter_port}",), deadline_s=0.5),
        ),
        model=smollm,
        tracer_provider=providers["verifier"],
    )
    verifier_port = asyncio.run_coroutine_threadsafe(verifier.start(), loop).result(120)
    gateway_port = free_port()
    config = GatewayConfig(
        verifier_addresses=(f"127.0.0.1:{verifier_port}",), model_path=smollm_path, port=gateway_port
    )
    app = create_app(config, tracer_provider=providers["gateway"], registry=CollectorRegistry())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=gateway_port, log_level="warning"))
    gateway_thread = threading.Thread(target=server.run, daemon=True)
    gateway_thread.start()
    url = f"http://127.0.0.1:{gateway_port}"
    deadline = time.monotonic() + 60
    while not http_ok(f"{url}/health") and time.monotonic() < deadline:
        time.sleep(0.2)
    yield InProcessStack(exporter, providers, url)
    server.should_exit = True
    gateway_thread.join(10)
    asyncio.run_coroutine_threadsafe(verifier.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    drafter.stop()


def service_of(span: ReadableSpan) -> str:
    return str(span.resource.attributes.get("service.name"))


def services_in_reply_trace(spans: list[ReadableSpan]) -> set[str]:
    """The services with spans in the trace of the gateway's GenAI span (none yet: empty)."""
    ops = [
        s
        for s in spans
        if service_of(s) == "gateway" and s.attributes and "gen_ai.operation.name" in s.attributes
    ]
    if not ops:
        return set()
    return {service_of(s) for s in spans if s.context.trace_id == ops[0].context.trace_id}


def test_one_trace_spans_gateway_verifier_and_drafter(stack: InProcessStack) -> None:
    client = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    stack.exporter.clear()
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0
    )
    assert reply.usage is not None
    # Spans end after the reply: the drafter's when the verifier closes the request, the verifier's
    # after that; wait (a while at most) until the reply's trace holds every service's.
    everyone = {"gateway", "verifier", "drafter"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and services_in_reply_trace(stack.spans()) != everyone:
        time.sleep(0.1)
    spans = stack.spans()
    gen_ai = [s for s in spans if s.attributes and "gen_ai.operation.name" in s.attributes]
    gateway_op = next(s for s in gen_ai if service_of(s) == "gateway")
    trace_id = gateway_op.context.trace_id
    by_service = services_in_reply_trace(spans)
    assert by_service == everyone, by_service
    verifier_op = next(s for s in gen_ai if service_of(s) == "verifier" and s.context.trace_id == trace_id)
    attributes = dict(verifier_op.attributes or {})
    assert attributes["gen_ai.request.model"] == model
    assert attributes["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens
    assert attributes["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert any(k.startswith("treespec.speculation.") for k in attributes)
    assert dict(gateway_op.attributes or {})["gen_ai.operation.name"] == "chat"
    drafter_spans = [s for s in spans if service_of(s) == "drafter" and s.context.trace_id == trace_id]
    assert len(drafter_spans) == 1, "one drafting span per request, not one per step"


def test_metrics_expose_acceptance_figures(stack: InProcessStack) -> None:
    client = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    text = httpx.get(f"{stack.gateway_url}/metrics").text
    assert "acceptance" in text and "time_to_first_token" in text
    assert any(line.startswith("treespec_gateway_requests_total") for line in text.splitlines())
