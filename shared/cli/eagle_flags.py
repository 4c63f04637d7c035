"""The EAGLE drafters' flags (SGLang's names), shared by every CLI that runs them. Only the flags given
become plugin options (EagleConfig fields), so `treespec serve` forwards exactly what was asked."""

from __future__ import annotations

import argparse
from typing import Any

from treespec.shared.cli.ngram_flags import ngram_options

EAGLE_ALGORITHMS = ("eagle", "eagle3")
# packed_matmul.MatmulDtype's values (importing it loads torch)
MATMUL_DTYPES = ("auto", "float32", "bfloat16", "int8")
# How the trees are shaped (treespec's own, beside SGLang's budget flags): flag -> (option, help).
_TREE_FLAGS = {
    "--speculative-eagle-level-cost": (
        "level_cost",
        "a head step's cost in target decode steps: the tree grows another level only while the nodes "
        "it would expand reach this total path probability (default: the head's weights per step over "
        "the target's; 0: always --speculative-num-steps levels)",
    ),
    "--speculative-eagle-min-path-prob": (
        "min_path_prob",
        "leave out draft nodes whose draft path probability is lower: each costs a verify row "
        "(default: 0, SGLang's fixed-size trees)",
    ),
}


def add_eagle_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("EAGLE drafters (--speculative-algorithm EAGLE or EAGLE3)")
    group.add_argument(
        "--speculative-draft-model-path",
        dest="eagle_draft_path",
        metavar="DIR",
        help="the EAGLE head's folder (config.json + weights; default for EAGLE3: the head shipped for "
        "the bundled SmolLM2-135M-Instruct), or STANDALONE's draft model (a Hugging Face folder)",
    )
    group.add_argument(
        "--speculative-token-map",
        dest="eagle_token_map",
        metavar="FILE",
        help="FR-Spec for EAGLE-2 heads: a .pt list / 1-D tensor of the target ids the head may draft",
    )
    group.add_argument(
        "--speculative-eagle-ngram",
        dest="eagle_ngram",
        action="store_true",
        default=None,
        help="also draft from n-gram matches (the request's own text and the n-gram memory, with the "
        "--speculative-ngram-* flags and --redis-url) and merge their trees with the head's: faster "
        "where the output copies its context",
    )
    add_drafting_arguments(group)


def add_drafting_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """How the head drafts: the tree-shaping flags and the dtype of its products."""
    for flag, (option, text) in _TREE_FLAGS.items():
        parser.add_argument(flag, dest=f"eagle_{option}", type=float, metavar="P", help=text)
    parser.add_argument(
        "--speculative-eagle-matmul-dtype",
        dest="eagle_matmul_dtype",
        choices=MATMUL_DTYPES,
        help="the dtype of the head's weights when it drafts on a CPU (default: auto, int8 with a scale "
        "per column where the panel kernel builds, else bfloat16 where the CPU multiplies it natively, "
        "else float32); the draft only, never the output",
    )


def drafting_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The drafting options given (add_drafting_arguments)."""
    options = [option for option, _ in _TREE_FLAGS.values()] + ["matmul_dtype"]
    return {o: getattr(ns, f"eagle_{o}") for o in options if getattr(ns, f"eagle_{o}", None) is not None}


def eagle_options(ns: argparse.Namespace) -> dict[str, Any]:
    names = {"eagle_draft_path": "draft_path", "eagle_token_map": "token_map"}
    given = {o: getattr(ns, flag) for flag, o in names.items() if getattr(ns, flag, None) is not None}
    if getattr(ns, "eagle_ngram", None):
        given["ngram"] = ngram_options(ns)
    return {**given, **drafting_options(ns)}
