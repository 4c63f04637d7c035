"""`treespec serve`: the all-in-one server: a drafter, the verifier and the gateway as child processes."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treespec.gateway.config import (
    DEFAULT_FILES_MAX_BYTES,
    DEFAULT_RESPONSES_STORE_SIZE,
    DEFAULT_RESPONSES_STORE_TTL_S,
)
from treespec.gateway.cors import ANY, CorsPolicy
from treespec.gateway.log_options import LogOptions
from treespec.gateway.tls import TlsFiles
from treespec.shared.cli.arg_types import port, positive_int
from treespec.shared.cli.engine_flags import EngineFlags, add_engine_arguments
from treespec.shared.cli.gateway import (
    add_chat_template_arguments,
    add_cors_arguments,
    add_reply_parser_arguments,
    add_request_log_arguments,
    add_responses_store_argument,
    add_sampling_defaults_arguments,
    add_served_model_name_argument,
    add_tls_arguments,
    chat_template,
    cors_policy,
    generation_config_source,
    log_options,
    sampling_defaults,
    tls_settings,
    tool_call_parser,
)
from treespec.shared.cli.ngram_flags import option_arguments
from treespec.shared.cli.plugin_flags import add_plugin_arguments, check_plugin_options, plugin_options
from treespec.shared.cli.speculation_flags import add_budget_arguments, default_budget, resolve_budget
from treespec.shared.cli.speculative_config import add_speculative_config_argument
from treespec.shared.cli.verifier import add_profile_argument, colocation_device_problem
from treespec.shared.launcher.colocation_paths import DRAFT_SOCKET_NAME, SOCKET_NAME, local_address
from treespec.shared.launcher.health import grpc_serving, http_ok, tcp_open
from treespec.shared.launcher.ports import free_ports, taken_ports
from treespec.shared.launcher.process import ServiceProcess
from treespec.shared.launcher.shared_cores import shared_core_env
from treespec.shared.launcher.supervisor import Supervisor
from treespec.shared.model.store import models_dir, resolve_model_path

# The n-gram drafter needs no extra model, so it works for any target out of the box.
DEFAULT_ALGORITHM = "NGRAM"
# Drafters that read the target's embedding and features: their process maps the verifier's memory.
COLOCATED_ALGORITHMS = frozenset({"eagle", "eagle3"})
# Drafters that run a model of their own: on the verifier's machine, the two processes take turns on
# the same cores, and a drafting step (several forwards of the draft model) needs a longer deadline.
MODEL_ALGORITHMS = frozenset({"standalone"})
DRAFT_DEADLINE_MS = 50
MODEL_DRAFT_DEADLINE_MS = 500


@dataclass(frozen=True)
class ServeConfig:
    model_path: Path
    host: str
    port: int
    verifier_port: int
    drafter_port: int
    algorithm: str  # a drafter name, or NONE
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    draft_deadline_ms: int
    api_keys: tuple[str, ...]
    served_model_names: tuple[str, ...]  # the first is the verifier's; the gateway answers to each
    verifier_metrics_port: int | None
    drafter_options: dict[str, Any] = field(default_factory=dict)  # plugin options (NGRAM flags)
    engine: EngineFlags = field(default_factory=EngineFlags)  # the verifier's engine flags
    profile_dir: Path | None = None  # the verifier's: where profiler traces go (None: off)
    tool_call_parser: str | None = None  # the gateway's, for tool_choice "auto"
    reasoning_parser: str | None = None  # the gateway's, for thinking models
    responses_store_size: int = DEFAULT_RESPONSES_STORE_SIZE  # the gateway's
    responses_store_url: str | None = None  # the gateway's (None: in its memory)
    responses_store_ttl_s: int = DEFAULT_RESPONSES_STORE_TTL_S
    files_max_bytes: int = DEFAULT_FILES_MAX_BYTES  # the gateway's
    chat_template: str | None = None  # the gateway's --chat-template (a file or the template)
    trust_request_chat_template: bool = False
    allow_auto_truncate: bool = False
    generation_config: str = "auto"  # the gateway's --generation-config
    override_generation_config: str | None = None  # ... and --override-generation-config
    cors: CorsPolicy = field(default_factory=CorsPolicy)  # the gateway's cross-origin flags
    tls: TlsFiles | None = None  # the gateway's HTTPS files (None: plain HTTP)
    logs: LogOptions = field(default_factory=LogOptions)  # the gateway's log and request-id flags
    node_cost: float | None = None  # None: the verifier measures it
    tree_cost: float | None = None  # with node_cost only
    # For COLOCATED_ALGORITHMS: the verifier's co-location socket, in a private (0700) directory.
    colocation_socket: Path | None = None
    # For every drafter: its local Draft stream socket, in such a directory (beside the co-location
    # socket where there is one). The verifier beside it links to it there instead of over gRPC.
    draft_socket: Path | None = None
    # The drafter inside the verifier's process (no drafter process, no sockets between them).
    drafter_in_process: bool = False

    @classmethod
    def on_free_ports(
        cls, model_path: Path, algorithm: str = DEFAULT_ALGORITHM, **overrides: Any
    ) -> ServeConfig:
        """The CLI's defaults on free loopback ports (tests, benchmarks)."""
        budget = default_budget(algorithm, overrides.get("drafter_options"))
        port, verifier_port, drafter_port = free_ports(3)
        defaults: dict[str, Any] = dict(
            host="127.0.0.1",
            port=port,
            verifier_port=verifier_port,
            drafter_port=drafter_port,
            num_steps=budget.num_steps,
            eagle_topk=budget.eagle_topk,
            num_draft_tokens=budget.num_draft_tokens,
            draft_deadline_ms=default_deadline_ms(algorithm),
            api_keys=(),
            served_model_names=(),
            verifier_metrics_port=None,
        )
        if not overrides.get("drafter_in_process"):
            defaults.update(drafter_sockets(algorithm))
        return cls(model_path=model_path, algorithm=algorithm, **{**defaults, **overrides})

    @property
    def speculative(self) -> bool:
        return self.algorithm.upper() != "NONE"

    @property
    def colocated(self) -> bool:
        return self.speculative and self.colocation_socket is not None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def listen_addresses(self) -> list[tuple[str, int]]:
        """Where the stack's services listen over TCP (the gateway, the verifier and its metrics, a
        drafter process)."""
        out = [(self.host, self.port), ("127.0.0.1", self.verifier_port)]
        if self.speculative and not self.drafter_in_process:
            out.append(("127.0.0.1", self.drafter_port))
        if self.verifier_metrics_port is not None:
            out.append(("127.0.0.1", self.verifier_metrics_port))
        return out


def default_deadline_ms(algorithm: str) -> int:
    return MODEL_DRAFT_DEADLINE_MS if algorithm.lower() in MODEL_ALGORITHMS else DRAFT_DEADLINE_MS


def drafter_sockets(algorithm: str) -> dict[str, Path]:
    """The sockets between the verifier and a drafter beside it (ServeConfig's `colocation_socket` and
    `draft_socket`), in a new directory only this user can enter (mkdtemp makes it 0700): the
    co-location socket hands out handles to the verifier's memory, the Draft stream carries requests'
    tokens. The directory goes when this process exits. None for plain decoding."""
    if algorithm.upper() == "NONE":
        return {}
    directory = Path(tempfile.mkdtemp(prefix="treespec-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    sockets = {"draft_socket": directory / DRAFT_SOCKET_NAME}
    if algorithm.lower() in COLOCATED_ALGORITHMS:
        sockets["colocation_socket"] = directory / SOCKET_NAME
    return sockets


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="all-in-one server: drafter + verifier + OpenAI gateway")
    add_serve_arguments(p)
    p.set_defaults(handler=_run)


def add_serve_arguments(p: argparse.ArgumentParser, listening: bool = True) -> None:
    """The all-in-one stack's flags; without `listening`, none of its addresses (they are free
    loopback ports), API keys or cross-origin flags (a stack of the command's own, as `run-batch`
    starts)."""
    p.add_argument("--model-path", help="HF model directory (default: the bundled SmolLM2-135M-Instruct)")
    if listening:
        p.add_argument("--host", default="127.0.0.1", help="gateway host")
        p.add_argument("--port", type=port, default=8000, help="gateway port")
        p.add_argument("--verifier-port", type=port, default=50051)
        p.add_argument("--drafter-port", type=port, default=50061)
        p.add_argument(
            "--verifier-metrics-port", type=port, default=None, help="Prometheus port of the verifier"
        )
        p.add_argument("--api-key", action="append", default=[], help="accepted API key (repeatable)")
    else:
        p.set_defaults(host="127.0.0.1", port=None, verifier_port=None, drafter_port=None)
        p.set_defaults(verifier_metrics_port=None, api_key=[])
        p.set_defaults(allowed_origins=ANY, allowed_methods=ANY, allowed_headers=ANY, allow_credentials=False)
        p.set_defaults(enable_request_id_headers=False, uvicorn_log_level="info")
        p.set_defaults(disable_uvicorn_access_log=True)  # a stack of its own: no line per request
        p.set_defaults(ssl_keyfile=None, ssl_certfile=None, ssl_ca_certs=None, ssl_cert_reqs=0)
    p.add_argument(
        "--speculative-algorithm", default=DEFAULT_ALGORITHM, help="drafter to run (NONE: plain decoding)"
    )
    add_budget_arguments(p)
    add_speculative_config_argument(p)
    p.add_argument(
        "--draft-deadline-ms",
        type=positive_int,
        default=None,
        help=f"how long the verifier waits for a step's drafts (default: {DRAFT_DEADLINE_MS}; "
        f"STANDALONE: {MODEL_DRAFT_DEADLINE_MS})",
    )
    p.add_argument(
        "--drafter-in-process",
        action="store_true",
        help="run the drafter inside the verifier's process instead of as a process of its own: no "
        "round trip between the two (on a CPU of a few cores they also stop taking turns on them); "
        "the drafter then neither restarts nor scales on its own",
    )
    add_served_model_name_argument(p)
    add_engine_arguments(p)
    add_profile_argument(p)
    add_reply_parser_arguments(p)
    add_chat_template_arguments(p)
    add_sampling_defaults_arguments(p)
    add_responses_store_argument(p)
    add_request_log_arguments(p)
    add_plugin_arguments(p)
    if listening:
        add_cors_arguments(p)
        add_tls_arguments(p)


class ServeFlagsError(ValueError):
    """Flags of `serve` (or `run-batch`) that cannot work together; the command exits 2 with it."""


def _run(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = serve_config(ns)
    taken = taken_ports(config.listen_addresses())
    if taken is not None:
        raise ServeFlagsError(f"{taken}; --port, --verifier-port, --drafter-port choose others")
    supervisor = Supervisor(services(config))
    supervisor.start_all()
    print(f"treespec is serving {config.model_path.name} at {config.url}/v1 (Ctrl-C stops)", flush=True)
    return supervisor.run_until_stopped()


def serve_config(ns: argparse.Namespace) -> ServeConfig:
    """The stack the flags ask for (add_serve_arguments); a ServeFlagsError names what cannot work,
    before anything starts. Addresses left unset are free loopback ports."""
    options = plugin_options(ns, ns.speculative_algorithm)
    try:
        check_plugin_options(ns.speculative_algorithm, options)
        budget = resolve_budget(ns, ns.speculative_algorithm, options)
        parser = tool_call_parser(ns)
        chat_template(ns)  # a template that cannot work stops serve before anything starts
        model_path = resolve_model_path(ns.model_path, models_dir())
        sampling_defaults(ns, model_path)  # as do sampling defaults that cannot be read
        tls = tls_settings(ns)  # and TLS files that do not load
        colocated = ns.speculative_algorithm.lower() in COLOCATED_ALGORITHMS and not ns.drafter_in_process
        device_problem = colocation_device_problem(ns.device) if colocated else None
        if device_problem is not None:
            raise ValueError(device_problem)
    except ValueError as exc:
        raise ServeFlagsError(str(exc)) from exc
    spare = free_ports(3)  # distinct, for the ports left unset
    return ServeConfig(
        model_path=model_path,
        host=ns.host,
        port=ns.port or spare[0],
        verifier_port=ns.verifier_port or spare[1],
        drafter_port=ns.drafter_port or spare[2],
        algorithm=ns.speculative_algorithm,
        num_steps=budget.num_steps,
        eagle_topk=budget.eagle_topk,
        num_draft_tokens=budget.num_draft_tokens,
        draft_deadline_ms=ns.draft_deadline_ms or default_deadline_ms(ns.speculative_algorithm),
        api_keys=tuple(ns.api_key),
        served_model_names=tuple(ns.served_model_name),
        verifier_metrics_port=ns.verifier_metrics_port,
        engine=EngineFlags.of(ns),
        profile_dir=ns.profile_dir,
        tool_call_parser=parser,
        reasoning_parser=ns.reasoning_parser,
        responses_store_size=ns.responses_store_size,
        responses_store_url=ns.responses_store_url,
        responses_store_ttl_s=ns.responses_store_ttl,
        files_max_bytes=ns.files_max_bytes,
        chat_template=ns.chat_template,
        trust_request_chat_template=ns.trust_request_chat_template,
        allow_auto_truncate=ns.allow_auto_truncate,
        generation_config=generation_config_source(ns),
        override_generation_config=ns.override_generation_config,
        cors=cors_policy(ns),
        tls=tls,
        logs=log_options(ns),
        drafter_options=options,
        node_cost=budget.node_cost,
        tree_cost=budget.tree_cost,
        drafter_in_process=ns.drafter_in_process,
        **({} if ns.drafter_in_process else drafter_sockets(ns.speculative_algorithm)),
    )


def _budget_arguments(c: ServeConfig) -> list[str]:
    """The verifier's tree budget and verify costs."""
    out = [
        "--speculative-num-steps", str(c.num_steps),
        "--speculative-eagle-topk", str(c.eagle_topk),
        "--speculative-num-draft-tokens", str(c.num_draft_tokens),
    ]  # fmt: skip
    if c.node_cost is not None:
        out += ["--speculative-node-cost", str(c.node_cost)]
    if c.tree_cost is not None:
        out += ["--speculative-tree-cost", str(c.tree_cost)]
    return out


def services(c: ServeConfig) -> list[ServiceProcess]:
    """Drafter, verifier, gateway; a co-located drafter starts after the verifier, whose socket it
    attaches to (the verifier decodes plainly until the drafter is up)."""
    model = ["--model-path", str(c.model_path)]
    verifier_address = f"127.0.0.1:{c.verifier_port}"
    drafter_address = f"127.0.0.1:{c.drafter_port}"
    out: list[ServiceProcess] = []
    verifier = ["verifier", *model, "--port", str(c.verifier_port)]
    if c.speculative and c.drafter_in_process:
        verifier += ["--speculative-algorithm", c.algorithm, *_budget_arguments(c)]
        verifier += option_arguments(c.drafter_options)
    elif c.speculative:
        drafter = ["drafter", "--kind", c.algorithm, *model, "--port", str(c.drafter_port)]
        drafter += option_arguments(c.drafter_options)
        link_address = drafter_address
        if c.colocation_socket is not None:
            drafter += ["--colocate", str(c.colocation_socket)]
            verifier += ["--colocation-socket", str(c.colocation_socket)]
        if c.draft_socket is not None:
            # The Draft stream over a local socket, its calls on the drafter's event loop: a round
            # trip about half of gRPC's (docs/benchmarks.md). gRPC still serves other verifiers.
            drafter += ["--local-socket", str(c.draft_socket), "--plugin-calls", "loop"]
            link_address = local_address(c.draft_socket)
        # Not essential: if it dies, the verifier decodes plainly until the supervisor restarts it.
        out.append(ServiceProcess("drafter", drafter, lambda: grpc_serving(drafter_address), essential=False))
        verifier += ["--drafter-address", link_address, "--draft-deadline-ms", str(c.draft_deadline_ms)]
        verifier += _budget_arguments(c)
    else:
        verifier += ["--speculative-algorithm", "NONE"]
    if c.verifier_metrics_port is not None:
        verifier += ["--metrics-port", str(c.verifier_metrics_port)]
    if c.served_model_names:
        verifier += ["--served-model-name", c.served_model_names[0]]
    verifier += c.engine.argv()
    if c.profile_dir is not None:
        verifier += ["--profile-dir", str(c.profile_dir)]
    verifier_process = ServiceProcess("verifier", verifier, lambda: grpc_serving(verifier_address))
    out.insert(0 if c.colocated else len(out), verifier_process)  # a co-located drafter needs its socket
    # A drafter process with a model takes turns with the verifier on the same cores; a drafter in the
    # verifier's process leaves the verifier alone there, whose forwards gain from the longer default wait.
    shares_cores = c.colocated or (c.speculative and c.algorithm.lower() in MODEL_ALGORITHMS)
    if shares_cores and not c.drafter_in_process:
        for process in out:
            process.env.update(shared_core_env(os.environ))
    gateway = [
        "gateway",
        *model,
        "--verifier-address",
        verifier_address,
        "--host",
        c.host,
        "--port",
        str(c.port),
    ]
    for key in c.api_keys:
        gateway += ["--api-key", key]
    if c.served_model_names:
        gateway += ["--served-model-name", *c.served_model_names]
    if c.tool_call_parser is not None:
        gateway += ["--tool-call-parser", c.tool_call_parser]
    if c.reasoning_parser is not None:
        gateway += ["--reasoning-parser", c.reasoning_parser]
    gateway += ["--responses-store-size", str(c.responses_store_size)]
    gateway += ["--files-max-bytes", str(c.files_max_bytes)]
    if c.chat_template is not None:
        gateway += ["--chat-template", c.chat_template]
    if c.trust_request_chat_template:
        gateway += ["--trust-request-chat-template"]
    if c.allow_auto_truncate:
        gateway += ["--allow-auto-truncate"]
    gateway += ["--generation-config", c.generation_config]
    if c.override_generation_config is not None:
        gateway += ["--override-generation-config", c.override_generation_config]
    gateway += c.cors.argv()
    gateway += c.logs.argv()
    if c.tls is not None:
        gateway += c.tls.argv()
    if c.responses_store_url is not None:
        gateway += ["--responses-store-url", c.responses_store_url]
        gateway += ["--responses-store-ttl", str(c.responses_store_ttl_s)]
    out.append(ServiceProcess("gateway", gateway, lambda: _gateway_ready(c)))
    return out


def _gateway_ready(c: ServeConfig) -> bool:
    """Its /health answers 200; over HTTPS (whose certificate may not name this address, and which
    may ask for a client certificate) its port accepts connections: uvicorn binds it once the app has
    started, and the verifier was ready before the gateway started."""
    if c.tls is None:
        return http_ok(f"{c.url}/health")
    return tcp_open(c.host, c.port)
