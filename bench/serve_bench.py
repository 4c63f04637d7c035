"""`treespec bench serve`: the full service path (HTTP streaming through gateway, verifier, drafter)
against the in-process engine, on the same prompts and drafter, in one run.

Batch size 1: one streaming request at a time (tokens/s, time to first token, inter-token latency);
then 8 concurrent streams (aggregate tokens/s). Temperature 0, speculation as `treespec serve` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, default_prompts_path, load_prompts
from treespec.bench.report import format_table, write_json
from treespec.shared.cli.serve import ServeConfig, services
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.launcher.supervisor import Supervisor
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams


@dataclass(frozen=True)
class ServeBenchArgs:
    model: Path
    prompts: Path
    per_category: int | None
    max_new_tokens: int
    algorithm: str
    concurrency: int
    json_path: Path | None

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
        )


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
    config = _serve_config(args)
    supervisor = Supervisor(services(config))
    supervisor.start_all()
    try:
        timings = asyncio.run(_stream_one_by_one(config.url, prompts, args.max_new_tokens))
        concurrent_tps = asyncio.run(_stream_concurrently(config.url, prompts, args))
    finally:
        supervisor.stop_all()
    return _payload(args, prompts, engine_tps, timings, concurrent_tps)


def _engine_tps(args: ServeBenchArgs, prompt_ids: list[list[int]]) -> float:
    """The in-process engine with the same drafter and settings, one request at a time."""
    config = EngineConfig(model_path=args.model, max_running_requests=1)
    engine = Engine(config)
    if args.algorithm.upper() != "NONE":
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
    return DrafterContext(vocab_size=engine.model.config.vocab_size, target_path=args.model)


def _serve_config(args: ServeBenchArgs) -> ServeConfig:
    return ServeConfig.on_free_ports(args.model, args.algorithm)


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


async def _stream_one_by_one(url: str, prompts: list[BenchPrompt], max_tokens: int) -> list[StreamTiming]:
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        model = (await client.models.list()).data[0].id
        await _stream(client, model, prompts[0], 8)
        return [await _stream(client, model, p, max_tokens) for p in prompts]


async def _stream_concurrently(url: str, prompts: list[BenchPrompt], args: ServeBenchArgs) -> float:
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
        return sum(totals) / (time.perf_counter() - start)


def _payload(
    args: ServeBenchArgs,
    prompts: list[BenchPrompt],
    engine_tps: float,
    t: list[StreamTiming],
    concurrent_tps: float,
) -> dict[str, Any]:
    serve_tps = sum(x.tokens for x in t) / sum(x.seconds for x in t)
    itls = [x.itl_s for x in t if x.itl_s is not None]
    return {
        "engine_tps": engine_tps,
        "serve_tps": serve_tps,
        "serve_vs_engine": serve_tps / engine_tps if engine_tps else 0.0,
        "serve_ttft_ms": statistics.mean(x.ttft_s for x in t) * 1000,
        "serve_itl_ms": statistics.mean(itls) * 1000 if itls else 0.0,
        f"concurrent{args.concurrency}_tps": concurrent_tps,
        "concurrent8_tps": concurrent_tps if args.concurrency == 8 else None,
        "setup": {
            "model": str(args.model),
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "speculative_algorithm": args.algorithm,
            "concurrency": args.concurrency,
            "temperature": 0.0,
            "torch_threads": torch.get_num_threads(),
        },
    }


def render(p: dict[str, Any]) -> str:
    c = p["setup"]["concurrency"]
    rows = [
        ["in-process engine, batch 1", p["engine_tps"], "", ""],
        ["HTTP streaming, batch 1", p["serve_tps"], p["serve_ttft_ms"], p["serve_itl_ms"]],
        [f"HTTP streaming, {c} concurrent", p[f"concurrent{c}_tps"], "", ""],
    ]
    table = format_table(["path", "tok/s", "ttft ms", "itl ms"], rows)
    return f"{table}\n\nservice path / in-process engine at batch 1: {p['serve_vs_engine']:.2f}x"
