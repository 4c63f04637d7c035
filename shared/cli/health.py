"""`treespec health`: ask a running service whether it serves; exit 0 if it does, 1 if not.

For container health checks (compose.yaml) and orchestrators' probes, with nothing but the treespec
image: the standard gRPC health check for the verifier and the drafters (HOST:PORT), an HTTP GET
for the gateway (a URL, such as http://127.0.0.1:8000/health).
"""

from __future__ import annotations

import argparse
import sys

from treespec.shared.cli.arg_types import positive_float
from treespec.shared.launcher.health import grpc_serving, http_ok

HTTP_SCHEMES = ("http://", "https://")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "health",
        help="check that a treespec service serves (exit 0) or not (exit 1)",
        description="Check a service: HOST:PORT asks a gRPC server (verifier, drafter) for its standard "
        "health status; an http(s):// URL (the gateway's /health) must answer 200.",
    )
    p.add_argument("target", metavar="HOST:PORT|URL", help="a gRPC address, or an http(s):// URL")
    p.add_argument("--timeout", type=positive_float, default=2.0, metavar="SECONDS")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="https: do not check the gateway's certificate (a self-signed one, or one for another name)",
    )
    p.set_defaults(handler=_run)


def _run(ns: argparse.Namespace) -> int:
    if ns.target.startswith(HTTP_SCHEMES):
        serving = http_ok(ns.target, ns.timeout, verify=not ns.insecure)
    else:
        serving = grpc_serving(ns.target, ns.timeout)
    if serving:
        print(f"{ns.target}: serving")
        return 0
    print(f"{ns.target}: not serving", file=sys.stderr)
    return 1
