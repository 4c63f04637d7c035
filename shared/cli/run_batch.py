"""`treespec run-batch`: vLLM's offline batch runner. It starts the all-in-one stack on free loopback
ports (every `serve` flag applies), sends an OpenAI batch file's requests through the gateway, writes
their results in the input's order (services/gateway/batch_file.py), and stops the stack."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from treespec.gateway.batch_runner import run_batch
from treespec.shared.cli.arg_types import positive_int
from treespec.shared.cli.serve import add_serve_arguments, serve_config, services
from treespec.shared.launcher.supervisor import Supervisor

DEFAULT_CONCURRENCY = 64


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run-batch", help="run an OpenAI batch file (JSONL) through a stack of its own, as vLLM's run-batch"
    )
    p.add_argument("-i", "--input-file", type=Path, required=True, help="the batch file: one request a line")
    p.add_argument("-o", "--output-file", type=Path, required=True, help="where the results go, one a line")
    p.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=None,
        help=f"requests in flight at once (default: --max-running-requests, or {DEFAULT_CONCURRENCY})",
    )
    add_serve_arguments(p, listening=False)
    p.set_defaults(handler=_run)


def _run(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    config = serve_config(ns)
    concurrency = ns.max_concurrency or config.engine.max_running_requests or DEFAULT_CONCURRENCY
    with ns.input_file.open(encoding="utf-8") as lines:  # a missing file stops before the stack starts
        supervisor = Supervisor(services(config))
        supervisor.start_all()
        try:
            with ns.output_file.open("w", encoding="utf-8") as out:
                summary = asyncio.run(run_batch(lines, out, f"{config.url}", concurrency))
        finally:
            supervisor.stop_all()
    print(
        f"treespec run-batch: {summary.lines} requests, {summary.succeeded} succeeded, "
        f"{summary.failed} failed; results in {ns.output_file}",
        flush=True,
    )
    return 0
