"""Where a co-located drafter's sockets lie, for every launcher (`treespec serve`, the bench's and the
tests' `colocated_drafter`): the verifier's co-location socket and, beside it, the drafter's local
Draft stream, which the verifier reaches as `local:PATH`."""

from __future__ import annotations

from pathlib import Path

from treespec.verifier.drafter_targets import LOCAL_SCHEME

SOCKET_NAME = "colocation.sock"
DRAFT_SOCKET_NAME = "draft.sock"


def draft_socket(colocation_socket: Path) -> Path:
    """The drafter's local Draft stream socket, in the co-location socket's (private) directory."""
    return colocation_socket.with_name(DRAFT_SOCKET_NAME)


def local_address(draft_socket: Path) -> str:
    """The verifier's `--drafter-address` for that socket."""
    return f"{LOCAL_SCHEME}{draft_socket}"
