"""Generate the Python stubs of the .proto files beside this module with grpcio-tools."""

from __future__ import annotations

import fcntl
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parents[1]  # protos/: the import root of "treespec/v1/*.proto"


def proto_files() -> list[Path]:
    return sorted(HERE.glob("*.proto"))


def stale(proto: Path) -> bool:
    outputs = [proto.with_name(proto.stem + suffix) for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]
    return any(not o.exists() or o.stat().st_mtime < proto.stat().st_mtime for o in outputs)


def generate(protos: list[Path]) -> None:
    from grpc_tools import protoc  # build-time tool: imported only when stubs must be written

    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={PROTO_ROOT}",
        f"--pyi_out={PROTO_ROOT}",
        f"--grpc_python_out={PROTO_ROOT}",
        *(str(p.relative_to(PROTO_ROOT)) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(p.name for p in protos)}")


def ensure_stubs() -> None:
    """Write the stubs if any is missing or older than its .proto (under a lock: processes race)."""
    protos = proto_files()
    if not any(stale(p) for p in protos):
        return
    with open(HERE / ".codegen.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if any(stale(p) for p in protos):
            generate(protos)
