"""`treespec gateway`: the OpenAI-compatible HTTP gateway in front of the verifier(s)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from treespec.gateway.config import (
    DEFAULT_FILES_MAX_BYTES,
    DEFAULT_RESPONSES_STORE_SIZE,
    DEFAULT_RESPONSES_STORE_TTL_S,
)
from treespec.gateway.reasoning_parsers import REASONING_PARSERS
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS
from treespec.shared.cli.arg_types import non_negative_int, port, positive_int
from treespec.shared.model.store import models_dir, resolve_model_path


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "gateway",
        help="the OpenAI-compatible HTTP gateway (tokenizer, chat template, streaming)",
        description="Serve /v1/chat/completions, /v1/completions, /v1/responses, /v1/models, SGLang's "
        "/generate, /health and /metrics, generating through the verifier(s) over gRPC, until SIGTERM "
        "or SIGINT.",
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
    add_reply_parser_arguments(p)
    add_chat_template_arguments(p)
    add_responses_store_argument(p)
    p.set_defaults(handler=_run)


def add_chat_template_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's (and SGLang's) flags for the prompt: the chat template, and a limit beyond the context."""
    p.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE_OR_TEMPLATE",
        help="the chat template to use instead of the model's: a Jinja file, or the template itself",
    )
    p.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="take a request's own chat template (its chat_template field; default: a 400)",
    )
    p.add_argument(
        "--allow-auto-truncate",
        action="store_true",
        help="cut a max_tokens beyond the context's room after the prompt to that room (SGLang's; "
        "default: a 400, as vLLM and SGLang answer)",
    )


def chat_template(ns: argparse.Namespace) -> str | None:
    """The template --chat-template gives (its file read); a ValueError for one that is neither a
    file nor a template that parses."""
    from treespec.gateway.chat_template import load_chat_template

    return None if ns.chat_template is None else load_chat_template(ns.chat_template)


def add_responses_store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--responses-store-size",
        type=non_negative_int,
        default=DEFAULT_RESPONSES_STORE_SIZE,
        help="Responses API responses kept for previous_response_id and GET /v1/responses/{id}, and as "
        "many conversations and stored chat completions (the least recently used go first; 0: none, "
        "every response says store false)",
    )
    p.add_argument(
        "--responses-store-url",
        default=None,
        metavar="URL",
        help="keep them (responses, conversations, stored chat completions) in Redis "
        "(redis://host:6379/0), shared by every gateway replica "
        "(default: in the gateway's memory)",
    )
    p.add_argument(
        "--responses-store-ttl",
        type=positive_int,
        default=DEFAULT_RESPONSES_STORE_TTL_S,
        metavar="SECONDS",
        help="with --responses-store-url: seconds a response is kept after it was last written "
        "(default: 30 days)",
    )
    p.add_argument(
        "--files-max-bytes",
        type=positive_int,
        default=DEFAULT_FILES_MAX_BYTES,
        metavar="BYTES",
        help="the Files API's files (batch inputs and outputs, kept in the gateway's memory): their "
        f"total size at most (default: {DEFAULT_FILES_MAX_BYTES >> 20} MiB)",
    )


def add_reply_parser_arguments(p: argparse.ArgumentParser) -> None:
    """How replies are read: vLLM's flags for tool_choice "auto" (SGLang's `--tool-call-parser` alone
    does the same) and for thinking models' reasoning."""
    p.add_argument(
        "--reasoning-parser",
        choices=sorted(REASONING_PARSERS),
        default=None,
        help="split a thinking model's <think> reasoning off its answer, into reasoning_content "
        "(deepseek_r1: reasoning until </think>; qwen3: only after a leading <think>); default: all text",
    )
    p.add_argument(
        "--tool-call-parser",
        choices=sorted(TOOL_CALL_PARSERS),
        default=None,
        help="the model's tool-call format, read out of its replies for tool_choice 'auto' (hermes: "
        "Qwen2.5/3, Hermes; llama3_json: Llama 3.1+); default: 'auto' is refused",
    )
    p.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="as in vLLM: allow tool_choice 'auto' (needs --tool-call-parser, which enables it alone too)",
    )


def tool_call_parser(ns: argparse.Namespace) -> str | None:
    """The parser the flags name; an --enable-auto-tool-choice without one is an error."""
    if ns.enable_auto_tool_choice and ns.tool_call_parser is None:
        raise ValueError("--enable-auto-tool-choice needs --tool-call-parser")
    parser: str | None = ns.tool_call_parser
    return parser


def _run(ns: argparse.Namespace) -> int:
    from treespec.gateway.config import GatewayConfig
    from treespec.gateway.server import serve
    from treespec.shared.telemetry.tracing import build_tracer_provider, install_tracer_provider

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        parser = tool_call_parser(ns)
        template = chat_template(ns)
    except ValueError as exc:
        print(f"treespec gateway: error: {exc}", file=sys.stderr)
        return 2
    config = GatewayConfig(
        verifier_addresses=tuple(a.strip() for a in ns.verifier_address.split(",") if a.strip()),
        model_path=Path(resolve_model_path(ns.model_path, models_dir())),
        served_model_name=ns.served_model_name,
        api_keys=tuple(ns.api_key),
        max_body_bytes=ns.max_body_bytes,
        host=ns.host,
        port=ns.port,
        tool_call_parser=parser,
        reasoning_parser=ns.reasoning_parser,
        responses_store_size=ns.responses_store_size,
        responses_store_url=ns.responses_store_url,
        responses_store_ttl_s=ns.responses_store_ttl,
        files_max_bytes=ns.files_max_bytes,
        chat_template=template,
        trust_request_chat_template=ns.trust_request_chat_template,
        allow_auto_truncate=ns.allow_auto_truncate,
    )
    provider = build_tracer_provider("treespec-gateway")
    install_tracer_provider(provider)
    try:
        serve(config, tracer_provider=provider)
    finally:
        provider.shutdown()
    return 0
