"""`treespec drafter`: serve one drafter plugin over gRPC (the Drafter service)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from treespec.shared.cli.arg_types import port, positive_int
from treespec.shared.cli.plugin_flags import (
    add_option_argument,
    add_plugin_arguments,
    parse_options,
    plugin_options,
)

DEFAULT_PORT = 50061


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "drafter",
        help="serve a drafter plugin over gRPC",
        description="Serve one drafter plugin (by registry name) behind the gRPC Drafter service.",
    )
    parser.add_argument("--kind", required=True, help="drafter name (random, oracle, ...) or module:Class")
    vocab = parser.add_mutually_exclusive_group(required=True)
    vocab.add_argument("--model-path", type=Path, metavar="DIR", help="the target model's folder")
    vocab.add_argument("--vocab-size", type=positive_int, metavar="N", help="the target's vocabulary size")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help="0: any free port (default: %(default)s)"
    )
    add_option_argument(parser)
    parser.add_argument(
        "--colocate",
        default=None,
        metavar="PATH",
        help="the verifier's --colocation-socket: read its embedding and features through shared "
        "memory (same machine, CPU; needed by EAGLE)",
    )
    parser.add_argument(
        "--local-socket",
        default=None,
        metavar="PATH",
        help="also serve the Draft stream on this Unix socket (mode 0600), for a verifier on this "
        "machine (its --drafter-address local:PATH): a shorter round trip than gRPC's",
    )
    parser.add_argument(
        "--plugin-calls",
        choices=["thread", "loop"],
        default=None,
        help="where the plugin's calls run: `thread` (a worker thread; the server stays responsive "
        "during a call) or `loop` (the server's event loop; a shorter round trip, for a plugin "
        "serving the one verifier beside it). Default: loop with --colocate, else thread",
    )
    add_plugin_arguments(parser)
    parser.set_defaults(handler=_drafter)


def _drafter(args: argparse.Namespace) -> int:
    from treespec.drafter.server.app import serve
    from treespec.drafter.server.config import DrafterServerConfig
    from treespec.drafter.server.plugin_calls import PluginCalls
    from treespec.shared.drafting.colocated_access import ColocatedTargetAccess
    from treespec.shared.drafting.colocation_wire import ColocationError
    from treespec.shared.drafting.drafter import DrafterContext
    from treespec.shared.drafting.shared_tensor import SharedTensorError
    from treespec.shared.launcher.ports import taken_ports
    from treespec.shared.rpc.private_socket import SocketInUseError, socket_path

    try:
        taken = taken_ports([(args.host, args.port)])  # before anything reads the model
        if taken is not None:
            raise ValueError(taken)
        flags = plugin_options(args, args.kind)
        options = {**flags, **parse_options(args.option)}
        vocab_size = args.vocab_size if args.vocab_size is not None else read_vocab_size(args.model_path)
        # Nothing is asked of the verifier yet: a plugin that reads the target connects in `create`.
        target = ColocatedTargetAccess(args.colocate) if args.colocate is not None else None
        local_socket = socket_path(args.local_socket) if args.local_socket is not None else None
    except ValueError as exc:
        print(f"treespec drafter: error: {exc}", file=sys.stderr)
        return 2
    context = DrafterContext(vocab_size, args.model_path, options, target)
    _configure_logging()
    try:
        calls = PluginCalls(args.plugin_calls or ("loop" if args.colocate is not None else "thread"))
        config = DrafterServerConfig(
            args.kind, context, args.host, args.port, plugin_calls=calls, local_socket=local_socket
        )
        return serve(config)
    except (ValueError, TypeError) as exc:  # unknown drafter, or options its constructor rejects
        print(f"treespec drafter: error: {exc}", file=sys.stderr)
        return 2
    except (ColocationError, SharedTensorError, SocketInUseError) as exc:  # --colocate, --local-socket
        print(f"treespec drafter: error: {exc}", file=sys.stderr)
        return 1


def read_vocab_size(model_path: Path) -> int:
    """From config.json (or its text_config, for multimodal checkpoints)."""
    file = model_path / "config.json"
    if not file.is_file():
        raise ValueError(f"no config.json in {model_path}")
    config = json.loads(file.read_text())
    size = config.get("vocab_size", config.get("text_config", {}).get("vocab_size"))
    if not isinstance(size, int):
        raise ValueError(f"{file} has no vocab_size")
    return size


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
