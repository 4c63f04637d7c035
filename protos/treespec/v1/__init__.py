"""treespec's wire contract (v1): the .proto files here and the Python stubs generated from them.

The stubs (`*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py`) are build outputs, never committed: the package
build writes them (setup.py), and importing this package writes them when they are missing or
older than their .proto file, so a fresh clone needs no manual step.
"""

from treespec.v1._codegen import ensure_stubs

ensure_stubs()
