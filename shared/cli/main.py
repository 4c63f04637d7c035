"""The `treespec` command: one subcommand per verb module.

Each verb module in this package exposes `add_parser(subparsers)`, which registers its parser and
sets `handler` (a function `(argparse.Namespace) -> int`) with `set_defaults`. To add a verb,
write its module and list it in VERB_MODULES.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from treespec.shared.cli import (
    bench,
    drafter,
    gateway,
    health,
    models,
    run_batch,
    serve,
    train_eagle,
    verifier,
)
from treespec.shared.cli.serve import ServeFlagsError
from treespec.shared.cli.speculative_config import SpeculativeConfigError, expand
from treespec.shared.launcher.parent_watch import watch_parent
from treespec.shared.launcher.supervisor import ServiceFailedError
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.store import ModelStoreError

VERB_MODULES: tuple[ModuleType, ...] = (
    models,
    bench,
    serve,
    run_batch,
    drafter,
    verifier,
    gateway,
    train_eagle,
    health,
)

# Errors a user can cause and fix: reported in one line, without a traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    ModelStoreError,
    ModelLoadError,
    ServiceFailedError,
    OSError,
)


def _version() -> str:
    try:
        return importlib.metadata.version("treespec")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="treespec", description="Lossless speculative decoding server and its tools."
    )
    parser.add_argument("--version", action="version", version=f"treespec {_version()}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERB_MODULES:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); return the exit status."""
    try:  # vLLM's --speculative-config, as the flags it means (speculative_config.py)
        expanded = expand(sys.argv[1:] if argv is None else argv, _warn)
    except SpeculativeConfigError as exc:
        print(f"treespec: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(expanded)
    watch_parent(os.environ)  # a service started by a launcher stops when the launcher dies
    try:
        return int(args.handler(args))
    except ServeFlagsError as exc:
        print(f"treespec {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except EXPECTED_ERRORS as exc:
        print(f"treespec: error: {exc}", file=sys.stderr)
        return 2


def _warn(message: str) -> None:
    print(f"treespec: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
