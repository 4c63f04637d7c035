"""`treespec bench prefix`: a conversation's second turn with prefix caching against without it.

For each prompt, turn 1 is the prompt and turn 2 repeats it with the model's answer and a follow-up
question (as a chat client resends the whole conversation). Two engines over the same weights, one
caching prefixes and one computing every prompt, each answer turn 1 (not timed), then turn 2 (timed:
time to the first token, and to the last): the cached engine finds turn 1's blocks. Batch size 1,
temperature 0; plain decoding, or both engines speculating with their own drafter of one kind
(`--speculative-algorithm NGRAM|EAGLE3|STANDALONE`: with EAGLE3 the cached engine hands the head the
cached prefix's features, and the acceptance lengths show whether its drafts lost anything; with
STANDALONE, `--draft-path DIR`, the cached engine's draft model caches its own prefixes too); turn
2's outputs must agree (near-tie rule).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.prompts import BenchPrompt, load_prompts
from treespec.bench.report import format_table
from treespec.drafter.standalone.config import StandaloneConfig
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams
from treespec.verifier.stats import SpecStats

FOLLOW_UP = "Thank you. Now say the same again in one sentence."
STANDALONE = "STANDALONE"
METHODS = ("uncached", "cached")


@dataclass(frozen=True)
class PrefixBenchArgs(runs.BenchArgs):
    """The common bench arguments, --threads and the drafter both engines speculate with."""

    algorithm: str = "NONE"
    draft_path: str | None = None  # STANDALONE's draft model

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        algorithm = ns.speculative_algorithm.upper()
        draft_path = None
        if algorithm == STANDALONE:
            draft_path = ns.draft_path
            StandaloneConfig.from_options({"draft_path": draft_path}).check_path()  # before a model loads
        elif ns.draft_path is not None:
            raise ValueError("--draft-path is for --speculative-algorithm STANDALONE")
        return {**super()._fields(ns), "algorithm": algorithm, "draft_path": draft_path}

    @property
    def speculates(self) -> bool:
        return self.algorithm != "NONE"


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("prefix", ns, PrefixBenchArgs, bench_prefix, render)


@dataclass(frozen=True)
class TurnTiming:
    prompt_tokens: int
    cached_tokens: int
    first_token_s: float
    total_s: float
    tokens: list[int]
    stats: SpecStats


@dataclass
class _Tally:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    first_token_s: list[float] = field(default_factory=list)
    total_s: float = 0.0
    output_tokens: int = 0
    stats: SpecStats = field(default_factory=SpecStats)

    def add(self, t: TurnTiming) -> None:
        self.prompt_tokens += t.prompt_tokens
        self.cached_tokens += t.cached_tokens
        self.first_token_s.append(t.first_token_s)
        self.total_s += t.total_s
        self.output_tokens += len(t.tokens)
        self.stats.merge(t.stats)

    def merge(self, other: _Tally) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.first_token_s += other.first_token_s
        self.total_s += other.total_s
        self.output_tokens += other.output_tokens
        self.stats.merge(other.stats)

    @property
    def mean_ttft_ms(self) -> float:
        return 1e3 * sum(self.first_token_s) / max(1, len(self.first_token_s))


def bench_prefix(args: PrefixBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    model = load_model(args.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    engines = {
        m: Engine(_config(args, m == "cached"), _drafter(args, model, m == "cached"), model) for m in METHODS
    }
    greedy = runs.GreedyCheck(hf_next_logits(hf))
    tallies: dict[str, dict[str, _Tally]] = {m: {} for m in METHODS}
    n = args.max_new_tokens
    for i, prompt in enumerate(prompts):
        first = _ids(tokenizer, [{"role": "user", "content": prompt.text}])
        outputs: dict[str, list[int]] = {}
        for method, engine in engines.items():
            answer = _generate(engine, f"{method}-{i}-1", first, n, args.speculates).tokens
            text = str(tokenizer.decode(answer, skip_special_tokens=True))
            conversation: list[dict[str, str]] = [
                {"role": "user", "content": prompt.text},
                {"role": "assistant", "content": text},
                {"role": "user", "content": FOLLOW_UP},
            ]
            second = _generate(engine, f"{method}-{i}-2", _ids(tokenizer, conversation), n, args.speculates)
            tallies[method].setdefault(prompt.category, _Tally()).add(second)
            outputs[method] = second.tokens
            second_ids = _ids(tokenizer, conversation)
        greedy.check(prompt, second_ids, outputs["cached"], outputs["uncached"])
        print(f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(second_ids)} prompt tokens", flush=True)
    return _payload(args, prompts, tallies, greedy)


def _config(args: PrefixBenchArgs, caching: bool) -> EngineConfig:
    return EngineConfig(
        model_path=args.model,
        max_running_requests=1,
        prefix_caching=caching,
        node_cost=args.node_cost,
        tree_cost=args.tree_cost or 0.0,
    )


def _drafter(args: PrefixBenchArgs, model: CausalLM, caching: bool) -> Drafter | None:
    """Each engine's own drafter (in process, reading the target where it needs to), or none; a draft
    model caches prefixes where its engine does."""
    if not args.speculates:
        return None
    options: dict[str, Any] = {}
    if args.algorithm == STANDALONE:
        options = {"draft_path": args.draft_path, "prefix_caching": caching}
    context = DrafterContext(model.config.vocab_size, args.model, options, LocalTargetAccess(model))
    return create_drafter(args.algorithm.lower(), context)


def _ids(tokenizer: transformers.PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(str(rendered), add_special_tokens=False)["input_ids"])


def _generate(engine: Engine, rid: str, ids: list[int], n: int, speculate: bool) -> TurnTiming:
    """One greedy request stepped to its end: the times to its first output token and to its last."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
    start = time.perf_counter()
    engine.add_request(GenerationRequest(rid, ids, sampling, SpeculationParams(enabled=speculate)))
    tokens: list[int] = []
    first = None
    cached = 0
    stats = SpecStats()
    while engine.has_work():
        for out in engine.step():
            tokens.extend(out.token_ids)
            if first is None and out.token_ids:
                first = time.perf_counter() - start
            if out.finished:
                cached = out.num_cached_tokens
                stats = out.stats or stats
    total = time.perf_counter() - start
    return TurnTiming(len(ids), cached, first if first is not None else total, total, tokens, stats)


def _figures(tallies: dict[str, _Tally]) -> dict[str, Any]:
    uncached, cached = tallies["uncached"], tallies["cached"]
    return {
        "prompt_tokens": cached.prompt_tokens,
        "cached_tokens": cached.cached_tokens,
        "uncached_ttft_ms": uncached.mean_ttft_ms,
        "cached_ttft_ms": cached.mean_ttft_ms,
        "ttft_speedup": runs.ratio(uncached.mean_ttft_ms, cached.mean_ttft_ms),
        "uncached_s": uncached.total_s,
        "cached_s": cached.total_s,
        "total_speedup": runs.ratio(uncached.total_s, cached.total_s),
        "uncached_accept_len": uncached.stats.acceptance_length,
        "cached_accept_len": cached.stats.acceptance_length,
    }


def _payload(
    args: PrefixBenchArgs,
    prompts: list[BenchPrompt],
    tallies: dict[str, dict[str, _Tally]],
    greedy: runs.GreedyCheck,
) -> dict[str, Any]:
    overall = {m: _Tally() for m in METHODS}
    for m in METHODS:
        for t in tallies[m].values():
            overall[m].merge(t)
    return {
        **_figures(overall),
        **greedy.figures(),
        "per_category": {
            c: {
                "prompts": sum(p.category == c for p in prompts),
                **_figures({m: tallies[m][c] for m in METHODS}),
            }
            for c in sorted(tallies["cached"])
        },
        "setup": runs.setup(
            args,
            len(prompts),
            follow_up=FOLLOW_UP,
            speculative_algorithm=args.algorithm,
            draft_path=args.draft_path,
        ),
    }


def render(p: dict[str, Any]) -> str:
    keys = [
        "prompt_tokens",
        "cached_tokens",
        "uncached_ttft_ms",
        "cached_ttft_ms",
        "ttft_speedup",
        "total_speedup",
    ]
    header = [
        "category",
        "prompts",
        "turn-2 prompt tokens",
        "cached",
        "TTFT ms",
        "TTFT ms cached",
        "TTFT x",
        "total x",
    ]
    algorithm = p["setup"]["speculative_algorithm"]
    if algorithm != "NONE":
        keys += ["uncached_accept_len", "cached_accept_len"]
        header += [f"{algorithm} acceptance", f"{algorithm} acceptance cached"]
    rows = [[c, v["prompts"], *(v[k] for k in keys)] for c, v in p["per_category"].items()]
    rows.append(["overall", p["setup"]["prompts"], *(p[k] for k in keys)])
    share = runs.ratio(p["cached_tokens"], p["prompt_tokens"])
    drafting = "plain decoding" if algorithm == "NONE" else f"both engines drafting with {algorithm}"
    return "\n".join(
        [
            format_table(header, rows),
            "",
            f"{drafting}: cached {100 * share:.0f}% of turn-2 prompt tokens; time to first token "
            f"{p['ttft_speedup']:.2f}x faster, whole turn {p['total_speedup']:.2f}x",
            runs.greedy_line("cached output equals uncached", p),
        ]
    )
