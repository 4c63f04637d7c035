"""`treespec bench ngram`: the engine plain vs the engine with the n-gram drafter vs HF prompt lookup.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run.
The n-gram engine drafts with SGLang's default n-gram budget (from the n-gram options); HF runs
`generate(..., prompt_lookup_num_tokens=10)` in fp32. The n-gram output must equal the plain output
(near-tie rule). The n-gram memory is the drafter's in-process one unless --redis-url names a Redis;
a Redis memory outlives the run, so a repeated run starts warm (give it another `--option tenant=...`
for a cold one).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.drafter import parse_options
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

DRAFTER = "ngram"
PLD_TOKENS = 10  # HF's prompt_lookup_num_tokens
METHODS = ("plain", "ngram", "hf_pld")


@dataclass(frozen=True)
class NgramBenchArgs(runs.BenchArgs):
    options: dict[str, Any]  # NgramConfig fields (--option KEY=VALUE; redis_url from --redis-url)

    @property
    def config(self) -> NgramConfig:
        return NgramConfig.from_options(self.options)

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        options = parse_options(ns.option)
        if ns.redis_url:
            options["redis_url"] = ns.redis_url
        NgramConfig.from_options(options)  # unknown or bad options fail here, before the model loads
        return {**super()._fields(ns), "options": options}


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("ngram", ns, NgramBenchArgs, bench_ngram, render)


def speculation(config: NgramConfig) -> SpeculationParams:
    """The n-gram drafter's default budget as per-request speculation."""
    b = config.default_budget()
    return SpeculationParams(num_draft_tokens=b.num_draft_tokens, num_steps=b.num_steps, eagle_topk=b.topk)


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    plain: Engine
    ngram: Engine
    drafter: Drafter
    speculation: SpeculationParams
    node_cost: runs.NodeCost


def bench_ngram(args: NgramBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    r = _load(args)
    tally = Throughput()
    greedy = runs.GreedyCheck(hf_next_logits(r.hf))
    n = args.max_new_tokens
    try:
        runs.warm_up(
            r.tokenizer, r.hf, (r.plain, None), (r.ngram, r.speculation), prompt_lookup_num_tokens=PLD_TOKENS
        )
        for i, prompt in enumerate(prompts):
            ids = chat_prompt_ids(r.tokenizer, prompt.text)
            plain = runs.time_engine(r.plain, f"plain-{i}", ids, n, tally, "plain", prompt.category, None)
            ngram = runs.time_engine(
                r.ngram, f"ngram-{i}", ids, n, tally, "ngram", prompt.category, r.speculation
            )
            runs.time_hf(r.hf, ids, n, tally, "hf_pld", prompt.category, prompt_lookup_num_tokens=PLD_TOKENS)
            greedy.check(prompt, ids, ngram.token_ids, plain.token_ids)
            print(
                f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(ngram.token_ids)} tokens,"
                f" accept {ngram.stats.acceptance_length:.2f}",
                flush=True,
            )
    finally:
        r.drafter.shutdown()
    return _payload(args, prompts, tally, greedy, r.speculation, r.node_cost)


def _load(args: NgramBenchArgs) -> _Runners:
    model = load_model(args.model)
    spec = speculation(args.config)
    context = DrafterContext(
        vocab_size=model.config.vocab_size, target_path=args.model, options=dict(args.options)
    )
    drafter = create_drafter(DRAFTER, context)
    plain = Engine(EngineConfig(model_path=args.model, max_running_requests=1), None, model)
    node_cost = runs.NodeCost.for_run(args, plain, spec.num_draft_tokens)
    ngram_config = EngineConfig(
        model_path=args.model,
        max_running_requests=1,
        speculation=spec,
        node_cost=node_cost.value,
        tree_cost=node_cost.tree,
    )
    return _Runners(
        hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
        tokenizer=transformers.AutoTokenizer.from_pretrained(args.model),
        plain=plain,
        ngram=Engine(ngram_config, drafter, model),
        drafter=drafter,
        speculation=spec,
        node_cost=node_cost,
    )


def _figures(tallies: Mapping[str, Tally]) -> dict[str, float]:
    plain, ngram, pld = (tallies[m] for m in METHODS)
    return {
        "plain_tps": plain.tps,
        "ngram_tps": ngram.tps,
        "hf_pld_tps": pld.tps,
        "ngram_accept_len": ngram.accept_len,
        "ngram_vs_plain": runs.ratio(ngram.tps, plain.tps),
        # Plain decoding's time until the first token (the prefill), which drafting cannot shorten.
        "plain_first_token_share": plain.first_token_share,
        **runs.drafting_figures("ngram", ngram),
    }


def _payload(
    args: NgramBenchArgs,
    prompts: list[BenchPrompt],
    t: Throughput,
    greedy: runs.GreedyCheck,
    spec: SpeculationParams,
    node_cost: runs.NodeCost,
) -> dict[str, Any]:
    ngram, pld = t.overall["ngram"], t.overall["hf_pld"]
    return {
        **_figures(t.overall),
        "ngram_vs_hf_pld": runs.ratio(ngram.tps, pld.tps),
        **greedy.figures(),
        "per_category": runs.per_category(prompts, t, METHODS, _figures),
        "setup": runs.setup(
            args,
            len(prompts),
            budget=runs.budget_figures(spec),
            ngram_options={k: v for k, v in args.options.items() if k != "redis_url"},
            memory=_memory(args.options.get("redis_url")),
            verify_cost=node_cost.report(),
            hf_prompt_lookup_num_tokens=PLD_TOKENS,
        ),
    }


def _memory(redis_url: str | None) -> str:
    """The Redis URL without its password, or "in-process"."""
    if not redis_url:
        return "in-process"
    parts = urlsplit(redis_url)
    if parts.password is None:
        return redis_url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def render(p: dict[str, Any]) -> str:
    return runs.render(
        p,
        [
            "category",
            "prompts",
            "plain tok/s",
            "ngram tok/s",
            "hf pld tok/s",
            "ngram/plain",
            "ngram accept",
            "plain 1st token share",
        ],
        [
            "plain_tps",
            "ngram_tps",
            "hf_pld_tps",
            "ngram_vs_plain",
            "ngram_accept_len",
            "plain_first_token_share",
        ],
        f"ngram / plain: {p['ngram_vs_plain']:.2f}x   ngram / hf_pld: {p['ngram_vs_hf_pld']:.2f}x\n"
        + runs.drafting_line(p, ["ngram"]),
        "ngram greedy output equals plain's",
    )
