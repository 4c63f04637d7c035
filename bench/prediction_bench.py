"""`treespec bench prediction`: Predicted Outputs (OpenAI's `prediction`) on a rewrite task.

The task is the one Predicted Outputs exist for: a client sends text back to have it edited and
passes the text as the prediction. For each prompt, the target first answers it (plain decoding,
not timed); then the timed request asks it to rewrite that answer, fixing any mistakes, with the
answer in the message and as the prediction. On that request, side by side (batch 1, temperature 0):
plain decoding; the prediction alone (no drafter); the n-gram drafter, which matches the answer in
the prompt; and the n-gram drafter with the prediction. Every speculative output must equal plain
decoding's (near-tie rule). `prediction_used` is the share of the rewrite's tokens that follow the
prediction (its accepted prediction tokens over its tokens): how much there was to gain.
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
from treespec.bench.ngram_bench import NgramBenchArgs, speculation
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.gateway.prediction import prediction_details
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.model.loader import load_model
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

REWRITE = "Rewrite the following text, fixing any mistakes, and give back the whole text:\n\n{text}"
METHODS = ("plain", "prediction", "ngram", "ngram_prediction")


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("prediction", ns, NgramBenchArgs, bench_prediction, render)


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    plain: Engine
    predicted: Engine  # no drafter: only the predictions draft
    ngram: Engine
    drafter: Drafter
    speculation: SpeculationParams
    node_cost: runs.NodeCost


@dataclass(frozen=True)
class _Task:
    ids: list[int]  # the rewrite request's prompt
    prediction: list[int]  # the earlier answer's tokens, as a client's text is tokenized


def bench_prediction(args: NgramBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    r = _load(args, prompts)
    tally = Throughput()
    greedy = runs.GreedyCheck(hf_next_logits(r.hf))
    used: dict[str, list[float]] = {}
    n = args.max_new_tokens
    spec = r.speculation
    try:
        runs.warm_up(r.tokenizer, r.hf, (r.plain, None), (r.predicted, spec), (r.ngram, spec))
        for i, prompt in enumerate(prompts):
            task = _task(r, prompt, n)
            category = prompt.category
            plain = runs.time_engine(r.plain, f"plain-{i}", task.ids, n, tally, "plain", category, None)
            timed = {
                "prediction": (r.predicted, task.prediction),
                "ngram": (r.ngram, []),
                "ngram_prediction": (r.ngram, task.prediction),
            }
            for method, (engine, prediction) in timed.items():
                got = runs.time_engine(
                    engine, f"{method}-{i}", task.ids, n, tally, method, category, spec, prediction
                )
                greedy.check(prompt, task.ids, got.token_ids, plain.token_ids)
            details = prediction_details(task.prediction, [plain.token_ids])
            used.setdefault(category, []).append(
                details.accepted_prediction_tokens / max(1, len(plain.token_ids))
            )
            print(
                f"[{i + 1}/{len(prompts)}] {category}: {len(plain.token_ids)} tokens,"
                f" {100 * used[category][-1]:.0f}% of them predicted",
                flush=True,
            )
    finally:
        r.drafter.shutdown()
    return _payload(args, prompts, tally, greedy, used, r)


def _task(r: _Runners, prompt: BenchPrompt, n: int) -> _Task:
    """The rewrite of the target's own answer to `prompt`, with that answer as the prediction."""
    answer = r.plain.generate([runs.request("answer", chat_prompt_ids(r.tokenizer, prompt.text), n, None)])
    text = str(r.tokenizer.decode(answer["answer"].token_ids, skip_special_tokens=True)).strip()
    ids = chat_prompt_ids(r.tokenizer, REWRITE.format(text=text))
    return _Task(ids, list(r.tokenizer(text, add_special_tokens=False)["input_ids"]))


def _load(args: NgramBenchArgs, prompts: list[BenchPrompt]) -> _Runners:
    model = load_model(args.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    spec = speculation(args.config)
    lengths = _prompt_lengths(tokenizer, prompts, args.max_new_tokens)
    plain = runs.engine(model, args.model, None, None, lengths, args.max_new_tokens)
    cost = runs.NodeCost.for_run(args, plain, spec.num_draft_tokens)
    drafter = args.drafter(model)
    return _Runners(
        hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
        tokenizer=tokenizer,
        plain=plain,
        predicted=runs.engine(model, args.model, None, spec, lengths, args.max_new_tokens, cost),
        ngram=runs.engine(model, args.model, drafter, spec, lengths, args.max_new_tokens, cost),
        drafter=drafter,
        speculation=spec,
        node_cost=cost,
    )


def _prompt_lengths(
    tokenizer: transformers.PreTrainedTokenizerBase, prompts: list[BenchPrompt], n: int
) -> list[list[int]]:
    """Stand-ins as long as the prompts the engines take, for their KV pools: the first turns, and
    the rewrites (the instruction and an answer of at most `n` tokens, with some slack for the
    answer's text tokenizing longer than it was generated)."""
    rewrite = len(chat_prompt_ids(tokenizer, REWRITE.format(text=""))) + n + n // 4
    return [chat_prompt_ids(tokenizer, p.text) for p in prompts] + [[0] * rewrite]


def _figures(tallies: Mapping[str, Tally]) -> dict[str, float]:
    plain, predicted, ngram, both = (tallies[m] for m in METHODS)
    return {
        "plain_tps": plain.tps,
        "prediction_tps": predicted.tps,
        "ngram_tps": ngram.tps,
        "ngram_prediction_tps": both.tps,
        "prediction_accept_len": predicted.accept_len,
        "ngram_accept_len": ngram.accept_len,
        "ngram_prediction_accept_len": both.accept_len,
        "prediction_vs_plain": runs.ratio(predicted.tps, plain.tps),
        "ngram_vs_plain": runs.ratio(ngram.tps, plain.tps),
        "ngram_prediction_vs_plain": runs.ratio(both.tps, plain.tps),
        "ngram_prediction_vs_ngram": runs.ratio(both.tps, ngram.tps),
    }


def _payload(
    args: NgramBenchArgs,
    prompts: list[BenchPrompt],
    t: Throughput,
    greedy: runs.GreedyCheck,
    used: Mapping[str, list[float]],
    r: _Runners,
) -> dict[str, Any]:
    per_category = runs.per_category(prompts, t, METHODS, _figures)
    for category, shares in used.items():
        per_category[category]["prediction_used"] = sum(shares) / len(shares)
    every = [s for shares in used.values() for s in shares]
    return {
        **_figures(t.overall),
        "prediction_used": sum(every) / max(1, len(every)),
        **greedy.figures(),
        "per_category": per_category,
        "setup": runs.setup(
            args,
            len(prompts),
            task=REWRITE,
            budget=runs.budget_figures(r.speculation),
            ngram_options={k: v for k, v in args.options.items() if k != "redis_url"},
            verify_cost=r.node_cost.report(),
        ),
    }


def render(p: dict[str, Any]) -> str:
    return runs.render(
        p,
        [
            "category",
            "prompts",
            "plain tok/s",
            "prediction tok/s",
            "ngram tok/s",
            "ngram+prediction tok/s",
            "prediction accept",
            "ngram+prediction accept",
            "predicted share",
        ],
        [
            "plain_tps",
            "prediction_tps",
            "ngram_tps",
            "ngram_prediction_tps",
            "prediction_accept_len",
            "ngram_prediction_accept_len",
            "prediction_used",
        ],
        f"prediction / plain: {p['prediction_vs_plain']:.2f}x   ngram / plain: {p['ngram_vs_plain']:.2f}x"
        f"   ngram+prediction / plain: {p['ngram_prediction_vs_plain']:.2f}x"
        f"   ngram+prediction / ngram: {p['ngram_prediction_vs_ngram']:.2f}x",
        "every speculative greedy output equals plain's",
    )
