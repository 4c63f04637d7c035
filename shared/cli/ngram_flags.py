"""The n-gram drafter's flags (SGLang's `--speculative-ngram-*` names), shared by every CLI that runs it.

Flags left out keep NgramConfig's defaults (quoted in the help: importing the config loads torch), and
only the flags given become plugin options, so that `treespec serve` forwards exactly what was asked.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

# flag suffix -> (option name, type, help)
_FLAGS: dict[str, tuple[str, type, str]] = {
    "min-match-window-size": ("min_match_window_size", int, "shortest suffix matched (default: 1)"),
    "max-match-window-size": ("max_match_window_size", int, "longest suffix matched (default: 12)"),
    "min-bfs-breadth": ("min_bfs_breadth", int, "children per node at the deepest level (default: 1)"),
    "max-bfs-breadth": ("max_bfs_breadth", int, "children per node below the root (default: 10)"),
    "match-type": ("match_type", str, "BFS (breadth shrinking with depth) or PROB (by frequency)"),
    "branch-length": ("branch_length", int, "tokens remembered after each n-gram (default: 18)"),
    "capacity": ("capacity", int, "n-gram contexts the shared memory keeps (default: 10000000)"),
    "ttl": ("ttl_s", float, "seconds an n-gram context stays in memory unwritten (default: 86400)"),
    "tenant": ("tenant", str, "a separate memory for this tenant (default: shared per model)"),
    "min-path-prob": (
        "min_path_prob",
        float,
        "leave out draft nodes less likely to be accepted (default: 0.05)",
    ),
}
_REDIS_URL = ("redis_url", str, "Redis for the n-gram memory shared by replicas (default: in-process)")


def add_ngram_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("n-gram drafter (--speculative-algorithm NGRAM)")
    for suffix, (name, kind, text) in _FLAGS.items():
        group.add_argument(f"--speculative-ngram-{suffix}", dest=f"ngram_{name}", type=kind, help=text)
    group.add_argument(
        "--speculative-ngram-learn-from-prompts",
        dest="ngram_learn_from_prompts",
        action="store_true",
        default=None,
        help="also put prompts' n-grams into the shared memory",
    )
    group.add_argument("--redis-url", dest="ngram_redis_url", type=_REDIS_URL[1], help=_REDIS_URL[2])


def ngram_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The n-gram options the user gave, by NgramConfig field name."""
    names = [name for name, _, _ in _FLAGS.values()] + ["learn_from_prompts", _REDIS_URL[0]]
    return {
        name: getattr(ns, f"ngram_{name}") for name in names if getattr(ns, f"ngram_{name}", None) is not None
    }


def option_arguments(options: dict[str, Any]) -> list[str]:
    """The same options as `--option key=value` arguments of `treespec drafter`."""
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={json.dumps(value)}")]
