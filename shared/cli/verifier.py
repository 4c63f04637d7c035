"""`treespec verifier`: the verifier gRPC server (target model, KV cache, tree verification).

Flags follow SGLang's names. Drafts come from an in-process registry drafter
(`--speculative-algorithm`), or from drafter servers (`--drafter-address`), or not at all.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from treespec.shared.cli.arg_types import port, positive_float
from treespec.shared.cli.engine_flags import EngineFlags, add_engine_arguments
from treespec.shared.cli.plugin_flags import (
    add_option_argument,
    add_plugin_arguments,
    check_plugin_options,
    parse_options,
    plugin_options,
)
from treespec.shared.cli.speculation_flags import add_budget_arguments, resolve_budget
from treespec.shared.cli.speculative_config import add_speculative_config_argument

if TYPE_CHECKING:
    from treespec.verifier.server.app import VerifierServerConfig

NONE = "NONE"
COLOCATED_DEVICES = ("cpu", "cuda")  # POSIX shared memory, CUDA IPC (shared/drafting/colocation.py)


def colocation_device_problem(device: str) -> str | None:
    """Why a drafter process cannot map a target on `device`, if it cannot."""
    kind = device.split(":", 1)[0].strip().lower()
    if kind in COLOCATED_DEVICES:
        return None
    return (
        f"co-location shares CPU memory (POSIX shared memory) or CUDA memory (CUDA IPC), not {device} "
        "memory: run the drafter in the verifier's process instead (treespec verifier "
        "--speculative-algorithm ...)"
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "verifier",
        help="the verifier gRPC server: target model, KV cache, tree verification",
        description="Serve treespec.v1.Verifier over gRPC (with health checking) until SIGTERM or SIGINT.",
    )
    p.add_argument("--model-path", help="HF model directory (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=50051, help="gRPC port (0: a free one, printed in the log)")
    p.add_argument("--metrics-port", type=port, default=None, help="Prometheus /metrics port (default: off)")
    p.add_argument("--served-model-name", default=None, help="model name to report (default: folder name)")
    add_profile_argument(p)
    add_engine_arguments(p)
    _speculation_arguments(p)
    p.set_defaults(handler=_run)


def add_profile_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where POST /start_profile writes torch profiler traces of the engine (default: profiling off)",
    )


def _speculation_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--speculative-algorithm",
        type=_algorithm,
        default=NONE,
        help="a drafter run in-process (e.g. RANDOM), or NONE; with --drafter-address only reported",
    )
    add_budget_arguments(p)
    add_speculative_config_argument(p)
    p.add_argument(
        "--drafter-address",
        default=None,
        help="drafter servers: host:port[,host:port...], local:PATH (a drafter's --local-socket on this "
        "machine: the Draft stream without gRPC, a shorter round trip) or dns:///name:port",
    )
    p.add_argument(
        "--draft-deadline-ms", type=positive_float, default=50.0, help="wait for remote drafts at most"
    )
    p.add_argument(
        "--colocation-socket",
        default=None,
        metavar="PATH",
        help="with --drafter-address: a Unix socket where drafter processes on this machine "
        "(treespec drafter --colocate PATH) map the target's embedding and features (a target on CPU "
        "or CUDA)",
    )
    add_plugin_arguments(p)
    add_option_argument(p)  # as `treespec drafter` takes them, for the in-process drafter


def _algorithm(value: str) -> str:
    from treespec.shared.drafting.registry import UnknownDrafterError, drafter_class

    if value.upper() == NONE:
        return NONE
    try:
        drafter_class(value)
    except UnknownDrafterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def config_from_args(ns: argparse.Namespace) -> VerifierServerConfig:
    from treespec.shared.model.store import models_dir, resolve_model_path
    from treespec.verifier.config import EngineConfig
    from treespec.verifier.request import SpeculationParams
    from treespec.verifier.server.app import VerifierServerConfig
    from treespec.verifier.server.drafters import DrafterSpec

    remote = tuple(a.strip() for a in (ns.drafter_address or "").split(",") if a.strip())
    options = {**plugin_options(ns, ns.speculative_algorithm), **parse_options(ns.option)}
    check_plugin_options(ns.speculative_algorithm, options, loads_here=not remote)
    drafter = DrafterSpec(
        algorithm=None if ns.speculative_algorithm == NONE else ns.speculative_algorithm,
        remote_targets=remote,
        deadline_s=ns.draft_deadline_ms / 1000.0,
        options=options,
        colocation_socket=ns.colocation_socket,
    )
    budget = resolve_budget(ns, ns.speculative_algorithm, options)
    speculation = SpeculationParams(
        enabled=drafter.enabled,
        num_steps=budget.num_steps,
        eagle_topk=budget.eagle_topk,
        num_draft_tokens=budget.num_draft_tokens,
    )
    engine = EngineConfig(
        model_path=Path(resolve_model_path(ns.model_path, models_dir())),
        speculation=speculation,
        node_cost=budget.node_cost,
        tree_cost=budget.tree_cost or 0.0,
        **EngineFlags.of(ns).engine_fields(),
    )
    return VerifierServerConfig(
        engine=engine,
        host=ns.host,
        port=ns.port,
        metrics_port=ns.metrics_port,
        served_model_name=ns.served_model_name,
        drafter=drafter,
        profile_dir=ns.profile_dir,
    )


def colocation_problem(ns: argparse.Namespace) -> str | None:
    """Why --colocation-socket cannot work with the other flags, if it cannot."""
    from treespec.shared.rpc.private_socket import socket_path

    if ns.colocation_socket is None:
        return None
    if not ns.drafter_address:
        return "--colocation-socket is for drafter servers: give --drafter-address too"
    problem = colocation_device_problem(ns.device)
    if problem is not None:
        return problem
    try:
        socket_path(ns.colocation_socket)
    except ValueError as exc:
        return str(exc)
    return None


def _run(ns: argparse.Namespace) -> int:
    from treespec.shared.launcher.ports import taken_ports
    from treespec.shared.telemetry.tracing import build_tracer_provider, install_tracer_provider
    from treespec.verifier.server.app import serve_until_signalled

    problem = colocation_problem(ns) or taken_ports([(ns.host, ns.port), (ns.host, ns.metrics_port or 0)])
    if problem is not None:
        print(f"treespec verifier: error: {problem}", file=sys.stderr)
        return 2
    try:
        config = config_from_args(ns)
    except ValueError as exc:
        print(f"treespec verifier: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    provider = build_tracer_provider("treespec-verifier")
    install_tracer_provider(provider)  # for instrumentations that look the provider up globally
    try:
        serve_until_signalled(config, tracer_provider=provider)
    finally:
        provider.shutdown()
    return 0
