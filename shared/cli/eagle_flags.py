"""The EAGLE drafters' flags (SGLang's names), shared by every CLI that runs them. Only the flags given
become plugin options (EagleConfig fields), so `treespec serve` forwards exactly what was asked."""

from __future__ import annotations

import argparse
from typing import Any

EAGLE_ALGORITHMS = ("eagle", "eagle3")


def add_eagle_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("EAGLE drafters (--speculative-algorithm EAGLE or EAGLE3)")
    group.add_argument(
        "--speculative-draft-model-path",
        dest="eagle_draft_path",
        metavar="DIR",
        help="the head's folder (config.json + weights); default for EAGLE3: the head shipped for "
        "the bundled SmolLM2-135M-Instruct",
    )
    group.add_argument(
        "--speculative-token-map",
        dest="eagle_token_map",
        metavar="FILE",
        help="FR-Spec for EAGLE-2 heads: a .pt list / 1-D tensor of the target ids the head may draft",
    )


def eagle_options(ns: argparse.Namespace) -> dict[str, Any]:
    names = {"eagle_draft_path": "draft_path", "eagle_token_map": "token_map"}
    return {
        option: getattr(ns, flag) for flag, option in names.items() if getattr(ns, flag, None) is not None
    }
