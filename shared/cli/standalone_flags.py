"""The standalone draft model's flags. Its folder is `--speculative-draft-model-path` (SGLang's flag for
every drafter that loads weights, defined with the EAGLE flags); only the flags given become plugin
options (StandaloneConfig fields)."""

from __future__ import annotations

import argparse
from typing import Any

from treespec.shared.cli.arg_types import positive_int

STANDALONE_ALGORITHM = "standalone"
DTYPES = ("auto", "float32", "bfloat16", "float16")  # StandaloneConfig's (importing it loads torch)


def add_standalone_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "standalone draft model (--speculative-algorithm STANDALONE, with --speculative-draft-model-path)"
    )
    group.add_argument(
        "--speculative-draft-kv-tokens",
        dest="standalone_kv_tokens",
        type=positive_int,
        metavar="N",
        help="tokens of K/V the draft model's cache holds over all requests; a request that does not "
        "fit decodes without drafts (default: 32768)",
    )
    group.add_argument(
        "--speculative-draft-dtype",
        dest="standalone_dtype",
        choices=DTYPES,
        help="the draft model's dtype (default: auto, float32 on CPU and bfloat16 on GPU); the draft "
        "only, never the output",
    )


def standalone_options(ns: argparse.Namespace) -> dict[str, Any]:
    names = {
        "eagle_draft_path": "draft_path",
        "standalone_kv_tokens": "kv_tokens",
        "standalone_dtype": "dtype",
    }
    options = {o: getattr(ns, flag) for flag, o in names.items() if getattr(ns, flag, None) is not None}
    if getattr(ns, "disable_prefix_caching", False):  # the draft model's prefix cache goes with the target's
        options["prefix_caching"] = False
    return options
