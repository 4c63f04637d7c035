"""`treespec bench engine`: HF generate vs the engine (plain) vs the engine with oracle trees.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run.
The oracle replays the engine's own plain output in 8-node trees holding a 5-token chain: the
ceiling that a perfect drafter reaches with this verifier.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from treespec.bench.greedy_match import compare_greedy, hf_next_logits
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, default_prompts_path, load_prompts
from treespec.bench.report import format_table, write_json
from treespec.bench.throughput import Throughput
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.shared.model.loader import load_model
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

ORACLE_SPECULATION = SpeculationParams(num_draft_tokens=8, num_steps=5, eagle_topk=4)


@dataclass(frozen=True)
class EngineBenchArgs:
    model: Path
    prompts: Path
    per_category: int | None
    max_new_tokens: int
    json_path: Path | None
    threads: int

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> EngineBenchArgs:
        return cls(
            model=resolve_model_path(ns.model, models_dir()),
            prompts=Path(ns.prompts) if ns.prompts else default_prompts_path(),
            per_category=2 if ns.quick else ns.per_category,
            max_new_tokens=ns.max_new_tokens,
            json_path=Path(ns.json) if ns.json else None,
            threads=ns.threads or torch.get_num_threads(),
        )


def run(ns: argparse.Namespace) -> int:
    args = EngineBenchArgs.from_namespace(ns)
    torch.set_num_threads(args.threads)
    payload = bench_engine(args)
    print(render(payload))
    if args.json_path:
        write_json(args.json_path, payload)
        print(f"\nwrote {args.json_path}")
    return 0


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    engine: Engine
    oracle: Engine
    continuations: dict[tuple[int, ...], list[int]]


def bench_engine(args: EngineBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    runners = _load(args)
    tally = Throughput()
    mismatches: list[dict[str, Any]] = []
    near_ties = 0
    _warm_up(runners, args)
    for i, prompt in enumerate(prompts):
        ids = chat_prompt_ids(runners.tokenizer, prompt.text)
        hf_tokens = _time_hf(runners, ids, args.max_new_tokens, tally, prompt)
        plain = _time_engine(runners.engine, f"plain-{i}", ids, args, tally, "engine", prompt, None)
        runners.continuations[tuple(ids)] = plain.token_ids
        _time_engine(runners.oracle, f"oracle-{i}", ids, args, tally, "oracle", prompt, ORACLE_SPECULATION)
        match = compare_greedy(ids, plain.token_ids, hf_tokens, hf_next_logits(runners.hf))
        near_ties += int(not match.identical and match.ok)
        if not match.ok:
            mismatches.append(
                {"question_id": prompt.question_id, "diverged_at": match.diverged_at, "gap": match.gap}
            )
        print(f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(plain.token_ids)} tokens", flush=True)
    return _payload(args, prompts, tally, mismatches, near_ties)


def _load(args: EngineBenchArgs) -> _Runners:
    model = load_model(args.model)
    config = EngineConfig(model_path=args.model, max_running_requests=1)
    continuations: dict[tuple[int, ...], list[int]] = {}
    return _Runners(
        hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
        tokenizer=transformers.AutoTokenizer.from_pretrained(args.model),
        engine=Engine(config, None, model),
        oracle=Engine(config, OracleDrafter(continuations, model.config.vocab_size), model),
        continuations=continuations,
    )


def _warm_up(r: _Runners, args: EngineBenchArgs) -> None:
    ids = chat_prompt_ids(r.tokenizer, "Hello!")
    with torch.no_grad():
        r.hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)  # type: ignore[operator]
    r.engine.generate([_request("warm", ids, 8, None)])


def _request(rid: str, ids: list[int], n: int, spec: SpeculationParams | None) -> GenerationRequest:
    speculation = spec or SpeculationParams(enabled=False)
    return GenerationRequest(rid, ids, SamplingParams(temperature=0.0, max_new_tokens=n), speculation)


def _time_hf(r: _Runners, ids: list[int], n: int, tally: Throughput, prompt: BenchPrompt) -> list[int]:
    start = time.perf_counter()
    with torch.no_grad():
        out = r.hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)  # type: ignore[operator]
    seconds = time.perf_counter() - start
    tokens = out[0, len(ids) :].tolist()
    tally.add("hf", prompt.category, len(tokens), seconds)
    return list(tokens)


def _time_engine(
    engine: Engine,
    rid: str,
    ids: list[int],
    args: EngineBenchArgs,
    tally: Throughput,
    method: str,
    prompt: BenchPrompt,
    spec: SpeculationParams | None,
) -> GenerationResult:
    start = time.perf_counter()
    result = engine.generate([_request(rid, ids, args.max_new_tokens, spec)])[rid]
    seconds = time.perf_counter() - start
    stats = result.stats
    tally.add(
        method, prompt.category, len(result.token_ids), seconds, stats.verify_steps, stats.committed_tokens
    )
    return result


def _payload(
    args: EngineBenchArgs,
    prompts: list[BenchPrompt],
    t: Throughput,
    mismatches: list[dict[str, Any]],
    near_ties: int,
) -> dict[str, Any]:
    hf, engine, oracle = t.overall["hf"], t.overall["engine"], t.overall["oracle"]
    return {
        "hf_greedy_tps": hf.tps,
        "engine_tps": engine.tps,
        "oracle_tps": oracle.tps,
        "oracle_accept_len": oracle.accept_len,
        "engine_vs_hf": engine.tps / hf.tps if hf.tps else 0.0,
        "oracle_vs_engine": oracle.tps / engine.tps if engine.tps else 0.0,
        "identical": not mismatches,
        "near_tie_divergences": near_ties,
        "mismatches": mismatches,
        "per_category": {
            c: {
                "prompts": sum(p.category == c for p in prompts),
                "hf_greedy_tps": t.by_category["hf"][c].tps,
                "engine_tps": t.by_category["engine"][c].tps,
                "oracle_tps": t.by_category["oracle"][c].tps,
                "oracle_accept_len": t.by_category["oracle"][c].accept_len,
            }
            for c in t.categories()
        },
        "setup": {
            "model": str(args.model),
            "prompts": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "batch_size": 1,
            "temperature": 0.0,
            "oracle_tree": "8 nodes, 5-token chain",
            "torch_threads": args.threads,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "cpu_count": _cpu_count(),
        },
    }


def render(p: dict[str, Any]) -> str:
    rows = [
        [c, v["prompts"], v["hf_greedy_tps"], v["engine_tps"], v["oracle_tps"], v["oracle_accept_len"]]
        for c, v in p["per_category"].items()
    ]
    rows.append(
        [
            "overall",
            p["setup"]["prompts"],
            p["hf_greedy_tps"],
            p["engine_tps"],
            p["oracle_tps"],
            p["oracle_accept_len"],
        ]
    )
    header = ["category", "prompts", "hf tok/s", "engine tok/s", "oracle tok/s", "oracle accept"]
    lines = [
        format_table(header, rows),
        "",
        f"engine / hf: {p['engine_vs_hf']:.2f}x   oracle / engine: {p['oracle_vs_engine']:.2f}x",
        f"engine greedy output equals HF's (near-tie rule): {p['identical']}"
        f" ({p['near_tie_divergences']} near-tie divergences)",
    ]
    return "\n".join(lines)


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0))
