"""`treespec bench node-cost`: the n-gram drafter at several node costs, side by side with plain decoding.

A drafter keeps a draft node only where its chance of being accepted pays for verifying it: the node
cost, a share of a decoding step (services/verifier/verify_cost.py). A verifier measures it as it
starts and refines it from its own decode steps (the default; `online` here); `--speculative-node-cost`
fixes it. This bench asks whether that price is well placed on this machine, and what to pass to the
flag where it is not. In one run, prompt by prompt, batch size 1, temperature 0:

- plain decoding;
- `online`: the n-gram engine priced as `treespec serve` prices it (measured at start, refined as it
  decodes);
- `xF` for each of `--factors`: the n-gram engine with the node and tree costs fixed at F times the
  start-up probe's (x0: every node free, as far as the budget goes; x1: the probe's own price, which
  `bench ngram` uses).

The methods run in an order shuffled afresh for every prompt (seeded, so a rerun keeps it), so that no
method always runs first or right after the same other one. Each n-gram engine has a drafter of its
own and a cache salt of its own: no engine drafts from another's outputs. No engine runs the
speculation gate (services/verifier/speculation_gate.py): it would leave out the drafts of the
settings that price nodes too low, and the prices are the subject here. Every greedy output must
equal plain decoding's (the near-tie rule). Per category and overall: tokens/s, each setting over
plain, acceptance, and draft nodes per verify step; the fastest setting. The best factor near 1, or
`online` within noise of the fastest, says the measured price is right here.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import transformers

from treespec.bench import runs
from treespec.bench.greedy_match import hf_next_logits
from treespec.bench.ngram_bench import NgramBenchArgs, speculation
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, load_prompts
from treespec.bench.report import format_table
from treespec.bench.throughput import Tally, Throughput
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.engine import Engine
from treespec.verifier.request import SpeculationParams

PLAIN = "plain"
ONLINE = "online"  # the cost measured at start and refined from the decode steps: the default
ORDER_SEED = 2026  # the methods' order for prompt i is shuffled with seed ORDER_SEED + i


@dataclass(frozen=True)
class NodeCostBenchArgs(NgramBenchArgs):
    """`bench ngram`'s drafter arguments (no fixed costs: they are the subject) and the factors."""

    factors: tuple[float, ...] = ()

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        return {**super()._fields(ns), "factors": parse_factors(ns.factors)}


def parse_factors(text: str) -> tuple[float, ...]:
    """Comma-separated finite factors >= 0, each once, in the order given."""
    try:
        factors = tuple(dict.fromkeys(float(part) for part in text.split(",")))
    except ValueError:
        factors = ()
    if not factors or not all(0.0 <= f < math.inf for f in factors):
        raise ValueError(f"--factors: finite numbers >= 0, comma-separated (got {text!r})")
    return factors


def setting_name(factor: float) -> str:
    """x0, x0.5, x1, x2.5: a fixed setting's name (and its figures' key prefix)."""
    return f"x{factor:g}"


def run(ns: argparse.Namespace) -> int:
    return runs.run_bench("node-cost", ns, NodeCostBenchArgs, bench_node_cost, render)


@dataclass
class _Setting:
    """A speculative engine of the run: its name, engine, drafter and the node cost it was given
    (None: measured and refined by the engine)."""

    name: str
    engine: Engine
    drafter: Drafter
    node_cost: float | None


@dataclass
class _Runners:
    hf: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    plain: Engine
    settings: list[_Setting]
    speculation: SpeculationParams
    probe: runs.NodeCost

    def shutdown(self) -> None:
        for setting in self.settings:
            setting.drafter.shutdown()


def bench_node_cost(args: NodeCostBenchArgs) -> dict[str, Any]:
    prompts = load_prompts(args.prompts, args.per_category)
    r = _load(args, prompts)
    tally = Throughput()
    greedy = {s.name: runs.GreedyCheck(hf_next_logits(r.hf)) for s in r.settings}
    try:
        runs.warm_up(r.tokenizer, r.hf, (r.plain, None), *((s.engine, r.speculation) for s in r.settings))
        for i, prompt in enumerate(prompts):
            ids = chat_prompt_ids(r.tokenizer, prompt.text)
            outputs = _run_prompt(r, args, i, prompt, ids, tally)
            for name, check in greedy.items():
                check.check(prompt, ids, outputs[name], outputs[PLAIN])
            print(f"[{i + 1}/{len(prompts)}] {prompt.category}: {len(outputs[PLAIN])} tokens", flush=True)
    finally:
        r.shutdown()
    online = next(s for s in r.settings if s.name == ONLINE).engine.verify_cost.node_cost(1)
    return _payload(args, prompts, r, tally, greedy, online)


def _run_prompt(
    r: _Runners,
    args: NodeCostBenchArgs,
    i: int,
    prompt: BenchPrompt,
    ids: list[int],
    tally: Throughput,
) -> dict[str, list[int]]:
    """Every method on one prompt, in the prompt's own shuffled order; each one's output."""
    methods: list[tuple[str, Engine, SpeculationParams | None]] = [(PLAIN, r.plain, None)]
    methods += [(s.name, s.engine, r.speculation) for s in r.settings]
    outputs: dict[str, list[int]] = {}
    for name, engine, spec in random.Random(ORDER_SEED + i).sample(methods, len(methods)):
        result = runs.time_engine(
            engine,
            f"{name}-{i}",
            ids,
            args.max_new_tokens,
            tally,
            name,
            prompt.category,
            spec,
            cache_salt=name,
        )
        outputs[name] = result.token_ids
    return outputs


def _load(args: NodeCostBenchArgs, prompts: Sequence[BenchPrompt]) -> _Runners:
    model = load_model(args.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    spec = speculation(args.config)
    lengths = [chat_prompt_ids(tokenizer, p.text) for p in prompts]
    plain = runs.engine(model, args.model, None, None, lengths, args.max_new_tokens)
    probe = runs.NodeCost.for_run(args, plain, spec.num_draft_tokens)
    costs: list[tuple[str, runs.NodeCost | None]] = [(ONLINE, None)]
    costs += [(setting_name(f), runs.NodeCost(f * probe.value, f * probe.tree)) for f in args.factors]
    settings = [_setting(args, model, spec, lengths, name, cost) for name, cost in costs]
    return _Runners(
        hf=transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval(),
        tokenizer=tokenizer,
        plain=plain,
        settings=settings,
        speculation=spec,
        probe=probe,
    )


def _setting(
    args: NodeCostBenchArgs,
    model: CausalLM,
    spec: SpeculationParams,
    lengths: Sequence[Sequence[int]],
    name: str,
    cost: runs.NodeCost | None,
) -> _Setting:
    drafter = args.drafter(model)
    # No speculation gate: it would leave out the dear settings' drafts, the costs being the subject.
    engine = runs.engine(model, args.model, drafter, spec, lengths, args.max_new_tokens, cost, adaptive=False)
    return _Setting(name, engine, drafter, None if cost is None else cost.value)


def _figures(names: Sequence[str], tallies: Mapping[str, Tally]) -> dict[str, Any]:
    plain = tallies[PLAIN]
    figures: dict[str, Any] = {f"{PLAIN}_tps": plain.tps}
    for name in names:
        t = tallies[name]
        figures[f"{name}_tps"] = t.tps
        figures[f"{name}_vs_plain"] = runs.ratio(t.tps, plain.tps)
        figures[f"{name}_accept_len"] = t.accept_len
        figures[f"{name}_nodes_per_step"] = t.nodes_per_step
    figures["fastest"] = max(names, key=lambda name: figures[f"{name}_tps"])
    return figures


def _payload(
    args: NodeCostBenchArgs,
    prompts: Sequence[BenchPrompt],
    r: _Runners,
    t: Throughput,
    greedy: Mapping[str, runs.GreedyCheck],
    online_node_cost: float,
) -> dict[str, Any]:
    names = [s.name for s in r.settings]
    figures = functools.partial(_figures, names)
    return {
        **figures(t.overall),
        "settings": {s.name: {"node_cost": s.node_cost} for s in r.settings},
        "online_node_cost": online_node_cost,
        **runs.greedy_figures(greedy),
        "per_category": runs.per_category(prompts, t, (PLAIN, *names), figures),
        "setup": runs.setup(
            args,
            len(prompts),
            budget=runs.budget_figures(r.speculation),
            ngram_options={k: v for k, v in args.options.items() if k != "redis_url"},
            factors=list(args.factors),
            verify_cost=r.probe.report(),
        ),
    }


def render(p: dict[str, Any]) -> str:
    names = list(p["settings"])
    header = ["category", "prompts", "plain tok/s", *(f"{n}/plain" for n in names), "fastest"]
    keys = ["plain_tps", *(f"{n}_vs_plain" for n in names), "fastest"]
    rows = [_setting_row(p, name) for name in names]
    probe = p["setup"]["verify_cost"]
    return "\n".join(
        [
            runs.table(p, header, keys),
            "",
            format_table(["setting", "node cost", "tok/s", "x plain", "accept", "nodes/step"], rows),
            "",
            f"node cost at batch 1: the probe's {probe['node_cost']:.3f} (tree cost"
            f" {probe['tree_cost']:.3f}), online at the end of the run {p['online_node_cost']:.3f}",
            f"fastest overall: {p['fastest']} ({p[p['fastest'] + '_vs_plain']:.2f}x plain);"
            f" online {p['online_vs_plain']:.2f}x plain",
            runs.greedy_line("every setting's greedy output equals plain's", p),
        ]
    )


def _setting_row(p: Mapping[str, Any], name: str) -> list[Any]:
    """A setting's node cost (measured: "online") and overall figures."""
    cost = p["settings"][name]["node_cost"]
    figures = (p[f"{name}_{key}"] for key in ("tps", "vs_plain", "accept_len", "nodes_per_step"))
    return [name, ONLINE if cost is None else f"{cost:.3f}", *figures]
