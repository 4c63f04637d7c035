"""`treespec bench ngram`: the engine plain vs the engine with the n-gram drafter vs HF prompt lookup.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run,
the methods' order turned by one from prompt to prompt.
The n-gram engine drafts with SGLang's default n-gram budget (from the n-gram options); HF runs
`generate(..., prompt_lookup_num_tokens=10)` in fp32. The n-gram output must equal the plain output
(near-tie rule). The n-gram memory is the drafter's in-process one unless --redis-url names a Redis;
a Redis memory outlives the run, so a repeated run starts warm (give it another `--option tenant=...`
for a cold one). Beside the three, the copy ceiling (bench/copy_ceiling.py) replays plain decoding's
output with a perfect copying drafter: how far drafting from the request's own history could go.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import torch
import transformers

from treespec.bench import runs
from treespec.bench.copy_ceiling import copy_ceiling
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.plugin_flags import parse_options
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

DRAFTER = "ngram"
PLD_TOKENS = 10  # HF's prompt_lookup_num_tokens
METHODS = ("plain", "ngram", "hf_pld")
CEILING = "copy_ceiling"  # not run: plain decoding's output replayed by a perfect copying drafter


@dataclass(frozen=True)
class NgramBenchArgs(runs.BenchArgs):
    options: dict[str, Any]  # NgramConfig fields (--option KEY=VALUE; redis_url from --redis-url)

    @property
    def config(self) -> NgramConfig:
        return NgramConfig.from_options(self.options)

    def drafter(self, model: CausalLM) -> Drafter:
        """A new n-gram drafter for `model` with these options (each its own in-process memory)."""
        context = DrafterContext(
            vocab_size=model.config.vocab_size, target_path=self.model, options=dict(self.options)
        )
        return create_drafter(DRAFTER, context)

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
        engines = {"plain": (r.plain, None), "ngram": (r.ngram, r.speculation)}
        for i, prompt in enumerate(prompts):
            ids = chat_prompt_ids(r.tokenizer, prompt.text)
            before = replace(tally.overall["plain"])
            out = runs.time_in_turn(
                i,
                ids,
                n,
                tally,
                prompt.category,
                engines,
                r.hf,
                "hf_pld",
                args.repeats,
                prompt_lookup_num_tokens=PLD_TOKENS,
            )
            plain, ngram = out["plain"], out["ngram"]
            spent = tally.overall["plain"].since(before)
            _add_ceiling(
                tally, prompt.category, ids, plain.token_ids, spent, args.config, r.speculation, r.node_cost
            )
            greedy.check(prompt, ids, ngram.token_ids, plain.token_ids)
            print(
                f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(ngram.token_ids)} tokens,"
                f" accept {ngram.stats.acceptance_length:.2f}",
                flush=True,
            )
    finally:
        r.drafter.shutdown()
    return _payload(args, prompts, tally, greedy, r.speculation, r.node_cost)


def _add_ceiling(
    tally: Throughput,
    category: str,
    ids: Sequence[int],
    tokens: Sequence[int],
    plain: Tally,
    config: NgramConfig,
    spec: SpeculationParams,
    cost: runs.NodeCost,
) -> None:
    """The copy ceiling of plain decoding's output (bench/copy_ceiling.py, with the drafter's match
    window and chain length), timed as plain decoding's prefill (`plain`: that output's tally) and, for
    its steps, plain decoding's step plus the run's node and tree costs."""
    depth = min(config.branch_length, spec.num_steps)
    ceiling = copy_ceiling(ids, tokens, config.min_match_window_size, depth)
    step_s = (plain.seconds - plain.first_token_seconds) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
    seconds = plain.first_token_seconds + step_s * ceiling.decode_steps(cost.value, cost.tree)
    tally.add(
        CEILING,
        category,
        len(tokens),
        seconds,
        ceiling.steps,
        ceiling.committed,
        0.0,
        plain.first_token_seconds,
    )


def _load(args: NgramBenchArgs) -> _Runners:
    model = load_model(args.model)
    spec = speculation(args.config)
    drafter = args.drafter(model)
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
    plain, ngram, pld, ceiling = (tallies[m] for m in (*METHODS, CEILING))
    return {
        "plain_tps": plain.tps,
        "ngram_tps": ngram.tps,
        "hf_pld_tps": pld.tps,
        "ngram_accept_len": ngram.accept_len,
        "ngram_vs_plain": runs.ratio(ngram.tps, plain.tps),
        # Plain decoding's time until the first token (the prefill), which drafting cannot shorten.
        "plain_first_token_share": plain.first_token_share,
        **runs.drafting_figures("ngram", ngram),
        # A perfect copying drafter: the acceptance it reaches from the request's own history and how
        # fast it would decode at this run's step time and node cost (bench/copy_ceiling.py).
        "copy_ceiling_accept_len": ceiling.accept_len,
        "copy_ceiling_tps": ceiling.tps,
        "copy_ceiling_vs_plain": runs.ratio(ceiling.tps, plain.tps),
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
        "per_category": runs.per_category(prompts, t, (*METHODS, CEILING), _figures),
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
            "copy ceiling accept",
            "copy ceiling/plain",
        ],
        [
            "plain_tps",
            "ngram_tps",
            "hf_pld_tps",
            "ngram_vs_plain",
            "ngram_accept_len",
            "plain_first_token_share",
            "copy_ceiling_accept_len",
            "copy_ceiling_vs_plain",
        ],
        f"ngram / plain: {p['ngram_vs_plain']:.2f}x   ngram / hf_pld: {p['ngram_vs_hf_pld']:.2f}x\n"
        + runs.drafting_line(p, ["ngram"])
        + "\ncopy ceiling (plain's output replayed by a drafter that copies the right continuation from"
        + " the request's own history, timed at plain's steps and the node cost): acceptance"
        + f" {p['copy_ceiling_accept_len']:.2f}, {p['copy_ceiling_vs_plain']:.2f}x plain",
        "ngram greedy output equals plain's",
    )
