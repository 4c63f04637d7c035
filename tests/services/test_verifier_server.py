"""The verifier's gRPC server, in-process and as `treespec verifier`, over real channels on 127.0.0.1."""

from __future__ import annotations

import asyncio
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.launcher.ports import free_port
from treespec.shared.model.causal_lm import CausalLM
from treespec.v1 import verifier_pb2 as pb
from treespec.v1 import verifier_pb2_grpc
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, RequestOutput, SamplingParams, SpeculationParams
from treespec.verifier.server import app as verifier_app
from treespec.verifier.server.app import VerifierServer, VerifierServerConfig
from treespec.verifier.server.drafters import DrafterSpec

VOCAB = 97  # the tiny checkpoint's
PROMPTS = [[(7 * i + 3 * j) % VOCAB for j in range(5 + 3 * i)] for i in range(6)]
MAX_NEW = 16


def engine_config(path: Path) -> EngineConfig:
    return EngineConfig(model_path=path, page_size=4, max_total_tokens=2048)


def greedy_message(rid: str, prompt: Sequence[int], n: int = MAX_NEW) -> pb.GenerateRequest:
    sampling = pb.SamplingParams(temperature=0.0, max_new_tokens=n, ignore_eos=True)
    return pb.GenerateRequest(request_id=rid, prompt_token_ids=prompt, sampling=sampling)


def engine_tokens(path: Path, model: CausalLM, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """What the in-process engine generates for the same greedy requests."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=MAX_NEW, ignore_eos=True)
    requests = [
        GenerationRequest(f"r{i}", p, sampling, SpeculationParams(enabled=False))
        for i, p in enumerate(prompts)
    ]
    results = Engine(engine_config(path), None, model).generate(requests)
    return [results[f"r{i}"].token_ids for i in range(len(prompts))]


@dataclass
class Client:
    server: VerifierServer
    stub: verifier_pb2_grpc.VerifierStub
    channel: grpc.aio.Channel

    async def generate(self, message: pb.GenerateRequest, **kw: Any) -> list[pb.GenerateChunk]:
        return [chunk async for chunk in self.stub.Generate(message, **kw)]

    async def stats(self) -> pb.EngineStats:
        return await self.stub.GetStats(pb.GetStatsRequest())


@asynccontextmanager
async def serving(
    path: Path, model: CausalLM, spec: DrafterSpec | None = None, **kw: Any
) -> AsyncIterator[Client]:
    """A server on a free port (its drafter built from `spec`, or passed in as `drafter=`)."""
    config = VerifierServerConfig(engine_config(path), port=0, drafter=spec or DrafterSpec())
    server = VerifierServer(config, model=model, **kw)
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Client(server, verifier_pb2_grpc.VerifierStub(channel), channel)
    finally:
        await server.stop(grace=1.0)


def run(path: Path, model: CausalLM, body: Callable[[Client], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        async with serving(path, model, **kw) as client:
            await body(client)

    asyncio.run(main())


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return await check()


def tokens_of(chunks: Sequence[pb.GenerateChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


# ---- generation ------------------------------------------------------------------------------------


def test_greedy_stream_matches_the_engine(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = engine_tokens(tiny_path, tiny_model, PROMPTS[:1])[0]

    async def body(client: Client) -> None:
        chunks = await client.generate(greedy_message("a", PROMPTS[0]))
        assert tokens_of(chunks) == want
        last = chunks[-1]
        assert last.finish_reason == pb.FINISH_REASON_LENGTH
        assert last.usage.prompt_tokens == len(PROMPTS[0])
        assert last.usage.completion_tokens == len(want) == MAX_NEW
        assert last.HasField("speculation") and last.speculation.verify_steps > 0
        for chunk in chunks[:-1]:
            assert chunk.token_ids
            assert chunk.finish_reason == pb.FINISH_REASON_UNSPECIFIED
            assert not chunk.HasField("usage") and not chunk.HasField("speculation")

    run(tiny_path, tiny_model, body)


def test_the_engine_is_built_and_stepped_on_one_thread(
    tiny_path: Path, tiny_model: CausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded server's engine thread builds the engine too: every thread that runs torch's
    parallel operations keeps an OpenMP team, and two teams slowed every forward (VerifierServer.prepare)."""
    built: list[int] = []
    stepped: set[int] = set()

    class RecordingEngine(Engine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(threading.get_ident())
            super().__init__(*args, **kwargs)

        def step(self) -> list[RequestOutput]:
            stepped.add(threading.get_ident())
            return super().step()

    monkeypatch.setattr(verifier_app, "Engine", RecordingEngine)

    async def body(client: Client) -> None:
        assert len(tokens_of(await client.generate(greedy_message("a", PROMPTS[0])))) == MAX_NEW

    run(tiny_path, tiny_model, body)
    assert len(built) == 1 and stepped == set(built)
    assert built[0] != threading.get_ident()


def test_concurrent_streams_all_complete(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = engine_tokens(tiny_path, tiny_model, PROMPTS)

    async def body(client: Client) -> None:
        calls = [client.generate(greedy_message(f"c{i}", p)) for i, p in enumerate(PROMPTS)]
        results = await asyncio.gather(*calls)
        assert [tokens_of(chunks) for chunks in results] == want
        assert all(chunks[-1].finish_reason == pb.FINISH_REASON_LENGTH for chunks in results)

    run(tiny_path, tiny_model, body)


def test_random_drafter_keeps_greedy_output(tiny_path: Path, tiny_model: CausalLM) -> None:
    """Built by name from the registry (as --speculative-algorithm random does)."""
    want = engine_tokens(tiny_path, tiny_model, PROMPTS[:2])

    async def body(client: Client) -> None:
        for i, prompt in enumerate(PROMPTS[:2]):
            chunks = await client.generate(greedy_message(f"s{i}", prompt))
            assert tokens_of(chunks) == want[i]
            assert chunks[-1].speculation.drafted_tokens > 0
        stats = await client.stats()
        assert stats.speculation.drafted_tokens > 0
        assert stats.speculation.verify_steps > 0
        info = await client.stub.GetModelInfo(pb.GetModelInfoRequest())
        assert info.speculative_algorithm == "random"
        assert (info.vocab_size, info.context_length, info.model_name) == (VOCAB, 256, tiny_path.name)
        assert info.speculation_defaults.num_draft_tokens == 8
        check_metrics(client.server)

    run(tiny_path, tiny_model, body, spec=DrafterSpec(algorithm="random"))


def test_a_repeated_prompt_is_served_from_the_prefix_cache(tiny_path: Path, tiny_model: CausalLM) -> None:
    prompt = PROMPTS[5]  # 20 tokens: 4 whole blocks of 4 before its last token
    want = engine_tokens(tiny_path, tiny_model, [prompt])[0]

    async def body(client: Client) -> None:
        first = await client.generate(greedy_message("p1", prompt))
        second = await client.generate(greedy_message("p2", prompt))
        assert tokens_of(first) == tokens_of(second) == want
        assert first[-1].usage.cached_prompt_tokens == 0
        assert second[-1].usage.cached_prompt_tokens == 16
        stats = await client.stats()
        assert stats.prefix_cache_hit_tokens == 16 and stats.prefix_cache_query_tokens == 2 * 19
        assert stats.prefix_cache_blocks >= 4 and stats.kv_blocks_free == stats.kv_blocks_total
        registry = client.server.metrics.registry
        assert registry.get_sample_value("treespec_verifier_cached_prompt_tokens_total") == 16
        assert (registry.get_sample_value("treespec_verifier_prefix_cache_blocks") or 0) >= 4

    run(tiny_path, tiny_model, body)


def check_metrics(server: VerifierServer) -> None:
    registry = server.metrics.registry
    assert registry.get_sample_value("treespec_verifier_requests_total", {"finish_reason": "length"}) == 2
    assert registry.get_sample_value("treespec_verifier_acceptance_length_count") == 2
    assert (registry.get_sample_value("treespec_verifier_drafted_tokens_total") or 0) > 0
    assert registry.get_sample_value("treespec_verifier_depth_drafted_steps_total", {"depth": "1"})
    assert registry.get_sample_value("treespec_verifier_acceptance_by_depth", {"depth": "1"}) is not None
    assert registry.get_sample_value("treespec_verifier_time_to_first_token_seconds_count") == 2
    assert registry.get_sample_value("treespec_verifier_kv_blocks_total") == 512
    steps = registry.get_sample_value("treespec_verifier_step_seconds_count") or 0
    gated = registry.get_sample_value("treespec_verifier_speculation_gated_steps_total") or 0
    assert steps > 0 and registry.get_sample_value("treespec_verifier_draft_seconds_count") == steps - gated
    step_s = registry.get_sample_value("treespec_verifier_step_seconds_sum") or 0
    assert 0 < (registry.get_sample_value("treespec_verifier_draft_seconds_sum") or 0) < step_s
    # every step ran with the drafter, so every one told it what its requests committed (or closed them)
    assert registry.get_sample_value("treespec_verifier_drafter_commit_seconds_count") == steps
    assert 0 < (registry.get_sample_value("treespec_verifier_drafter_commit_seconds_sum") or 0) < step_s
    assert registry.get_sample_value("treespec_verifier_kv_blocks_used") == 0
    # the prices drafters are given, as the engine holds them after its last step (measured at start,
    # then refined); the last step's figures are published just after its outputs went out
    cost = server.engine_loop.engine.verify_cost
    deadline = time.monotonic() + 5.0
    while registry.get_sample_value("treespec_verifier_node_cost") != cost.node_cost(1):
        assert time.monotonic() < deadline, "the node cost gauge is not the engine's"
        time.sleep(0.02)
    # timed on this machine: a tiny model's rows can fit at no cost of their own (0), never below
    assert 0 <= cost.node_cost(1) < math.inf
    assert registry.get_sample_value("treespec_verifier_tree_cost") == cost.tree_cost(1) >= 0


# ---- errors, cancellation ------------------------------------------------------------------------


def invalid_requests() -> dict[str, tuple[pb.GenerateRequest, str]]:
    """Name -> (request, what its error message mentions)."""
    empty = greedy_message("bad", [])
    hot = greedy_message("bad", [1, 2])
    hot.sampling.temperature = -1.0
    no_id = greedy_message("", [1, 2])
    big_tree = greedy_message("bad", [1, 2])
    big_tree.speculation.num_draft_tokens = 1000
    no_tokens = greedy_message("bad", [1, 2])
    no_tokens.sampling.max_new_tokens = 0
    return {
        "empty prompt": (empty, "empty"),
        "token out of vocabulary": (greedy_message("bad", [1, VOCAB + 5]), f"[0, {VOCAB})"),
        "temperature -1": (hot, "temperature"),
        "prompt beyond context": (greedy_message("bad", [1] * 256), "context length"),
        "no request id": (no_id, "request_id"),
        "tree beyond the verifier's": (big_tree, "num_draft_tokens"),
        "max_new_tokens 0": (no_tokens, "max_new_tokens"),
    }


def test_invalid_requests_are_invalid_argument(tiny_path: Path, tiny_model: CausalLM) -> None:
    async def body(client: Client) -> None:
        for name, (message, mentioned) in invalid_requests().items():
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.generate(message)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert mentioned in (info.value.details() or ""), (name, info.value.details())
        chunks = await client.generate(greedy_message("after", PROMPTS[0], n=3))
        assert len(tokens_of(chunks)) == 3
        stats = await client.stats()
        assert stats.kv_blocks_free == stats.kv_blocks_total

    run(tiny_path, tiny_model, body)


class SlowDrafter(RandomTreeDrafter):
    """Random trees, 20 ms each step: a long request stays live long enough to be cancelled."""

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        time.sleep(0.02)
        return super().propose(queries)


def test_cancelled_stream_frees_its_kv(tiny_path: Path, tiny_model: CausalLM) -> None:
    async def body(client: Client) -> None:
        call = client.stub.Generate(greedy_message("long", PROMPTS[1], n=200))
        seen = 0
        async for chunk in call:
            seen += len(chunk.token_ids)
            if seen >= 2:
                break
        call.cancel()

        async def freed() -> bool:
            s = await client.stats()
            return s.kv_blocks_free == s.kv_blocks_total and s.running_requests == s.waiting_requests == 0

        assert await eventually(freed)
        registry = client.server.metrics.registry
        assert registry.get_sample_value("treespec_verifier_requests_total", {"finish_reason": "abort"}) == 1
        # The id is free again, and the server still serves.
        chunks = await client.generate(greedy_message("long", PROMPTS[0], n=3))
        assert chunks[-1].finish_reason == pb.FINISH_REASON_LENGTH

    run(tiny_path, tiny_model, body, drafter=SlowDrafter(VOCAB))


def test_duplicate_live_request_id_is_refused(tiny_path: Path, tiny_model: CausalLM) -> None:
    async def body(client: Client) -> None:
        first = client.stub.Generate(greedy_message("dup", PROMPTS[1], n=100))
        await first.read()  # live now
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.generate(greedy_message("dup", PROMPTS[0], n=3))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "live" in (info.value.details() or "")
        first.cancel()

    run(tiny_path, tiny_model, body, drafter=SlowDrafter(VOCAB))


def test_stop_ends_live_streams_with_abort(tiny_path: Path, tiny_model: CausalLM) -> None:
    async def main() -> None:
        async with serving(tiny_path, tiny_model, drafter=SlowDrafter(VOCAB)) as client:
            call = client.stub.Generate(greedy_message("shut", PROMPTS[1], n=200))
            await call.read()
            await client.server.stop(grace=0.1)
            chunks = []
            while (chunk := await call.read()) is not grpc.aio.EOF:
                chunks.append(chunk)
            assert chunks[-1].finish_reason == pb.FINISH_REASON_ABORT
            assert chunks[-1].usage.prompt_tokens == len(PROMPTS[1])

    asyncio.run(main())


# ---- health, tracing ---------------------------------------------------------------------------------


def test_health_is_serving(tiny_path: Path, tiny_model: CausalLM) -> None:
    async def body(client: Client) -> None:
        health = health_pb2_grpc.HealthStub(client.channel)
        for service in ("", "treespec.v1.Verifier"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

    run(tiny_path, tiny_model, body)


class ContextDrafter(RandomTreeDrafter):
    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.trace_contexts: dict[str, dict[str, str]] = {}

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
    ) -> None:
        self.trace_contexts[request_id] = dict(trace_context or {})
        super().open(request_id, prompt, trace_context, cache_salt)


def test_generate_span_continues_the_callers_trace(tiny_path: Path, tiny_model: CausalLM) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    drafter = ContextDrafter(VOCAB)
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"

    async def body(client: Client) -> None:
        metadata = (("traceparent", f"00-{trace_id}-{parent_id}-01"),)
        await client.generate(greedy_message("t", PROMPTS[0], n=4), metadata=metadata)

    run(tiny_path, tiny_model, body, drafter=drafter, tracer_provider=provider)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    span = spans[f"text_completion {tiny_path.name}"]
    assert span.context is not None
    assert format(span.context.trace_id, "032x") == trace_id
    # The caller's span (from the metadata) is the parent: a server span, no interceptor in between.
    assert span.parent is not None and format(span.parent.span_id, "016x") == parent_id
    assert span.kind is SpanKind.SERVER
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "text_completion"
    assert attributes["gen_ai.system"] == "treespec"
    assert attributes["gen_ai.request.temperature"] == 0.0
    assert attributes["gen_ai.request.max_tokens"] == 4
    assert attributes["gen_ai.usage.input_tokens"] == len(PROMPTS[0])
    assert attributes["gen_ai.usage.output_tokens"] == 4
    assert tuple(attributes["gen_ai.response.finish_reasons"]) == ("length",)  # type: ignore[arg-type]
    assert int(attributes["treespec.speculation.verify_steps"]) > 0  # type: ignore[arg-type]
    assert "treespec.speculation.acceptance_length" in attributes
    # The drafter learns the Generate span as its parent.
    traceparent = drafter.trace_contexts["t"]["traceparent"]
    assert traceparent == f"00-{trace_id}-{format(span.context.span_id, '016x')}-01"


# ---- the command line ---------------------------------------------------------------------------------


def _read_lines(stream: Any, lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def _wait_for_port(lines: queue.Queue[str], log: list[str], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        log.append(line)
        found = re.search(r"verifier listening on 127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError("the verifier did not start:\n" + "".join(log))


def test_cli_serves_and_stops_on_sigterm(tiny_path: Path) -> None:
    command = [
        sys.executable, "-m", "treespec.shared.cli.main", "verifier",
        "--model-path", str(tiny_path), "--port", "0", "--page-size", "4", "--max-total-tokens", "2048",
        "--speculative-algorithm", "RANDOM", "--speculative-num-draft-tokens", "6",
        "--metrics-port", str(metrics_port := free_port()),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OTEL_TRACES_EXPORTER": "none"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True).start()
    log: list[str] = []
    try:
        port = _wait_for_port(lines, log, timeout=120)
        asyncio.run(_talk_to(port))
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
            exposition = reply.read().decode()
        assert 'treespec_verifier_requests_total{finish_reason="length"} 1.0' in exposition
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _talk_to(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = verifier_pb2_grpc.VerifierStub(channel)
        chunks = [c async for c in stub.Generate(greedy_message("cli", PROMPTS[0], n=5))]
        assert len(tokens_of(chunks)) == 5
        assert chunks[-1].speculation.drafted_tokens > 0
        info = await stub.GetModelInfo(pb.GetModelInfoRequest())
        assert info.speculation_defaults.num_draft_tokens == 6
