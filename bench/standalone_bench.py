"""`treespec bench standalone`: the engine plain vs with a standalone draft model vs HF's assisted
generation with the same draft model.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run, the
methods' order turned by one from prompt to prompt. The standalone engine drafts with the draft model
(`--draft-path`, required) under the --speculative-* tree budget, in process; HF runs `generate(...,
assistant_model=draft)` in fp32, its own speculative decoding with a draft model. The standalone
output must equal the plain output (near-tie rule).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.drafter.standalone.config import StandaloneConfig
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.loader import load_model
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

DRAFTER = "standalone"
METHODS = ("plain", "standalone", "hf_assisted")


@dataclass(frozen=True)
class StandaloneBenchArgs(runs.BenchArgs):
    options: dict[str, Any]  # StandaloneConfig fields: draft_path, kv_tokens
    speculation: SpeculationParams  # the tree budget (--speculative-*)

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        options: dict[str, Any] = {"draft_path": ns.draft_path}
        StandaloneConfig.from_options(options).check_path()  # fails here, before a model loads
        spec = runs.flag_speculation(ns, DRAFTER)
        return {**super()._fields(ns), "options": options, "speculation": spec}


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("standalone", ns, StandaloneBenchArgs, bench_standalone, render)


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    hf_draft: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    plain: Engine
    standalone: Engine
    drafter: Drafter
    node_cost: runs.NodeCost


def bench_standalone(args: StandaloneBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    r = _load(args, prompts)
    tally = Throughput()
    greedy = runs.GreedyCheck(hf_next_logits(r.hf))
    n, spec = args.max_new_tokens, args.speculation
    try:
        runs.warm_up(r.tokenizer, r.hf, (r.plain, None), (r.standalone, spec), assistant_model=r.hf_draft)
        engines = {"plain": (r.plain, None), "standalone": (r.standalone, spec)}
        for i, prompt in enumerate(prompts):
            ids = chat_prompt_ids(r.tokenizer, prompt.text)
            out = runs.time_in_turn(
                i,
                ids,
                n,
                tally,
                prompt.category,
                engines,
                r.hf,
                "hf_assisted",
                args.repeats,
                assistant_model=r.hf_draft,
            )
            plain, drafted = out["plain"], out["standalone"]
            greedy.check(prompt, ids, drafted.token_ids, plain.token_ids)
            print(
                f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(drafted.token_ids)} tokens,"
                f" accept {drafted.stats.acceptance_length:.2f}",
                flush=True,
            )
    finally:
        r.drafter.shutdown()
    return _payload(args, prompts, tally, greedy, r.node_cost)


def _load(args: StandaloneBenchArgs, prompts: list[BenchPrompt]) -> _Runners:
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    prompt_ids = [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    model = load_model(args.model)
    context = DrafterContext(model.config.vocab_size, args.model, dict(args.options))
    drafter = create_drafter(DRAFTER, context)
    spec = args.speculation
    plain = runs.engine(model, args.model, None, None, prompt_ids, args.max_new_tokens)
    node_cost = runs.NodeCost.for_run(args, plain, spec.num_draft_tokens)
    draft_path = StandaloneConfig.from_options(args.options).path
    return _Runners(
        hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
        hf_draft=transformers.AutoModelForCausalLM.from_pretrained(draft_path, dtype=torch.float32).eval(),
        tokenizer=tokenizer,
        plain=plain,
        standalone=runs.engine(model, args.model, drafter, spec, prompt_ids, args.max_new_tokens, node_cost),
        drafter=drafter,
        node_cost=node_cost,
    )


def _figures(tallies: Mapping[str, Tally]) -> dict[str, float]:
    plain, drafted, assisted = (tallies[m] for m in METHODS)
    return {
        "plain_tps": plain.tps,
        "standalone_tps": drafted.tps,
        "hf_assisted_tps": assisted.tps,
        "standalone_accept_len": drafted.accept_len,
        "standalone_vs_plain": runs.ratio(drafted.tps, plain.tps),
        "standalone_vs_hf_assisted": runs.ratio(drafted.tps, assisted.tps),
        "plain_first_token_share": plain.first_token_share,
        **runs.drafting_figures("standalone", drafted),
    }


def _payload(
    args: StandaloneBenchArgs,
    prompts: list[BenchPrompt],
    t: Throughput,
    greedy: runs.GreedyCheck,
    node_cost: runs.NodeCost,
) -> dict[str, Any]:
    spec = args.speculation
    return {
        **_figures(t.overall),
        **greedy.figures(),
        "per_category": runs.per_category(prompts, t, METHODS, _figures),
        "setup": runs.setup(
            args,
            len(prompts),
            draft_model=str(args.options["draft_path"]),
            budget=runs.budget_figures(spec),
            verify_cost=node_cost.report(),
            hf="generate(assistant_model=the draft model), fp32",
        ),
    }


def render(p: dict[str, Any]) -> str:
    return runs.render(
        p,
        [
            "category",
            "prompts",
            "plain tok/s",
            "standalone tok/s",
            "hf assisted tok/s",
            "standalone/plain",
            "standalone accept",
        ],
        ["plain_tps", "standalone_tps", "hf_assisted_tps", "standalone_vs_plain", "standalone_accept_len"],
        f"standalone / plain: {p['standalone_vs_plain']:.2f}x   "
        f"standalone / hf_assisted: {p['standalone_vs_hf_assisted']:.2f}x\n"
        + runs.drafting_line(p, ["standalone"]),
        "standalone greedy output equals plain's",
    )
