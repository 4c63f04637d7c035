"""What the in-process benchmarks (`bench engine`, `bench ngram`, `bench eagle`) share: their arguments,
timed runs of the engine and of HF generate, the greedy check under the near-tie rule, targets checked
on the figures, the rendered table and the reported setup."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

import torch
import transformers

from treespec.bench.greedy_match import NextLogits, compare_greedy
from treespec.bench.plot import check_plotting, write_plot
from treespec.bench.prompts import BenchPrompt, chat_prompt_ids, default_prompts_path
from treespec.bench.report import format_table, write_json
from treespec.bench.throughput import Tally, Throughput
from treespec.shared.cli.speculation_flags import check_costs, resolve_budget
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.launcher.heap_freeze import freeze_heap, unfreeze_heap
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.request import GenerationRequest, RequestOutput, SamplingParams, SpeculationParams
from treespec.verifier.verify_cost import VerifyCost

# Long enough that its prefill takes the prefill attention kernel (more rows than the row kernel's
# MAX_ROWS): the kernel's one-time build and speed check then fall in the warm-up, not in the first
# timed prompt (they once cost plain decoding's first prompt about 80 ms, which no other method paid).
WARM_UP_TEXT = (
    "Hello! I am planning a small garden behind my house this spring. The plot gets sun in the morning"
    " and shade after noon, and the soil is heavy clay that stays wet for days after rain. I would like"
    " to grow a few vegetables and some flowers for the bees. Which plants would you suggest, and how"
    " should I prepare the soil before planting?"
)
WARM_UP_TOKENS = 8
KV_MARGIN = 256  # KV slots beyond the longest prompt, its new tokens and a tree (the warm-up's too)


@dataclass(frozen=True)
class BenchArgs:
    """The common bench arguments plus --threads; subclasses add their own fields."""

    model: Path
    prompts: Path
    per_category: int | None
    max_new_tokens: int
    json_path: Path | None
    threads: int
    node_cost: float | None  # --speculative-node-cost (None: measured once per run, see NodeCost)
    tree_cost: float | None  # --speculative-tree-cost (with node_cost only)
    repeats: int  # --repeats: runs of each prompt by each method, the median one tallied (time_in_turn)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> Self:
        return cls(**cls._fields(ns))

    @classmethod
    def _fields(cls, ns: argparse.Namespace) -> dict[str, Any]:
        return {
            "model": resolve_model_path(ns.model, models_dir()),
            "prompts": Path(ns.prompts) if ns.prompts else default_prompts_path(),
            "per_category": 2 if ns.quick else ns.per_category,
            "max_new_tokens": ns.max_new_tokens,
            "json_path": Path(ns.json) if ns.json else None,
            "threads": ns.threads or torch.get_num_threads(),
            "repeats": getattr(ns, "repeats", 1),
            **_costs(getattr(ns, "speculative_node_cost", None), getattr(ns, "speculative_tree_cost", None)),
        }


def _costs(node_cost: float | None, tree_cost: float | None) -> dict[str, float | None]:
    check_costs(node_cost, tree_cost)
    return {"node_cost": node_cost, "tree_cost": tree_cost}


class RunArgs(Protocol):
    """What `run_bench` needs of a verb's arguments (BenchArgs, or a verb's own)."""

    @property
    def threads(self) -> int: ...

    @property
    def json_path(self) -> Path | None: ...

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> Self: ...


ArgsT = TypeVar("ArgsT", bound=RunArgs)
T = TypeVar("T")


def run_bench(
    verb: str,
    ns: argparse.Namespace,
    args_class: type[ArgsT],
    bench: Callable[[ArgsT], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """A `treespec bench VERB` run: arguments (a bad one exits 2 before the model loads), threads, the
    benchmark, then the table, the JSON and the plot."""
    plot = Path(ns.plot) if getattr(ns, "plot", None) else None  # the per-category verbs' --plot
    try:
        args = args_class.from_namespace(ns)
        if plot is not None:
            check_plotting()
    except ValueError as exc:
        print(f"treespec bench {verb}: error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    try:
        payload = bench(args)
    finally:
        unfreeze_heap()  # warm_up froze it for the timed runs
    emit(payload, render(payload), args.json_path)
    if plot is not None:
        write_plot(plot, payload, f"treespec bench {verb}: tokens/s by category")
        print(f"wrote {plot}")
    return 0


def emit(payload: dict[str, Any], text: str, json_path: Path | None) -> None:
    """The rendered table on stdout, and the payload as JSON where asked."""
    print(text)
    if json_path:
        write_json(json_path, payload)
        print(f"\nwrote {json_path}")


def request(
    rid: str,
    ids: list[int],
    n: int,
    spec: SpeculationParams | None,
    prediction: Sequence[int] = (),
    cache_salt: str = "",
) -> GenerationRequest:
    """Greedy, `n` new tokens; `spec` None: plain decoding; `prediction`: a predicted output;
    `cache_salt`: shares cached state (prefixes, the drafter's memory) only with the same salt."""
    speculation = spec or SpeculationParams(enabled=False)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=n)
    return GenerationRequest(rid, ids, sampling, speculation, prediction=prediction, cache_salt=cache_salt)


def engine(
    model: CausalLM,
    model_path: Path,
    drafter: Drafter | None,
    spec: SpeculationParams | None,
    prompt_ids: Iterable[Sequence[int]],
    max_new_tokens: int,
    cost: NodeCost | None = None,
    adaptive: bool = True,
) -> Engine:
    """An engine over `model` for batch size 1 (`spec`: its default speculation, None: plain), with a
    KV pool that holds the longest of `prompt_ids` and its new tokens: the default pool is far bigger
    and is zeroed as each engine starts, which counts when a bench starts several. `adaptive` False:
    every step drafts (no speculation gate), for benches whose subject the gate would mask."""
    speculation = spec or SpeculationParams(enabled=False)
    longest = max((len(ids) for ids in prompt_ids), default=0)
    config = EngineConfig(
        model_path=model_path,
        max_running_requests=1,
        max_total_tokens=longest + max_new_tokens + speculation.num_draft_tokens + KV_MARGIN,
        speculation=speculation,
        node_cost=None if cost is None else cost.value,
        tree_cost=0.0 if cost is None else cost.tree,
        adaptive_speculation=adaptive,
    )
    return Engine(config, drafter, model)


def hf_generate(model: transformers.PreTrainedModel, ids: list[int], n: int, **kwargs: Any) -> list[int]:
    """HF greedy generate (`kwargs`: more generate options); the new tokens."""
    with torch.no_grad():
        out = model.generate(  # type: ignore[operator]
            torch.tensor([ids]), max_new_tokens=n, do_sample=False, **kwargs
        )
    return list(out[0, len(ids) :].tolist())


def warm_up(
    tokenizer: transformers.PreTrainedTokenizerBase,
    hf: transformers.PreTrainedModel,
    *engines: tuple[Engine, SpeculationParams | None],
    **hf_kwargs: Any,
) -> None:
    """One short generation with HF (`hf_kwargs`: its generate options) and with each engine; then
    the heap is frozen, as a serving process's is once it is ready (shared/launcher/heap_freeze.py)."""
    ids = chat_prompt_ids(tokenizer, WARM_UP_TEXT)
    hf_generate(hf, ids, WARM_UP_TOKENS, **hf_kwargs)
    for i, (engine, spec) in enumerate(engines):
        engine.generate([request(f"warm-{i}", ids, WARM_UP_TOKENS, spec)])
    freeze_heap()


def time_hf(
    model: transformers.PreTrainedModel,
    ids: list[int],
    n: int,
    tally: Throughput,
    method: str,
    category: str,
    **kwargs: Any,
) -> list[int]:
    start = time.perf_counter()
    tokens = hf_generate(model, ids, n, **kwargs)
    tally.add(method, category, len(tokens), time.perf_counter() - start)
    return tokens


def time_engine(
    engine: Engine,
    rid: str,
    ids: list[int],
    n: int,
    tally: Throughput,
    method: str,
    category: str,
    spec: SpeculationParams | None,
    prediction: Sequence[int] = (),
    cache_salt: str = "",
) -> GenerationResult:
    drafting, gated = engine.timings.drafting_s, engine.timings.gated_steps
    first_token: list[float] = []

    def seen(output: RequestOutput) -> None:
        if output.token_ids and not first_token:
            first_token.append(time.perf_counter())

    start = time.perf_counter()
    result = engine.generate([request(rid, ids, n, spec, prediction, cache_salt)], on_output=seen)[rid]
    end = time.perf_counter()
    stats, draft_s = result.stats, engine.timings.drafting_s - drafting
    first_token_s = (first_token[0] if first_token else end) - start
    tally.add(
        method,
        category,
        len(result.token_ids),
        end - start,
        stats.verify_steps,
        stats.committed_tokens,
        draft_s,
        first_token_s,
        stats.drafted_tokens,
        engine.timings.gated_steps - gated,
    )
    return result


def drafting_figures(method: str, tally: Tally) -> dict[str, float]:
    """A speculative method's drafting time per verify step (ms) and share of its time: asking the
    drafter for trees and telling it what each request committed (StepTimings.drafting_s); and the
    share of its steps the speculation gate left plain."""
    return {
        f"{method}_draft_ms_per_step": tally.draft_ms_per_step,
        f"{method}_draft_share": tally.draft_share,
        f"{method}_gated_share": tally.gated_share,
    }


def drafting_line(p: Mapping[str, Any], methods: Sequence[str]) -> str:
    """What drafting cost each method: ms per verify step and share of its time; the steps the gate
    left plain."""
    parts = [
        f"{m} {p[f'{m}_draft_ms_per_step']:.2f} ms/step ({100 * p[f'{m}_draft_share']:.0f}% of its time,"
        f" {100 * p[f'{m}_gated_share']:.0f}% of its steps left plain by the gate)"
        for m in methods
    ]
    return "drafting: " + "   ".join(parts)


@dataclass
class GreedyCheck:
    """Greedy continuations compared prompt by prompt under the near-tie rule."""

    next_logits: NextLogits  # the reference model's, for the top-2 gap at a divergence
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    near_ties: int = 0

    def check(self, prompt: BenchPrompt, ids: list[int], got: Sequence[int], want: Sequence[int]) -> None:
        match = compare_greedy(ids, got, want, self.next_logits)
        self.near_ties += int(not match.identical and match.ok)
        if not match.ok:
            self.mismatches.append(
                {"question_id": prompt.question_id, "diverged_at": match.diverged_at, "gap": match.gap}
            )

    def figures(self) -> dict[str, Any]:
        return {
            "identical": not self.mismatches,
            "near_tie_divergences": self.near_ties,
            "mismatches": self.mismatches,
        }


def time_in_turn(
    i: int,
    ids: list[int],
    n: int,
    tally: Throughput,
    category: str,
    engines: Mapping[str, tuple[Engine, SpeculationParams | None]],
    hf: transformers.PreTrainedModel,
    hf_method: str,
    repeats: int = 1,
    **hf_kwargs: Any,
) -> dict[str, GenerationResult]:
    """Prompt `i` through each engine and through HF generate (`hf_method`, with `hf_kwargs`), timed,
    in an order turned by one from prompt to prompt (`rotated`); the engines' results. With `repeats`
    above 1, every method runs the prompt that many times, the order turned on by one each time, and
    its median run by time is tallied: on a shared VM the machine's speed drifts within seconds, and
    one slow moment in a run of two prompts a category moves a category's ratio by a tenth or more.
    Each repeat has a cache salt of its own, so that no run reuses another's cached prefix or what the
    drafter learned from it (the n-gram memory would copy the earlier run's output)."""
    timed: dict[str, list[tuple[Tally, GenerationResult | None]]] = {}
    for r in range(repeats):
        for method in rotated([*engines, hf_method], i + r):
            scratch = Throughput()
            result = None
            if method == hf_method:
                time_hf(hf, ids, n, scratch, method, category, **hf_kwargs)
            else:
                engine, spec = engines[method]
                rid, salt = (f"{method}-{i}", "") if r == 0 else (f"{method}-{i}-{r}", f"repeat-{r}")
                result = time_engine(engine, rid, ids, n, scratch, method, category, spec, cache_salt=salt)
            timed.setdefault(method, []).append((scratch.overall[method], result))
    out: dict[str, GenerationResult] = {}
    for method, runs in timed.items():
        figures, result = sorted(runs, key=lambda run: run[0].seconds)[len(runs) // 2]
        tally.add(method, category, *astuple(figures))
        if result is not None:
            out[method] = result
    return out


def rotated(items: Sequence[T], k: int) -> list[T]:
    """`items` begun at its `k`-th (mod its length): run by run the methods take turns at each place,
    so that none always runs right after another (on a shared VM a run's speed depends on what ran
    just before it: a long HF generate, another engine's allocations)."""
    k %= len(items)
    return [*items[k:], *items[:k]]


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def render(p: dict[str, Any], header: Sequence[str], keys: Sequence[str], ratios: str, claim: str) -> str:
    """A row per category and the overall one (name, prompts, then `keys` of each) under `header`;
    then the `ratios` line and whether `claim` holds under the near-tie rule."""
    return "\n".join([table(p, header, keys), "", ratios, greedy_line(claim, p)])


def table(p: dict[str, Any], header: Sequence[str], keys: Sequence[str]) -> str:
    """A row per category and the overall one: name, prompts, then `keys` of each (a key's value
    rendered by `cell`)."""
    rows = [[c, v["prompts"], *(cell(v, k) for k in keys)] for c, v in p["per_category"].items()]
    rows.append(["overall", p["setup"]["prompts"], *(cell(p, k) for k in keys)])
    return format_table(header, rows)


def cell(figures: Mapping[str, Any], key: str) -> Any:
    """`figures[key]`; a target's key (in figures["targets"]): its value and pass or FAIL."""
    target = figures.get("targets", {}).get(key)
    if target is None:
        return figures[key]
    return f"{target['value']:.2f} {'pass' if target['pass'] else 'FAIL'}"


def greedy_line(claim: str, figures: Mapping[str, Any]) -> str:
    """Whether `claim` holds under the near-tie rule, from GreedyCheck.figures()."""
    return (
        f"{claim} (near-tie rule): {figures['identical']}"
        f" ({figures['near_tie_divergences']} near-tie divergences)"
    )


def greedy_figures(checks: Mapping[str, GreedyCheck]) -> dict[str, Any]:
    """Several methods' checks: all of them identical, the near-ties summed, and each one's figures."""
    each = {method: check.figures() for method, check in checks.items()}
    return {
        "identical": all(f["identical"] for f in each.values()),
        "near_tie_divergences": sum(f["near_tie_divergences"] for f in each.values()),
        "greedy": each,
    }


@dataclass(frozen=True)
class Target:
    """A claim on one figure: `key` at least `minimum`."""

    key: str
    minimum: float

    def check(self, figures: Mapping[str, float]) -> dict[str, Any]:
        value = figures[self.key]
        return {"value": value, "min": self.minimum, "pass": value >= self.minimum}


def check_targets(figures: Mapping[str, float], targets: Sequence[Target]) -> dict[str, dict[str, Any]]:
    return {t.key: t.check(figures) for t in targets}


def per_category(
    prompts: Sequence[BenchPrompt],
    t: Throughput,
    methods: Sequence[str],
    figures: Callable[[Mapping[str, Tally]], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Category -> its prompt count and `figures` of its tallies (by method)."""
    return {
        c: {
            "prompts": sum(p.category == c for p in prompts),
            **figures({m: t.by_category[m][c] for m in methods}),
        }
        for c in t.categories()
    }


@dataclass(frozen=True)
class NodeCost:
    """The node and tree costs every speculative engine of a run gives its drafter (one pair, so that
    methods measured side by side weigh nodes alike): --speculative-node-cost and
    --speculative-tree-cost, else one measurement."""

    value: float
    tree: float = 0.0
    measured: VerifyCost | None = None

    @classmethod
    def for_run(cls, args: BenchArgs, idle: Engine, tree_nodes: int) -> NodeCost:
        if args.node_cost is not None:
            return cls(args.node_cost, args.tree_cost or 0.0)
        cost = idle.measure_verify_cost(tree_nodes)
        return cls(cost.node_cost(1), cost.tree_cost(1), cost)

    def report(self) -> dict[str, Any]:
        if self.measured is None:
            return {"node_cost": self.value, "tree_cost": self.tree, "measured": False}
        return {
            "node_cost": round(self.value, 4),
            "tree_cost": round(self.tree, 4),
            "measured": True,
            "step_ms": round(self.measured.step_s * 1e3, 3),
            "row_ms": round(self.measured.row_s * 1e3, 3),
            "tree_ms": round(self.measured.tree_s * 1e3, 3),
        }


def flag_speculation(ns: argparse.Namespace, algorithm: str) -> SpeculationParams:
    """The tree budget the --speculative-* flags give (the algorithm's defaults where not given),
    checked before a model loads."""
    budget = resolve_budget(ns, algorithm, {})
    spec = SpeculationParams(
        num_steps=budget.num_steps, eagle_topk=budget.eagle_topk, num_draft_tokens=budget.num_draft_tokens
    )
    spec.validate()
    return spec


def budget_figures(spec: SpeculationParams) -> dict[str, int]:
    """A tree budget as a record's setup lists it."""
    return {
        "num_steps": spec.num_steps,
        "eagle_topk": spec.eagle_topk,
        "num_draft_tokens": spec.num_draft_tokens,
    }


def setup(args: BenchArgs, prompts: int, **extra: Any) -> dict[str, Any]:
    """Batch size 1, temperature 0, the model, the machine; `extra` after the temperature."""
    return {
        "model": str(args.model),
        "prompts": prompts,
        "max_new_tokens": args.max_new_tokens,
        "batch_size": 1,
        "temperature": 0.0,
        "repeats": args.repeats,
        **extra,
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_count": cpu_count(),
    }


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
