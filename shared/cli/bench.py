"""`treespec bench ...`: benchmarks that print a table and write JSON."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from treespec.shared.cli.arg_types import positive_float, positive_int
from treespec.shared.cli.eagle_flags import add_drafting_arguments
from treespec.shared.cli.speculation_flags import add_budget_arguments, add_cost_arguments
from treespec.shared.launcher.shared_cores import shared_core_env

T = TypeVar("T")

# `bench eagle`: the co-located drafter's deadline per round; generous, so that a loaded machine never
# falls back to plain decoding (which would measure the machine, not the drafter)
DEFAULT_DRAFT_DEADLINE_S = 30.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks: print a table, write JSON")
    verbs = parser.add_subparsers(dest="bench_verb", required=True, metavar="BENCH")
    engine = verbs.add_parser(
        "engine", help="in-process engine vs HF generate vs oracle trees (CPU, batch 1)"
    )
    _engine_arguments(engine)
    engine.set_defaults(handler=_runs("engine_bench"))
    ngram = verbs.add_parser(
        "ngram", help="the engine plain vs with the n-gram drafter vs HF prompt lookup (CPU, batch 1)"
    )
    _ngram_arguments(ngram)
    _repeats_argument(ngram)
    ngram.set_defaults(handler=_runs("ngram_bench"))
    prediction = verbs.add_parser(
        "prediction",
        help="a rewrite with the text as OpenAI's predicted output: plain vs the prediction vs n-gram"
        " with and without it (CPU, batch 1)",
    )
    _ngram_arguments(prediction)
    prediction.set_defaults(handler=_runs("prediction_bench"))
    eagle = verbs.add_parser(
        "eagle",
        help="the engine plain vs EAGLE-3 (in process, co-located) vs n-gram vs HF generate (CPU, batch 1)",
    )
    _eagle_arguments(eagle)
    _repeats_argument(eagle)
    eagle.set_defaults(handler=_runs("eagle_bench", before=_wait_as_colocated))
    standalone = verbs.add_parser(
        "standalone",
        help="the engine plain vs with a standalone draft model vs HF assisted generation (CPU, batch 1)",
    )
    _standalone_arguments(standalone)
    _repeats_argument(standalone)
    standalone.set_defaults(handler=_runs("standalone_bench"))
    prefix = verbs.add_parser(
        "prefix", help="a conversation's second turn with prefix caching vs without (CPU, batch 1)"
    )
    _engine_arguments(prefix)
    prefix.add_argument(
        "--speculative-algorithm",
        default="NONE",
        type=str.upper,
        choices=("NONE", "NGRAM", "EAGLE3", "STANDALONE"),
        help="the drafter both engines speculate with, each its own (default: NONE, plain decoding)",
    )
    _draft_path_argument(
        prefix, "the draft model's folder, for STANDALONE (whose own prefix cache goes with the engine's)"
    )
    add_cost_arguments(prefix)
    prefix.set_defaults(handler=_runs("prefix_bench"))
    layout = verbs.add_parser(
        "layout", help="a forward of 1-16 rows in each CPU weight layout: panel kernel, library, dense"
    )
    _layout_arguments(layout)
    layout.set_defaults(handler=_runs("layout_bench"))
    prefill = verbs.add_parser(
        "prefill", help="a prompt's chunked prefill with the own prefill attention kernel and with SDPA"
    )
    _prefill_arguments(prefill)
    prefill.set_defaults(handler=_runs("prefill_bench"))
    burst = verbs.add_parser(
        "burst",
        help="single requests with the n-gram drafter before and after a burst of concurrent ones (CPU)",
    )
    _burst_arguments(burst)
    burst.set_defaults(handler=_runs("burst_bench"))
    node_cost = verbs.add_parser(
        "node-cost",
        help="the n-gram drafter at its measured node cost and at fixed multiples of it vs plain (CPU,"
        " batch 1)",
    )
    _node_cost_arguments(node_cost)
    node_cost.set_defaults(handler=_runs("node_cost_bench"))
    batch = verbs.add_parser(
        "batch",
        help="requests decoded at once: plain vs each drafter with and without the speculation gate (CPU)",
    )
    _batch_arguments(batch)
    batch.set_defaults(handler=_runs("batch_bench"))
    serve = verbs.add_parser("serve", help="HTTP streaming through the services vs the in-process engine")
    _serve_arguments(serve)
    serve.set_defaults(handler=_runs("serve_bench"))
    for per_category in (engine, ngram, prediction, eagle, standalone, node_cost):
        per_category.add_argument(
            "--plot",
            metavar="PATH",
            help="also draw tokens/s by category and method to this PNG (needs matplotlib: treespec[plots])",
        )


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="HF model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--prompts", help="Spec-Bench style JSONL (default: ../shared/bench/spec_bench_dev.jsonl)"
    )
    parser.add_argument("--quick", action="store_true", help="2 prompts per category")
    parser.add_argument(
        "--per-category", type=positive_int, default=None, help="prompts per category (default: all)"
    )
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--json", help="write the figures to this JSON file")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    _common_arguments(parser)
    parser.add_argument(
        "--speculative-algorithm", default="RANDOM", help="drafter for both paths (NONE: plain)"
    )
    parser.add_argument(
        "--concurrency", type=positive_int, default=8, help="concurrent streams in the second phase"
    )
    parser.add_argument(
        "--drafter-links",
        type=_drafter_links,
        default="local",
        metavar="LINKS",
        help="the speculative stacks, by how the verifier reaches its drafter: local (a local socket, "
        "as treespec serve runs it), grpc (gRPC over loopback, as a drafter on another host), "
        "in-process (inside the verifier: treespec serve --drafter-in-process), or several, "
        "comma-separated, prompt by prompt (default: local)",
    )
    parser.add_argument(
        "--no-plain", action="store_true", help="no stack decoding plainly beside the speculative ones"
    )


def _drafter_links(text: str) -> tuple[str, ...]:
    from treespec.bench.serve_bench import parse_links

    return _argument(parse_links, text)


def _argument(parse: Callable[[str], T], text: str) -> T:
    """`parse(text)`, its ValueError as argparse's error for the flag."""
    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _repeats_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        help="runs of each prompt by each method, in turn, the median one counted (default 1): steadier "
        "ratios on a machine whose speed drifts",
    )


def _engine_arguments(parser: argparse.ArgumentParser) -> None:
    _common_arguments(parser)
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")


def _ngram_arguments(parser: argparse.ArgumentParser) -> None:
    _ngram_drafter_arguments(parser)
    add_cost_arguments(parser)


def _ngram_drafter_arguments(parser: argparse.ArgumentParser) -> None:
    _engine_arguments(parser)
    parser.add_argument(
        "--redis-url", default=None, metavar="URL", help="the n-gram memory in Redis (default: in-process)"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an n-gram setting (repeatable): a NgramConfig field; VALUE is read as JSON when it parses",
    )


def _burst_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench ngram`'s drafter flags, without fixed costs: the engine's own measured ones are the subject."""
    _ngram_drafter_arguments(parser)
    parser.add_argument(
        "--burst",
        type=positive_int,
        default=16,
        help="concurrent requests in the burst (default: %(default)s)",
    )
    parser.add_argument(
        "--waves", type=positive_int, default=3, help="bursts, one after the other (default: %(default)s)"
    )


def _batch_arguments(parser: argparse.ArgumentParser) -> None:
    _engine_arguments(parser)
    parser.add_argument(
        "--batch", type=positive_int, default=8, help="requests decoded at once (default: %(default)s)"
    )
    parser.add_argument(
        "--speculative-algorithm",
        type=_batch_algorithms,
        default="EAGLE3,NGRAM",
        metavar="ALGORITHMS",
        help="drafters, comma-separated: EAGLE3 (the shipped head), NGRAM (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=2, help="passes over the prompts (default: %(default)s)"
    )


def _batch_algorithms(text: str) -> tuple[str, ...]:
    from treespec.bench.batch_bench import parse_algorithms

    return _argument(parse_algorithms, text)


def _node_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """`bench ngram`'s drafter flags, without fixed costs: the costs are the subject."""
    _ngram_drafter_arguments(parser)
    parser.add_argument(
        "--factors",
        default="0,0.5,1,2,4",
        metavar="F,F,...",
        help="fixed node costs to run beside the measured one, as multiples of the start-up probe's"
        " (0: every node free; default: %(default)s)",
    )


def _eagle_arguments(parser: argparse.ArgumentParser) -> None:
    _engine_arguments(parser)
    _draft_path_argument(
        parser, "the EAGLE-3 head's folder (default: the head shipped for the bundled SmolLM2-135M-Instruct)"
    )
    add_budget_arguments(parser)
    add_drafting_arguments(parser)
    parser.add_argument(
        "--draft-deadline",
        type=positive_float,
        default=DEFAULT_DRAFT_DEADLINE_S,
        metavar="SECONDS",
        help="the co-located drafter's deadline per draft round (default: %(default)s)",
    )


def _standalone_arguments(parser: argparse.ArgumentParser) -> None:
    _engine_arguments(parser)
    _draft_path_argument(parser, "the draft model's folder (a causal LM with the target's tokenizer)", True)
    add_budget_arguments(parser)


def _draft_path_argument(parser: argparse.ArgumentParser, text: str, required: bool = False) -> None:
    parser.add_argument(
        "--draft-path",
        "--speculative-draft-model-path",
        dest="draft_path",
        metavar="DIR",
        required=required,
        help=text,
    )


def _layout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="HF model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--rows", default="1,2,3,4,6,8,12,16", help="row counts, comma-separated (default: %(default)s)"
    )
    parser.add_argument(
        "--context",
        type=positive_int,
        default=512,
        help="cached tokens before the rows (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=7, help="timed forwards per layout and row count"
    )
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", help="write the figures to this JSON file")


def _prefill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="HF model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--tokens", default="256,512,1024,2048", help="prompt lengths, comma-separated (default: %(default)s)"
    )
    parser.add_argument(
        "--chunk",
        type=positive_int,
        default=None,
        help="tokens per prefill chunk (default: the engine's, 512)",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="timed prefills per variant and length"
    )
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", help="write the figures to this JSON file")


def _wait_as_colocated() -> None:
    """This process is the verifier side of the co-located drafter that `bench eagle` measures, so its
    OpenMP threads wait as `treespec serve` starts a co-located verifier (every method of the run then
    waits so; the user's own setting stands). libgomp reads the setting once, when torch loads: a
    process that has loaded torch already keeps how it waits, and its record says so."""
    if "torch" not in sys.modules:
        os.environ.update(shared_core_env(os.environ))


def _runs(module: str, before: Callable[[], None] | None = None) -> Callable[[argparse.Namespace], int]:
    """A verb's handler: `before` (if any), then `treespec.bench.<module>`'s run, imported only as the
    verb runs (torch and transformers load with it, which `treespec --help` need not wait for)."""

    def handler(ns: argparse.Namespace) -> int:
        if before is not None:
            before()
        run: Callable[[argparse.Namespace], int] = importlib.import_module(f"treespec.bench.{module}").run
        return run(ns)

    return handler
