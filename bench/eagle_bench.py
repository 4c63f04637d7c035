"""`treespec bench eagle`: the engine plain vs EAGLE-3 (in process, co-located, and merged with n-gram
matches) vs n-gram vs HF.

Batch size 1, temperature 0, the same weights and prompts, interleaved prompt by prompt in one run and
the methods' order turned by one from prompt to prompt, so that a drift of the machine's speed hits
every method alike. EAGLE-3 drafts with the shipped head for the bundled SmolLM2-135M-Instruct (or
--draft-path) under the --speculative-* tree budget (SGLang's 5/4/8 by default), once in the verifier's
process and once co-located: a `treespec drafter --kind eagle3 --colocate` process reading the target's
tensors and features through shared memory, asked over its local socket as `treespec serve` asks it,
with a generous deadline (a missed one would mean plain decoding); and once more in process with the
n-gram drafter's trees merged in (--speculative-eagle-ngram). The n-gram engine drafts with its own
default budget; HF runs greedy `generate` in fp32. Every speculative output must equal the plain output
(near-tie rule). Targets: EAGLE-3 acceptance length >= 3.0; EAGLE-3 tokens/s >= 1.8x plain and >= 2.5x
HF; co-located within 10% of in process.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.ngram_bench import speculation as ngram_speculation
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.throughput import Tally, Throughput
from treespec.drafter.eagle.config import EagleConfig
from treespec.drafter.eagle.head_config import EagleFormat
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.cli.eagle_flags import drafting_options
from treespec.shared.drafting.drafter import Drafter, DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.launcher.colocated import colocated_drafter
from treespec.shared.launcher.shared_cores import openmp_wait, shared_core_env
from treespec.shared.model.loader import load_model
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

DRAFTER = "eagle3"
METHODS = ("plain", "eagle3", "eagle3_colocated", "eagle3_ngram", "ngram", "hf_greedy")
SPECULATIVE = ("eagle3", "eagle3_colocated", "eagle3_ngram", "ngram")
TARGETS = (
    runs.Target("eagle3_accept_len", 3.0),
    runs.Target("eagle3_vs_plain", 1.8),
    runs.Target("eagle3_vs_hf", 2.5),
    runs.Target("eagle3_colocated_vs_eagle3", 0.9),
)


@dataclass(frozen=True)
class EagleBenchArgs(runs.BenchArgs):
    options: dict[str, Any]  # EagleConfig fields: draft_path (else the shipped head), the tree flags
    speculation: SpeculationParams  # the EAGLE-3 tree budget (--speculative-*)
    deadline_s: float  # the co-located drafter's per-round deadline

    @property
    def head_path(self) -> Path:
        return EagleConfig.from_options(self.options).head_path(EagleFormat.EAGLE3)

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        options = {"draft_path": str(ns.draft_path)} if ns.draft_path else {}
        options.update(drafting_options(ns))
        spec = runs.flag_speculation(ns, DRAFTER)
        head = EagleConfig.from_options(options).head_path(EagleFormat.EAGLE3)  # bad options fail here too
        if not (head / "config.json").is_file():  # fails here, before the model loads
            raise ValueError(f"no EAGLE-3 head in {head} (no config.json)")
        return {
            **super()._fields(ns),
            "options": options,
            "speculation": spec,
            "deadline_s": ns.draft_deadline,
        }


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("eagle", ns, EagleBenchArgs, bench_eagle, render)


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    engines: dict[str, tuple[Engine, SpeculationParams | None]]  # method -> engine, per-request spec
    node_cost: runs.NodeCost  # what every speculative engine tells its drafter a node and a tree cost


def bench_eagle(args: EagleBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    prompt_ids = [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    ngram_spec = ngram_speculation(NgramConfig())
    with _runners(args, prompt_ids, ngram_spec) as r:
        tally = Throughput()
        checks = {m: runs.GreedyCheck(hf_next_logits(r.hf)) for m in SPECULATIVE}
        n = args.max_new_tokens
        runs.warm_up(tokenizer, r.hf, *r.engines.values())
        for i, (prompt, ids) in enumerate(zip(prompts, prompt_ids, strict=True)):
            out = runs.time_in_turn(
                i, ids, n, tally, prompt.category, r.engines, r.hf, "hf_greedy", args.repeats
            )
            for m, check in checks.items():
                check.check(prompt, ids, out[m].token_ids, out["plain"].token_ids)
            accepts = " ".join(f"{m} {out[m].stats.acceptance_length:.2f}" for m in SPECULATIVE)
            print(
                f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(out['plain'].token_ids)} tokens,"
                f" accept {accepts}",
                flush=True,
            )
    return _payload(args, prompts, tally, checks, ngram_spec, r.node_cost)


@contextmanager
def _runners(
    args: EagleBenchArgs, prompt_ids: list[list[int]], ngram_spec: SpeculationParams
) -> Iterator[_Runners]:
    """One model for every engine; the drafters stopped (the co-located process too) on exit."""
    model = load_model(args.model)
    vocab_size = model.config.vocab_size
    with ExitStack() as stack:
        eagle = create_drafter(
            DRAFTER, DrafterContext(vocab_size, args.model, dict(args.options), LocalTargetAccess(model))
        )
        stack.callback(eagle.shutdown)
        merged_options = {**args.options, "ngram": {}}
        merged = create_drafter(
            DRAFTER, DrafterContext(vocab_size, args.model, merged_options, LocalTargetAccess(model))
        )
        stack.callback(merged.shutdown)
        ngram = create_drafter("ngram", DrafterContext(vocab_size, args.model, {}))
        stack.callback(ngram.shutdown)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="treespec-bench-")))
        co = stack.enter_context(
            colocated_drafter(
                model,
                DRAFTER,
                dict(args.options),
                vocab_size,
                workdir,
                deadline_s=args.deadline_s,
                # As `treespec serve` starts it; this process waits as its environment says (setup).
                env={"OMP_NUM_THREADS": str(args.threads), **shared_core_env(os.environ)},
            )
        )

        spec = args.speculation
        plain = runs.engine(model, args.model, None, None, prompt_ids, args.max_new_tokens)
        node_cost = runs.NodeCost.for_run(args, plain, spec.num_draft_tokens)

        def engine(drafter: Drafter, spec: SpeculationParams) -> tuple[Engine, SpeculationParams | None]:
            new_tokens = args.max_new_tokens
            return runs.engine(model, args.model, drafter, spec, prompt_ids, new_tokens, node_cost), spec

        yield _Runners(
            hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
            engines={
                "plain": (plain, None),
                "eagle3": engine(eagle, spec),
                "eagle3_colocated": engine(co.remote, spec),
                "eagle3_ngram": engine(merged, spec),
                "ngram": engine(ngram, ngram_spec),
            },
            node_cost=node_cost,
        )


def _figures(tallies: Mapping[str, Tally]) -> dict[str, Any]:
    plain, eagle, colocated, merged, ngram, hf = (tallies[m] for m in METHODS)
    figures = {
        "plain_tps": plain.tps,
        "eagle3_tps": eagle.tps,
        "eagle3_colocated_tps": colocated.tps,
        "eagle3_ngram_tps": merged.tps,
        "ngram_tps": ngram.tps,
        "hf_greedy_tps": hf.tps,
        "eagle3_accept_len": eagle.accept_len,
        "eagle3_colocated_accept_len": colocated.accept_len,
        "eagle3_ngram_accept_len": merged.accept_len,
        "ngram_accept_len": ngram.accept_len,
        "eagle3_vs_plain": runs.ratio(eagle.tps, plain.tps),
        "eagle3_vs_hf": runs.ratio(eagle.tps, hf.tps),
        "eagle3_colocated_vs_eagle3": runs.ratio(colocated.tps, eagle.tps),
        "eagle3_ngram_vs_plain": runs.ratio(merged.tps, plain.tps),
        "eagle3_ngram_vs_hf": runs.ratio(merged.tps, hf.tps),
        "ngram_vs_plain": runs.ratio(ngram.tps, plain.tps),
        **runs.drafting_figures("eagle3", eagle),
        **runs.drafting_figures("eagle3_colocated", colocated),
        **runs.drafting_figures("eagle3_ngram", merged),
        **runs.drafting_figures("ngram", ngram),
    }
    return {**figures, "targets": runs.check_targets(figures, TARGETS)}


def _payload(
    args: EagleBenchArgs,
    prompts: list[BenchPrompt],
    t: Throughput,
    checks: Mapping[str, runs.GreedyCheck],
    ngram_spec: SpeculationParams,
    node_cost: runs.NodeCost,
) -> dict[str, Any]:
    figures = _figures(t.overall)
    return {
        **figures,
        "targets_pass": all(v["pass"] for v in figures["targets"].values()),
        **runs.greedy_figures(checks),
        "per_category": runs.per_category(prompts, t, METHODS, _figures),
        "setup": runs.setup(
            args,
            len(prompts),
            eagle3_head=str(args.head_path),
            eagle3_budget=runs.budget_figures(args.speculation),
            eagle3_colocated="a `treespec drafter --kind eagle3 --colocate` process (shared memory; "
            "the Draft stream over its local socket)",
            eagle3_ngram="the same head, its trees merged with n-gram trees (--speculative-eagle-ngram)",
            draft_deadline_s=args.deadline_s,
            openmp_wait=openmp_wait(os.environ),
            colocated_openmp_wait=openmp_wait({**os.environ, **shared_core_env(os.environ)}),
            ngram_budget=runs.budget_figures(ngram_spec),
            ngram_memory="in-process",
            verify_cost=node_cost.report(),
            hf="generate, greedy, fp32",
        ),
    }


def render(p: dict[str, Any]) -> str:
    throughput = runs.table(
        p,
        [
            "category",
            "prompts",
            "plain tok/s",
            "eagle3 tok/s",
            "co-located tok/s",
            "eagle3+ngram tok/s",
            "ngram tok/s",
            "hf tok/s",
        ],
        ["plain_tps", "eagle3_tps", "eagle3_colocated_tps", "eagle3_ngram_tps", "ngram_tps", "hf_greedy_tps"],
    )
    targets = runs.table(
        p,
        [
            "category",
            "prompts",
            "eagle3 accept >= 3.0",
            "eagle3/plain >= 1.8",
            "eagle3/hf >= 2.5",
            "co-located/in-process >= 0.9",
            "co-located accept",
            "eagle3+ngram accept",
            "eagle3+ngram/plain",
            "ngram accept",
            "ngram/plain",
        ],
        [t.key for t in TARGETS]
        + [
            "eagle3_colocated_accept_len",
            "eagle3_ngram_accept_len",
            "eagle3_ngram_vs_plain",
            "ngram_accept_len",
            "ngram_vs_plain",
        ],
    )
    ratios = (
        f"eagle3 / plain: {p['eagle3_vs_plain']:.2f}x   eagle3 / hf: {p['eagle3_vs_hf']:.2f}x   "
        f"co-located / in-process: {p['eagle3_colocated_vs_eagle3']:.2f}x   "
        f"eagle3 accept: {p['eagle3_accept_len']:.2f}   targets: {'pass' if p['targets_pass'] else 'FAIL'}\n"
        f"eagle3+ngram / plain: {p['eagle3_ngram_vs_plain']:.2f}x   eagle3+ngram / hf: "
        f"{p['eagle3_ngram_vs_hf']:.2f}x   eagle3+ngram accept: {p['eagle3_ngram_accept_len']:.2f}"
    )
    greedy = [runs.greedy_line(f"{m} greedy output equals plain's", p["greedy"][m]) for m in SPECULATIVE]
    lines = [throughput, "", targets, "", ratios, runs.drafting_line(p, SPECULATIVE), *greedy]
    return "\n".join([*lines, _waiting_line(p["setup"])])


def _waiting_line(setup: Mapping[str, Any]) -> str:
    """How the two co-located processes' OpenMP threads waited: the bench process (the verifier side)
    as its environment says, the drafter process as `treespec serve` starts it."""
    mine, drafter = setup["openmp_wait"], setup["colocated_openmp_wait"]
    line = f"OpenMP waits: this process {mine}, the co-located drafter {drafter}"
    if mine != drafter:
        line += f" (run with {drafter} to measure both as treespec serve runs them)"
    return line
