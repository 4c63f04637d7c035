"""`treespec bench engine`: HF generate vs the engine (plain) vs the engine with oracle trees.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run.
The oracle replays the engine's own plain output in 8-node trees holding a 5-token chain: the
ceiling that a perfect drafter reaches with this verifier.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Throughput
from treespec.drafter.oracle.drafter import OracleDrafter
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

ORACLE_SPECULATION = SpeculationParams(num_draft_tokens=8, num_steps=5, eagle_topk=4)


@dataclass(frozen=True)
class EngineBenchArgs(runs.BenchArgs):
    """The common bench arguments and --threads."""


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("engine", ns, EngineBenchArgs, bench_engine, render)


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
    greedy = runs.GreedyCheck(hf_next_logits(runners.hf))
    runs.warm_up(runners.tokenizer, runners.hf, (runners.engine, None))
    n = args.max_new_tokens
    for i, prompt in enumerate(prompts):
        ids = chat_prompt_ids(runners.tokenizer, prompt.text)
        hf_tokens = runs.time_hf(runners.hf, ids, n, tally, "hf", prompt.category)
        plain = runs.time_engine(runners.engine, f"plain-{i}", ids, n, tally, "engine", prompt.category, None)
        runners.continuations[tuple(ids)] = plain.token_ids
        runs.time_engine(
            runners.oracle, f"oracle-{i}", ids, n, tally, "oracle", prompt.category, ORACLE_SPECULATION
        )
        greedy.check(prompt, ids, plain.token_ids, hf_tokens)
        print(f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(plain.token_ids)} tokens", flush=True)
    return _payload(args, prompts, tally, greedy)


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


def _payload(
    args: EngineBenchArgs, prompts: list[BenchPrompt], t: Throughput, greedy: runs.GreedyCheck
) -> dict[str, Any]:
    hf, engine, oracle = t.overall["hf"], t.overall["engine"], t.overall["oracle"]
    return {
        "hf_greedy_tps": hf.tps,
        "engine_tps": engine.tps,
        "oracle_tps": oracle.tps,
        "oracle_accept_len": oracle.accept_len,
        "engine_vs_hf": runs.ratio(engine.tps, hf.tps),
        "oracle_vs_engine": runs.ratio(oracle.tps, engine.tps),
        **greedy.figures(),
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
        "setup": runs.setup(args, len(prompts), oracle_tree="8 nodes, 5-token chain"),
    }


def render(p: dict[str, Any]) -> str:
    return runs.render(
        p,
        ["category", "prompts", "hf tok/s", "engine tok/s", "oracle tok/s", "oracle accept"],
        ["hf_greedy_tps", "engine_tps", "oracle_tps", "oracle_accept_len"],
        f"engine / hf: {p['engine_vs_hf']:.2f}x   oracle / engine: {p['oracle_vs_engine']:.2f}x",
        "engine greedy output equals HF's",
    )
