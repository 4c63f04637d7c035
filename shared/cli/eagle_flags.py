"""The EAGLE drafters' flags (SGLang's names), shared by every CLI that runs them. Only the flags given
become plugin options (EagleConfig fields), so `treespec serve` forwards exactly what was asked."""

from __future__ import annotations

import argparse
from typing import Any

EAGLE_ALGORITHMS = ("eagle", "eagle3")
LEVEL_COST_FLAG = "--speculative-eagle-level-cost"
LEVEL_COST_HELP = (
    "a head step's cost in target decode steps: the tree grows another level only while the nodes it "
    "would expand reach this total path probability (default: the head's weights per step over the "
    "target's; 0: always --speculative-num-steps levels)"
)


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
    group.add_argument(
        LEVEL_COST_FLAG, dest="eagle_level_cost", type=float, metavar="COST", help=LEVEL_COST_HELP
    )


def eagle_options(ns: argparse.Namespace) -> dict[str, Any]:
    names = {
        "eagle_draft_path": "draft_path",
        "eagle_token_map": "token_map",
        "eagle_level_cost": "level_cost",
    }
    return {
        option: getattr(ns, flag) for flag, option in names.items() if getattr(ns, flag, None) is not None
    }
