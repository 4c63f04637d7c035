"""The plugin options a command line gives the drafter it runs: each algorithm reads its own flags."""

from __future__ import annotations

import argparse
import json
from typing import Any

from treespec.shared.cli.eagle_flags import EAGLE_ALGORITHMS, add_eagle_arguments, eagle_options
from treespec.shared.cli.ngram_flags import add_ngram_arguments, ngram_options
from treespec.shared.cli.standalone_flags import (
    STANDALONE_ALGORITHM,
    add_standalone_arguments,
    standalone_options,
)


def add_plugin_arguments(parser: argparse.ArgumentParser) -> None:
    add_ngram_arguments(parser)
    add_eagle_arguments(parser)
    add_standalone_arguments(parser)


def add_option_argument(parser: argparse.ArgumentParser) -> None:
    """`--option KEY=VALUE`: any plugin option by its field name (`parse_options`)."""
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a plugin option (repeatable); VALUE is read as JSON when it parses, else as a string",
    )


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; values as JSON where they parse (numbers, booleans, lists), else strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option wants KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def plugin_options(ns: argparse.Namespace, algorithm: str | None) -> dict[str, Any]:
    name = (algorithm or "").lower()
    if name == "ngram":
        return ngram_options(ns)
    if name in EAGLE_ALGORITHMS:
        return eagle_options(ns)
    if name == STANDALONE_ALGORITHM:
        return standalone_options(ns)
    return {}


def check_plugin_options(algorithm: str | None, options: dict[str, Any], loads_here: bool = True) -> None:
    """Raise ValueError for options the algorithm's drafter would refuse, before anything starts;
    with `loads_here` (the drafter runs from this Python: in process, or a process this command
    starts) also for a name that is no drafter (UnknownDrafterError names the known ones)."""
    name = (algorithm or "").lower()
    if loads_here and algorithm and name != "none":
        from treespec.shared.drafting.registry import BUILTIN_DRAFTERS, drafter_class

        if name not in BUILTIN_DRAFTERS:
            drafter_class(algorithm)  # an out-of-tree plugin is imported to be sure it loads
    if name == "ngram":
        from treespec.drafter.ngram.config import NgramConfig

        NgramConfig.from_options(options)
    elif name in EAGLE_ALGORITHMS:
        from treespec.drafter.eagle.config import EagleConfig
        from treespec.drafter.eagle.head_config import EagleFormat

        config = EagleConfig.from_options(options)
        if loads_here:
            config.check_path(EagleFormat(name))
    elif name == STANDALONE_ALGORITHM:
        from treespec.drafter.standalone.config import StandaloneConfig

        StandaloneConfig.from_options(options).check_path()
