"""`treespec gateway`: the OpenAI-compatible HTTP gateway in front of the verifier(s)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from treespec.shared.cli.arg_types import port, positive_int
from treespec.shared.model.store import models_dir, resolve_model_path


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "gateway",
        help="the OpenAI-compatible HTTP gateway (tokenizer, chat template, streaming)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics, "
        "generating through the verifier(s) over gRPC, until SIGTERM or SIGINT.",
    )
    p.add_argument(
        "--verifier-address",
        required=True,
        help="verifier replicas: HOST:PORT[,HOST:PORT...] (IP addresses), or one DNS name resolving to all",
    )
    p.add_argument(
        "--model-path",
        help="the HF folder the verifier serves, for its tokenizer and chat template "
        "(default: the bundled SmolLM2-135M-Instruct)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8000, help="HTTP port (0: a free one, printed in the log)")
    p.add_argument("--served-model-name", default=None, help="model name clients use (default: folder name)")
    p.add_argument(
        "--api-key", action="append", default=[], help="accepted API key (repeatable; default: no auth)"
    )
    p.add_argument(
        "--max-body-bytes", type=positive_int, default=1 << 20, help="largest request body accepted"
    )
    p.set_defaults(handler=_run)


def _run(ns: argparse.Namespace) -> int:
    from treespec.gateway.config import GatewayConfig
    from treespec.gateway.server import serve
    from treespec.shared.telemetry.tracing import build_tracer_provider, install_tracer_provider

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = GatewayConfig(
        verifier_addresses=tuple(a.strip() for a in ns.verifier_address.split(",") if a.strip()),
        model_path=Path(resolve_model_path(ns.model_path, models_dir())),
        served_model_name=ns.served_model_name,
        api_keys=tuple(ns.api_key),
        max_body_bytes=ns.max_body_bytes,
        host=ns.host,
        port=ns.port,
    )
    provider = build_tracer_provider("treespec-gateway")
    install_tracer_provider(provider)
    try:
        serve(config, tracer_provider=provider)
    finally:
        provider.shutdown()
    return 0
