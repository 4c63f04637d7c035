"""`treespec bench burst`: single requests before and after a burst of concurrent ones.

A served verifier prices draft nodes from its own decode steps (services/verifier/verify_cost_fit.py),
and those steps change with the load: a batch's steps cost more per row than a single request's. This
bench asks whether a spell of batched load leaves single requests drafting as they did before it. One
engine with the n-gram drafter, up to `--burst` requests at once, its verify cost measured at start
and refined as it serves (never fixed here), no prefix cache (both phases compute their prompts):

1. before: each prompt alone, in turn (timed; the node cost at batch 1 read as each starts);
2. the burst: `--waves` times, `--burst` requests at once, the prompts taken in turn;
3. after: each prompt alone again, as in 1.

Each phase has a cache salt of its own, so that the n-gram memory of one phase's outputs never drafts
for the next (the after phase would otherwise copy the before phase's answers). Greedy outputs after
must equal those before (the near-tie rule). Tokens/s after over before is the figure: 1.0 when the
burst leaves nothing behind.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.ngram_bench import NgramBenchArgs, speculation
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import SpeculationParams

PHASES = ("before", "after")


@dataclass(frozen=True)
class BurstBenchArgs(NgramBenchArgs):
    """`bench ngram`'s arguments (no fixed costs) and the burst's shape."""

    burst: int = 16
    waves: int = 3

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        return {**super()._fields(ns), "burst": ns.burst, "waves": ns.waves}


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("burst", ns, BurstBenchArgs, bench_burst, render)


@dataclass(frozen=True)
class Singles:
    """A phase of single requests: the node cost at batch 1 as each started, and each one's output."""

    node_costs: list[float]
    outputs: list[list[int]]


@dataclass(frozen=True)
class BurstFigures:
    requests: int
    tally: Tally
    node_cost: float  # at the burst's batch size, as the last wave ends

    def report(self) -> dict[str, Any]:
        return {
            "burst_requests": self.requests,
            "burst_tps": self.tally.tps,
            "burst_accept_len": self.tally.accept_len,
            "burst_node_cost": self.node_cost,
        }


def bench_burst(args: BurstBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    ids = [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    model = load_model(args.model)
    drafter = args.drafter(model)
    spec = speculation(args.config)
    engine = Engine(_config(args, spec, ids), drafter, model)
    tally = Throughput()
    try:
        runs.warm_up(tokenizer, hf, (engine, spec))
        before = _singles(engine, prompts, ids, args, spec, "before", tally)
        burst = _burst(engine, ids, args, spec)
        after = _singles(engine, prompts, ids, args, spec, "after", tally)
    finally:
        drafter.shutdown()
    greedy = runs.GreedyCheck(hf_next_logits(hf))
    for prompt, prompt_ids, got, want in zip(prompts, ids, after.outputs, before.outputs, strict=True):
        greedy.check(prompt, prompt_ids, got, want)
    return _payload(args, prompts, tally, (before, after), burst, greedy)


def _config(args: BurstBenchArgs, spec: SpeculationParams, ids: Sequence[Sequence[int]]) -> EngineConfig:
    """Room for `burst` of the longest prompt at once; the cost measured and refined (none given)."""
    longest = max(len(i) for i in ids)
    per_request = longest + args.max_new_tokens + spec.num_draft_tokens
    return EngineConfig(
        model_path=args.model,
        max_running_requests=args.burst,
        max_total_tokens=args.burst * per_request + runs.KV_MARGIN,
        prefix_caching=False,
        speculation=spec,
    )


def _singles(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    ids: Sequence[list[int]],
    args: BurstBenchArgs,
    spec: SpeculationParams,
    phase: str,
    tally: Throughput,
) -> Singles:
    singles = Singles([], [])
    for i, (prompt, prompt_ids) in enumerate(zip(prompts, ids, strict=True)):
        singles.node_costs.append(engine.verify_cost.node_cost(1))
        result = runs.time_engine(
            engine,
            f"{phase}-{i}",
            prompt_ids,
            args.max_new_tokens,
            tally,
            phase,
            prompt.category,
            spec,
            cache_salt=phase,
        )
        singles.outputs.append(result.token_ids)
    print(
        f"{phase}: {len(prompts)} requests, one at a time, {tally.overall[phase].tps:.2f} tokens/s",
        flush=True,
    )
    return singles


def _burst(
    engine: Engine, ids: Sequence[list[int]], args: BurstBenchArgs, spec: SpeculationParams
) -> BurstFigures:
    results: list[GenerationResult] = []
    start = time.perf_counter()
    for wave in range(args.waves):
        batch = [
            runs.request(
                f"burst-{wave}-{j}",
                ids[(wave * args.burst + j) % len(ids)],
                args.max_new_tokens,
                spec,
                cache_salt="burst",
            )
            for j in range(args.burst)
        ]
        results += engine.generate(batch).values()
    tally = Tally()
    tally.add(
        sum(len(r.token_ids) for r in results),
        time.perf_counter() - start,
        sum(r.stats.verify_steps for r in results),
        sum(r.stats.committed_tokens for r in results),
    )
    cost = engine.verify_cost_at(args.burst).node_cost(args.burst)
    print(f"burst: {len(results)} requests, {args.burst} at once, {tally.tps:.2f} tokens/s", flush=True)
    return BurstFigures(len(results), tally, cost)


def _figures(tallies: Mapping[str, Tally]) -> dict[str, float]:
    before, after = tallies["before"], tallies["after"]
    return {
        "before_tps": before.tps,
        "after_tps": after.tps,
        "after_over_before": runs.ratio(after.tps, before.tps),
        "before_accept_len": before.accept_len,
        "after_accept_len": after.accept_len,
    }


def _payload(
    args: BurstBenchArgs,
    prompts: Sequence[BenchPrompt],
    tally: Throughput,
    phases: tuple[Singles, Singles],
    burst: BurstFigures,
    greedy: runs.GreedyCheck,
) -> dict[str, Any]:
    before, after = phases
    return {
        **_figures(tally.overall),
        "before_node_cost": statistics.mean(before.node_costs),
        "after_node_cost": statistics.mean(after.node_costs),
        **burst.report(),
        **greedy.figures(),
        "per_category": runs.per_category(prompts, tally, PHASES, _figures),
        "setup": runs.setup(
            args,
            len(prompts),
            speculative_algorithm="NGRAM",
            burst=args.burst,
            waves=args.waves,
            max_running_requests=args.burst,
            verify_cost="measured at start, refined from the decode steps",
            prefix_caching=False,
            ngram_options=args.options,
        ),
    }


def render(p: dict[str, Any]) -> str:
    keys = ["before_tps", "after_tps", "after_over_before", "before_accept_len", "after_accept_len"]
    header = [
        "category",
        "prompts",
        "tok/s before",
        "tok/s after",
        "after/before",
        "accept before",
        "accept after",
    ]
    s = p["setup"]
    return "\n".join(
        [
            runs.table(p, header, keys),
            "",
            f"burst: {p['burst_requests']} requests, {s['burst']} at once: {p['burst_tps']:.2f} tokens/s,"
            f" acceptance {p['burst_accept_len']:.2f}, node cost at batch {s['burst']}"
            f" {p['burst_node_cost']:.3f}",
            f"node cost at batch 1 as each single request starts: {p['before_node_cost']:.3f} before the"
            " burst,"
            f" {p['after_node_cost']:.3f} after",
            f"single requests after the burst: {p['after_over_before']:.2f}x the tokens/s before it",
            runs.greedy_line("output after the burst equals before", p),
        ]
    )
