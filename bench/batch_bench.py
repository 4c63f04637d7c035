"""`treespec bench batch`: `--batch` requests decoded at once, plain vs each drafter with the speculation
gate (services/verifier/speculation_gate.py) and without it, side by side.

One model, one engine per method (its own drafter, so that no n-gram memory learns from another
method's outputs), the verify cost measured at start and refined as each engine serves (the gate and
the costs are the subject, so nothing is fixed). The prompts are taken `--batch` at a time, a wave;
every wave runs each method's engine in turn, the order rotated from wave to wave (on a shared VM
the first engine after a pause ran about 5% faster than the last), `--rounds` times over the prompts.
Each round has a cache salt of its own: an n-gram memory never drafts a round from the one before.
Greedy outputs must equal plain decoding's (the near-tie rule).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.ngram_bench import speculation as ngram_speculation
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.report import format_table
from treespec.bench.throughput import Tally
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

ALGORITHMS = ("EAGLE3", "NGRAM")
UNGATED = "_ungated"


@dataclass(frozen=True)
class BatchBenchArgs(runs.BenchArgs):
    batch: int = 8
    algorithms: tuple[str, ...] = ALGORITHMS
    rounds: int = 2

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        return {
            **super()._fields(ns),
            "batch": ns.batch,
            "algorithms": ns.speculative_algorithm,
            "rounds": ns.rounds,
        }

    @property
    def methods(self) -> list[str]:
        """plain, then each algorithm with the gate and without it."""
        return ["plain", *(m for a in self.algorithms for m in method_names(a))]


def method_names(algorithm: str) -> tuple[str, str]:
    """An algorithm's two methods: with the speculation gate, and without it."""
    return algorithm.lower(), algorithm.lower() + UNGATED


def parse_algorithms(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip().upper() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in ALGORITHMS]
    if not names or unknown:
        raise ValueError(f"give one or more of {', '.join(ALGORITHMS)}, comma-separated (got {text!r})")
    return names


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("batch", ns, BatchBenchArgs, bench_batch, render)


@dataclass
class _Method:
    engine: Engine
    spec: SpeculationParams | None
    tally: Tally = field(default_factory=Tally)
    steps: int = 0
    gated_steps: int = 0


def bench_batch(args: BatchBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    if len(prompts) < args.batch:
        raise ValueError(f"{len(prompts)} prompts cannot fill a batch of {args.batch}")
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    ids = [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    check = runs.GreedyCheck(hf_next_logits(hf))
    with _methods(args, ids) as methods:
        runs.warm_up(tokenizer, hf, *((m.engine, m.spec) for m in methods.values()))
        waves = [range(w, w + args.batch) for w in range(0, len(prompts) - args.batch + 1, args.batch)]
        for r in range(args.rounds):
            for w, wave in enumerate(waves):
                order = runs.rotated(list(methods), r * len(waves) + w)
                out = {name: _run_wave(name, methods[name], ids, wave, args, f"{name}-{r}") for name in order}
                for name in (n for n in order if n != "plain"):
                    for i in wave:
                        check.check(prompts[i], ids[i], out[name][i], out["plain"][i])
            print(f"round {r + 1}/{args.rounds}: " + _progress(methods), flush=True)
    return _payload(args, prompts, methods, check)


@contextmanager
def _methods(args: BatchBenchArgs, ids: Sequence[Sequence[int]]) -> Iterator[dict[str, _Method]]:
    """The engines over one model; their drafters shut down on exit."""
    model = load_model(args.model)
    with ExitStack() as stack:
        methods = {"plain": _Method(_engine(args, model, None, None, ids, adaptive=True), None)}
        for algorithm in args.algorithms:
            spec = _speculation(algorithm)
            for name, adaptive in zip(method_names(algorithm), (True, False), strict=True):
                target = LocalTargetAccess(model) if algorithm == "EAGLE3" else None
                drafter = create_drafter(
                    algorithm.lower(), DrafterContext(model.config.vocab_size, args.model, {}, target)
                )
                stack.callback(drafter.shutdown)
                methods[name] = _Method(_engine(args, model, drafter, spec, ids, adaptive), spec)
        yield methods


def _speculation(algorithm: str) -> SpeculationParams:
    return ngram_speculation(NgramConfig()) if algorithm == "NGRAM" else SpeculationParams()


def _engine(
    args: BatchBenchArgs,
    model: CausalLM,
    drafter: Drafter | None,
    spec: SpeculationParams | None,
    ids: Sequence[Sequence[int]],
    adaptive: bool,
) -> Engine:
    """Room for `batch` of the longest prompt at once; no prefix cache (every round computes its
    prompts, as the first did); the verify cost measured and refined."""
    speculation = spec or SpeculationParams(enabled=False)
    per_request = max(len(i) for i in ids) + args.max_new_tokens + speculation.num_draft_tokens
    config = EngineConfig(
        model_path=args.model,
        max_running_requests=args.batch,
        max_total_tokens=args.batch * per_request + runs.KV_MARGIN,
        prefix_caching=False,
        speculation=speculation,
        adaptive_speculation=adaptive,
    )
    return Engine(config, drafter, model)


def _run_wave(
    name: str, method: _Method, ids: Sequence[list[int]], wave: range, args: BatchBenchArgs, salt: str
) -> dict[int, list[int]]:
    """The wave's requests at once through this method's engine, timed; outputs by prompt index."""
    engine = method.engine
    steps, gated = engine.timings.steps, engine.timings.gated_steps
    drafting = engine.timings.drafting_s
    requests = [
        runs.request(f"{name}-{salt}-{i}", ids[i], args.max_new_tokens, method.spec, cache_salt=salt)
        for i in wave
    ]
    start = time.perf_counter()
    results = engine.generate(requests)
    seconds = time.perf_counter() - start
    method.tally.add(
        sum(len(r.token_ids) for r in results.values()),
        seconds,
        sum(r.stats.verify_steps for r in results.values()),
        sum(r.stats.committed_tokens for r in results.values()),
        draft_seconds=engine.timings.drafting_s - drafting,
        drafted=sum(r.stats.drafted_tokens for r in results.values()),
    )
    method.steps += engine.timings.steps - steps
    method.gated_steps += engine.timings.gated_steps - gated
    return {i: results[f"{name}-{salt}-{i}"].token_ids for i in wave}


def _progress(methods: Mapping[str, _Method]) -> str:
    return ", ".join(f"{name} {m.tally.tps:.2f}" for name, m in methods.items()) + " tokens/s so far"


def _figures(methods: Mapping[str, _Method], algorithms: Sequence[str]) -> dict[str, Any]:
    plain = methods["plain"].tally.tps
    figures: dict[str, Any] = {"plain_tps": plain}
    for algorithm in algorithms:
        names = method_names(algorithm)
        for name in names:
            m = methods[name]
            figures[f"{name}_tps"] = m.tally.tps
            figures[f"{name}_vs_plain"] = runs.ratio(m.tally.tps, plain)
            figures[f"{name}_accept_len"] = m.tally.accept_len
            figures[f"{name}_draft_ms_per_step"] = m.tally.draft_ms_per_step
            figures[f"{name}_gated_share"] = runs.ratio(m.gated_steps, m.steps)
        gated, ungated = (methods[name].tally.tps for name in names)
        figures[f"{names[0]}_gate_gain"] = runs.ratio(gated, ungated)
    return figures


def _payload(
    args: BatchBenchArgs,
    prompts: Sequence[BenchPrompt],
    methods: Mapping[str, _Method],
    check: runs.GreedyCheck,
) -> dict[str, Any]:
    setup = runs.setup(
        args,
        len(prompts),
        rounds=args.rounds,
        speculative_algorithms=list(args.algorithms),
        verify_cost="measured at start, refined from the decode steps",
        prefix_caching=False,
    )
    setup["batch_size"] = args.batch
    setup["waves_per_round"] = len(prompts) // args.batch
    return {**_figures(methods, args.algorithms), **check.figures(), "setup": setup}


def render(p: dict[str, Any]) -> str:
    s = p["setup"]
    header = ["method", "tok/s", "vs plain", "acceptance", "drafting ms/step", "steps left plain"]
    rows: list[list[Any]] = [["plain", p["plain_tps"], 1.0, 1.0, 0.0, 0.0]]
    for algorithm in s["speculative_algorithms"]:
        for name in method_names(algorithm):
            rows.append(
                [
                    name,
                    p[f"{name}_tps"],
                    p[f"{name}_vs_plain"],
                    p[f"{name}_accept_len"],
                    p[f"{name}_draft_ms_per_step"],
                    p[f"{name}_gated_share"],
                ]
            )
    gains = ", ".join(
        f"{a}: {p[f'{a.lower()}_gate_gain']:.2f}x with the gate against without"
        for a in s["speculative_algorithms"]
    )
    return "\n".join(
        [
            f"{s['waves_per_round']} waves of {s['batch_size']} requests at once, {s['rounds']} rounds,"
            f" {s['max_new_tokens']} new tokens a request",
            format_table(header, rows),
            "",
            gains,
            runs.greedy_line("every method's output equals plain decoding's", p),
        ]
    )
