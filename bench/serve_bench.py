"""`treespec bench serve`: the full service path (HTTP streaming through gateway, verifier, drafter)
against the in-process engine, on the same prompts and drafter, in one run.

Batch size 1: one streaming request at a time (tokens/s, time to first token, inter-token latency);
then `--concurrency` concurrent streams (aggregate tokens/s). Temperature 0, speculation as `treespec
serve` runs it. Beside that stack (its drafter linked over a local socket), the run can serve the
same prompts through a stack whose Draft stream goes over gRPC (`--drafter-links local,grpc`: what a
drafter replica on another host costs), through a stack whose drafter runs inside the verifier's
process (`in-process`: `treespec serve --drafter-in-process`) and through a stack decoding plainly
(on unless `--no-plain` or NONE): their stacks are all up at once and take the batch-1 prompts in
turns, prompt by prompt, so that the ratios between them come from one stretch of time on the
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from treespec.bench.process_cpu import cpu_seconds
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, default_prompts_path, load_prompts
from treespec.bench.report import format_table, write_json
from treespec.bench.runs import ratio
from treespec.shared.cli.serve import ServeConfig, services
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.launcher.supervisor import Supervisor
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

LOCAL, GRPC, IN_PROCESS, PLAIN = "local", "grpc", "in-process", "plain"  # how the drafter is linked, or none
DRAFTER_LINKS = (LOCAL, GRPC, IN_PROCESS)


@dataclass(frozen=True)
class ServeBenchArgs:
    model: Path
    prompts: Path
    per_category: int | None
    max_new_tokens: int
    algorithm: str
    concurrency: int
    json_path: Path | None
    links: tuple[str, ...] = (LOCAL,)  # the speculative stacks, by how their drafter is linked
    plain: bool = True  # a stack decoding plainly beside them

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> ServeBenchArgs:
        return cls(
            model=resolve_model_path(ns.model, models_dir()),
            prompts=Path(ns.prompts) if ns.prompts else default_prompts_path(),
            per_category=2 if ns.quick else ns.per_category,
            max_new_tokens=ns.max_new_tokens,
            algorithm=ns.speculative_algorithm,
            concurrency=ns.concurrency,
            json_path=Path(ns.json) if ns.json else None,
            links=ns.drafter_links,  # parsed by the flag's type (parse_links)
            plain=not ns.no_plain,
        )

    @property
    def speculative(self) -> bool:
        return self.algorithm.upper() != "NONE"

    def stacks(self) -> tuple[str, ...]:
        """The stacks to serve through, the one `treespec serve` runs first."""
        if not self.speculative:
            return (PLAIN,)
        return (*self.links, *((PLAIN,) if self.plain else ()))


def parse_links(text: str) -> tuple[str, ...]:
    """`local`, `grpc` or both, comma-separated, in order; ValueError otherwise."""
    links = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [link for link in links if link not in DRAFTER_LINKS]
    if not links or unknown:
        raise ValueError(f"drafter links are {', '.join(DRAFTER_LINKS)} (comma-separated); got {text!r}")
    return links


@dataclass(frozen=True)
class StreamTiming:
    tokens: int
    seconds: float
    ttft_s: float
    itl_s: float | None  # mean gap between tokens after the first


def run(ns: argparse.Namespace) -> int:
    args = ServeBenchArgs.from_namespace(ns)
    payload = bench_serve(args)
    print(render(payload))
    if args.json_path:
        write_json(args.json_path, payload)
        print(f"\nwrote {args.json_path}")
    return 0


def bench_serve(args: ServeBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    engine_tps = _engine_tps(args, [chat_prompt_ids(tokenizer, p.text) for p in prompts])
    configs = {stack: stack_config(args, stack) for stack in args.stacks()}
    gateways: dict[str, int] = {}  # stack -> its gateway's process id
    with ExitStack() as running:
        for stack, config in configs.items():  # one at a time: each measures its verify cost as it starts
            supervisor = Supervisor(services(config))
            running.callback(supervisor.stop_all)
            supervisor.start_all()
            gateways[stack] = _gateway_pid(supervisor)
        urls = {stack: config.url for stack, config in configs.items()}
        timings = asyncio.run(_stream_in_turns(urls, prompts, args.max_new_tokens))
        concurrent = {stack: _concurrent(url, gateways[stack], prompts, args) for stack, url in urls.items()}
    return _payload(args, prompts, engine_tps, timings, concurrent)


def _gateway_pid(supervisor: Supervisor) -> int:
    gateway = next(s for s in supervisor.services if s.name == "gateway")
    assert gateway.popen is not None
    return gateway.popen.pid


@dataclass(frozen=True)
class Concurrent:
    tps: float
    gateway_cpu_ms_per_token: float | None  # the gateway process's CPU time over the tokens it streamed


def _concurrent(url: str, gateway_pid: int, prompts: list[BenchPrompt], args: ServeBenchArgs) -> Concurrent:
    before = cpu_seconds(gateway_pid)
    tps, tokens = asyncio.run(_stream_concurrently(url, prompts, args))
    after = cpu_seconds(gateway_pid)
    if before is None or after is None or tokens == 0:
        return Concurrent(tps, None)
    return Concurrent(tps, (after - before) * 1000 / tokens)


def stack_config(args: ServeBenchArgs, stack: str) -> ServeConfig:
    """As `treespec serve` runs it (LOCAL), with the drafter's Draft stream over gRPC (GRPC), with the
    drafter in the verifier's process (IN_PROCESS), or decoding plainly (PLAIN)."""
    if stack == PLAIN:
        return ServeConfig.on_free_ports(args.model, "NONE")
    if stack == IN_PROCESS:
        return ServeConfig.on_free_ports(args.model, args.algorithm, drafter_in_process=True)
    if stack == GRPC:
        return ServeConfig.on_free_ports(args.model, args.algorithm, draft_socket=None)
    return ServeConfig.on_free_ports(args.model, args.algorithm)


def _engine_tps(args: ServeBenchArgs, prompt_ids: list[list[int]]) -> float:
    """The in-process engine with the same drafter and settings, one request at a time."""
    config = EngineConfig(model_path=args.model, max_running_requests=1)
    engine = Engine(config)
    if args.speculative:
        engine = Engine(config, create_drafter(args.algorithm, _context(args, engine)), engine.model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    engine.generate(
        [GenerationRequest("warm", prompt_ids[0], SamplingParams(temperature=0.0, max_new_tokens=8))]
    )
    tokens, seconds = 0, 0.0
    for i, ids in enumerate(prompt_ids):
        start = time.perf_counter()
        result = engine.generate([GenerationRequest(str(i), ids, sampling, SpeculationParams())])[str(i)]
        seconds += time.perf_counter() - start
        tokens += len(result.token_ids)
    del engine
    return tokens / seconds


def _context(args: ServeBenchArgs, engine: Engine) -> DrafterContext:
    """The engine's target for drafters that read it (EAGLE, in process as `treespec verifier` runs it)."""
    return DrafterContext(
        vocab_size=engine.model.config.vocab_size,
        target_path=args.model,
        target=LocalTargetAccess(engine.model),
    )


async def _stream(client: Any, model: str, prompt: BenchPrompt, max_tokens: int) -> StreamTiming:
    start = time.perf_counter()
    arrivals: list[float] = []
    tokens = 0
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt.text}],
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.perf_counter())
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    seconds = time.perf_counter() - start
    ttft = (arrivals[0] if arrivals else time.perf_counter()) - start
    itl = (arrivals[-1] - arrivals[0]) / (tokens - 1) if len(arrivals) > 1 and tokens > 1 else None
    return StreamTiming(tokens, seconds, ttft, itl)


async def _stream_in_turns(
    urls: dict[str, str], prompts: list[BenchPrompt], max_tokens: int
) -> dict[str, list[StreamTiming]]:
    """Each prompt through each stack in turn, one stream at a time (after a short warm-up each)."""
    from openai import AsyncOpenAI

    async with AsyncExitStack() as clients:
        opened = {
            stack: await clients.enter_async_context(AsyncOpenAI(base_url=f"{url}/v1", api_key="unused"))
            for stack, url in urls.items()
        }
        models = {s: (await c.models.list()).data[0].id for s, c in opened.items()}
        for stack, client in opened.items():
            await _stream(client, models[stack], prompts[0], 8)
        timings: dict[str, list[StreamTiming]] = {stack: [] for stack in urls}
        for prompt in prompts:
            for stack, client in opened.items():
                timings[stack].append(await _stream(client, models[stack], prompt, max_tokens))
        return timings


async def _stream_concurrently(
    url: str, prompts: list[BenchPrompt], args: ServeBenchArgs
) -> tuple[float, int]:
    """(tokens/s, tokens) of the prompts streamed by `--concurrency` clients at once."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        model = (await client.models.list()).data[0].id
        queue = list(prompts)
        start = time.perf_counter()

        async def worker() -> int:
            done = 0
            while queue:
                done += (await _stream(client, model, queue.pop(), args.max_new_tokens)).tokens
            return done

        totals = await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        return sum(totals) / (time.perf_counter() - start), sum(totals)


def _path_figures(t: Sequence[StreamTiming], concurrent: Concurrent) -> dict[str, float]:
    itls = [x.itl_s for x in t if x.itl_s is not None]
    return {
        "tps": sum(x.tokens for x in t) / sum(x.seconds for x in t),
        "ttft_ms": statistics.mean(x.ttft_s for x in t) * 1000,
        "itl_ms": statistics.mean(itls) * 1000 if itls else 0.0,
        "concurrent_tps": concurrent.tps,
    }


def _payload(
    args: ServeBenchArgs,
    prompts: list[BenchPrompt],
    engine_tps: float,
    timings: dict[str, list[StreamTiming]],
    concurrent: dict[str, Concurrent],
) -> dict[str, Any]:
    paths = {stack: _path_figures(timings[stack], concurrent[stack]) for stack in timings}
    served = paths[args.stacks()[0]]  # as `treespec serve` runs it
    payload: dict[str, Any] = {
        "engine_tps": engine_tps,
        "serve_tps": served["tps"],
        "serve_vs_engine": ratio(served["tps"], engine_tps),
        "serve_ttft_ms": served["ttft_ms"],
        "serve_itl_ms": served["itl_ms"],
        f"concurrent{args.concurrency}_tps": served["concurrent_tps"],
        "concurrent8_tps": served["concurrent_tps"] if args.concurrency == 8 else None,
        "paths": paths,
        # The gateway's CPU time per token it streamed at --concurrency (None: /proc could not tell).
        "gateway_cpu_ms_per_token": {s: c.gateway_cpu_ms_per_token for s, c in concurrent.items()},
    }
    if args.speculative and PLAIN in paths:
        plain = paths[PLAIN]
        payload["serve_vs_plain"] = ratio(served["tps"], plain["tps"])
        payload["concurrent_vs_plain"] = ratio(served["concurrent_tps"], plain["concurrent_tps"])
    if LOCAL in paths and IN_PROCESS in paths:
        payload["in_process_vs_local"] = ratio(paths[IN_PROCESS]["tps"], paths[LOCAL]["tps"])
        payload["in_process_vs_local_concurrent"] = ratio(
            paths[IN_PROCESS]["concurrent_tps"], paths[LOCAL]["concurrent_tps"]
        )
    if LOCAL in paths and GRPC in paths:
        payload["local_vs_grpc"] = ratio(paths[LOCAL]["tps"], paths[GRPC]["tps"])
        payload["local_vs_grpc_concurrent"] = ratio(
            paths[LOCAL]["concurrent_tps"], paths[GRPC]["concurrent_tps"]
        )
    payload["setup"] = {
        "model": str(args.model),
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "speculative_algorithm": args.algorithm,
        "stacks": list(paths),
        "concurrency": args.concurrency,
        "temperature": 0.0,
        "torch_threads": torch.get_num_threads(),
    }
    return payload


STACK_NAMES = {
    LOCAL: "drafter over a local socket",
    GRPC: "drafter over gRPC",
    IN_PROCESS: "drafter in the verifier's process",
    PLAIN: "plain decoding",
}


def render(p: dict[str, Any]) -> str:
    c = p["setup"]["concurrency"]
    algorithm = p["setup"]["speculative_algorithm"]
    rows: list[list[Any]] = [[f"in-process engine ({algorithm}), batch 1", p["engine_tps"], "", "", ""]]
    for stack, f in p["paths"].items():
        name = STACK_NAMES[stack] if stack == PLAIN else f"{algorithm}, {STACK_NAMES[stack]}"
        rows.append([f"HTTP: {name}", f["tps"], f["ttft_ms"], f["itl_ms"], f["concurrent_tps"]])
    header = ["path", "tok/s batch 1", "ttft ms", "itl ms", f"tok/s {c} concurrent"]
    lines = [
        format_table(header, rows),
        "",
        f"service path / in-process engine at batch 1: {p['serve_vs_engine']:.2f}x",
    ]
    cpu = p.get("gateway_cpu_ms_per_token") or {}
    if cpu and all(v is not None for v in cpu.values()):
        told = ", ".join(f"{stack} {v:.3f} ms" for stack, v in cpu.items())
        lines.append(f"gateway CPU per streamed token at {c} concurrent: {told}")
    if "serve_vs_plain" in p:
        lines.append(
            f"service path, {algorithm} / plain: {p['serve_vs_plain']:.2f}x at batch 1,"
            f" {p['concurrent_vs_plain']:.2f}x at {c} concurrent"
        )
    if "in_process_vs_local" in p:
        lines.append(
            f"drafter in process / over a local socket: {p['in_process_vs_local']:.2f}x at batch 1,"
            f" {p['in_process_vs_local_concurrent']:.2f}x at {c} concurrent"
        )
    if "local_vs_grpc" in p:
        lines.append(
            f"drafter over a local socket / over gRPC: {p['local_vs_grpc']:.2f}x at batch 1,"
            f" {p['local_vs_grpc_concurrent']:.2f}x at {c} concurrent"
        )
    return "\n".join(lines)
