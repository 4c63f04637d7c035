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
from treespec.gateway.cors import ANY, CorsPolicy, string_list
from treespec.gateway.log_options import LogOptions
from treespec.gateway.reasoning_parsers import ALIASES as REASONING_ALIASES
from treespec.gateway.reasoning_parsers import REASONING_PARSERS
from treespec.gateway.sampling_defaults import SamplingDefaults, load_sampling_defaults
from treespec.gateway.tls import CERT_REQS, TlsFiles, tls_files
from treespec.gateway.tool_parsers import ALIASES as TOOL_CALL_ALIASES
from treespec.gateway.tool_parsers import TOOL_CALL_PARSERS
from treespec.shared.cli.arg_types import json_object, non_negative_int, port, positive_int
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
    add_served_model_name_argument(p)
    p.add_argument(
        "--api-key", action="append", default=[], help="accepted API key (repeatable; default: no auth)"
    )
    p.add_argument(
        "--max-body-bytes", type=positive_int, default=1 << 20, help="largest request body accepted"
    )
    add_reply_parser_arguments(p)
    add_chat_template_arguments(p)
    add_sampling_defaults_arguments(p)
    add_responses_store_argument(p)
    add_cors_arguments(p)
    add_tls_arguments(p)
    add_request_log_arguments(p)
    p.set_defaults(handler=_run)


def add_request_log_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's flags for a log line per generation request."""
    p.add_argument(
        "--enable-log-requests",
        action="store_true",
        help="log each generation request as it starts (its prompt, tokens and sampling) and ends (its "
        "tokens, finish and acceptance length); default: not, prompts being the clients' data",
    )
    p.add_argument(
        "--max-log-len",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="with --enable-log-requests: the prompt's characters and tokens logged at most (default: all)",
    )


def add_tls_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's flags for HTTPS at the gateway itself."""
    p.add_argument("--ssl-keyfile", type=Path, default=None, help="serve HTTPS: the private key (PEM)")
    p.add_argument("--ssl-certfile", type=Path, default=None, help="... and its certificate chain (PEM)")
    p.add_argument(
        "--ssl-ca-certs", type=Path, default=None, help="the CAs client certificates must chain to (PEM)"
    )
    p.add_argument(
        "--ssl-cert-reqs",
        type=int,
        choices=sorted(CERT_REQS),
        default=0,
        help="client certificates: 0, not asked for (the default); 1, optional; 2, required",
    )


def tls_settings(ns: argparse.Namespace) -> TlsFiles | None:
    """The TLS files the flags name, loaded once to check them (a ValueError says what is wrong)."""
    return tls_files(ns.ssl_keyfile, ns.ssl_certfile, ns.ssl_ca_certs, ns.ssl_cert_reqs)


def add_served_model_name_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=[],
        metavar="NAME",
        help="the names clients may call the model by, the first the one it is listed and reported by "
        "(vLLM's; default: the model folder's name)",
    )


UVICORN_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def add_cors_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's flags for cross-origin calls from browsers (by default any origin, as vLLM and SGLang),
    for the HTTP server's log, and for request ids in the answers' headers."""
    for flag, what in (("origins", "origins"), ("methods", "HTTP methods"), ("headers", "request headers")):
        p.add_argument(
            f"--allowed-{flag}",
            type=_string_list,
            default=ANY,
            metavar="JSON",
            help=f"{what} a browser may call the gateway with from another origin, as a JSON list "
            f'(default: ["*"], any; []: none)',
        )
    p.add_argument(
        "--allow-credentials",
        action="store_true",
        help="let cross-origin calls carry cookies and HTTP authentication (default: not)",
    )
    p.add_argument(
        "--uvicorn-log-level",
        choices=UVICORN_LOG_LEVELS,
        default="info",
        help="the HTTP server's log level (vLLM's; default: info)",
    )
    p.add_argument(
        "--disable-uvicorn-access-log",
        action="store_true",
        help="no log line per HTTP request (vLLM's)",
    )
    p.add_argument(
        "--enable-request-id-headers",
        action="store_true",
        help="answers carry an X-Request-Id header: the request's own, or a new id (vLLM's)",
    )


def log_options(ns: argparse.Namespace) -> LogOptions:
    return LogOptions(
        request_id_headers=ns.enable_request_id_headers,
        http_log_level=ns.uvicorn_log_level,
        access_log=not ns.disable_uvicorn_access_log,
        log_requests=ns.enable_log_requests,
        max_log_len=ns.max_log_len,
    )


def cors_policy(ns: argparse.Namespace) -> CorsPolicy:
    return CorsPolicy(ns.allowed_origins, ns.allowed_methods, ns.allowed_headers, ns.allow_credentials)


def _string_list(text: str) -> tuple[str, ...]:
    try:
        return string_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_sampling_defaults_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's flags for the sampling defaults of requests that leave them out (SGLang's
    `--sampling-defaults model|openai` too)."""
    p.add_argument(
        "--generation-config",
        default=None,
        metavar="auto|vllm|FOLDER",
        help="where requests' default sampling parameters come from (temperature, top_p, top_k, min_p, "
        "repetition_penalty, max_new_tokens as the default token limit): auto, the model folder's "
        "generation_config.json (the default, as in vLLM and SGLang); vllm, OpenAI's defaults; or "
        "another folder's generation_config.json. A request's own fields always win",
    )
    p.add_argument(
        "--sampling-defaults",
        choices=("model", "openai"),
        default=None,
        help="SGLang's name for it: model (--generation-config auto) or openai (--generation-config vllm)",
    )
    p.add_argument(
        "--override-generation-config",
        default=None,
        metavar="JSON",
        help="defaults set on top of those, in generation_config.json's names, e.g. '{\"temperature\": 0.5}'",
    )


def generation_config_source(ns: argparse.Namespace) -> str:
    """--generation-config, or what --sampling-defaults means; a ValueError where they disagree."""
    alias = {"model": "auto", "openai": "vllm", None: None}[ns.sampling_defaults]
    if ns.generation_config is not None and alias is not None and ns.generation_config != alias:
        raise ValueError("--generation-config and --sampling-defaults disagree; give one of them")
    return ns.generation_config or alias or "auto"


def sampling_defaults(ns: argparse.Namespace, model_path: Path) -> SamplingDefaults:
    """The defaults the flags ask for, read and checked (a ValueError says what is wrong)."""
    source = generation_config_source(ns)
    text = ns.override_generation_config
    overrides = None if text is None else json_object(text, "--override-generation-config")
    return load_sampling_defaults(source, model_path, overrides)


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
        help="keep them (responses, conversations, stored chat completions), and the Files and Batch "
        "APIs' files and batches, in Redis (redis://host:6379/0), shared by every gateway replica "
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
        help="the Files API's files (batch inputs and outputs, in the gateway's memory or beside the "
        f"responses in Redis): their total size at most (default: {DEFAULT_FILES_MAX_BYTES >> 20} MiB)",
    )


def add_reply_parser_arguments(p: argparse.ArgumentParser) -> None:
    """How replies are read: vLLM's flags for tool_choice "auto" (SGLang's `--tool-call-parser` alone
    does the same) and for thinking models' reasoning."""
    p.add_argument(
        "--reasoning-parser",
        type=lambda name: REASONING_ALIASES.get(name, name),
        choices=sorted(REASONING_PARSERS),
        default=None,
        help="split a thinking model's <think> reasoning off its answer, into reasoning_content "
        "(deepseek_r1, deepseek_v3, qwen3_thinking: reasoning until </think>; qwen3, glm45: only after "
        "a leading <think>; mistral: [THINK]...[/THINK]; granite: its 'Here is my thought process:' and "
        "'Here is my response:'; SGLang's spellings such as deepseek-r1 too); "
        "default: all text",
    )
    p.add_argument(
        "--tool-call-parser",
        type=lambda name: TOOL_CALL_ALIASES.get(name, name),
        choices=sorted(TOOL_CALL_PARSERS),
        default=None,
        help="the model's tool-call format, read out of its replies for tool_choice 'auto' (hermes: "
        "Qwen2.5/3, Hermes; llama3_json: Llama 3.1+; pythonic: Llama 3.2/4; qwen3_coder: Qwen3-Coder; "
        "glm45: GLM-4.5/4.6; mistral; deepseek_v3, deepseek_v31; kimi_k2; granite: Granite 3; "
        "phi4_mini_json: Phi-4-mini); default: 'auto' is refused",
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
    model_path = Path(resolve_model_path(ns.model_path, models_dir()))
    try:
        parser = tool_call_parser(ns)
        template = chat_template(ns)
        defaults = sampling_defaults(ns, model_path)
        tls = tls_settings(ns)
    except ValueError as exc:
        print(f"treespec gateway: error: {exc}", file=sys.stderr)
        return 2
    config = GatewayConfig(
        verifier_addresses=tuple(a.strip() for a in ns.verifier_address.split(",") if a.strip()),
        model_path=model_path,
        served_model_names=tuple(ns.served_model_name),
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
        sampling_defaults=defaults,
        cors=cors_policy(ns),
        tls=tls,
        logs=log_options(ns),
    )
    provider = build_tracer_provider("treespec-gateway")
    install_tracer_provider(provider)
    try:
        serve(config, tracer_provider=provider)
    finally:
        provider.shutdown()
    return 0
