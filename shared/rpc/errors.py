"""Domain errors that servers raise for a gRPC status other than ValueError's INVALID_ARGUMENT
(shared/rpc/server.py maps them), importable without grpc."""


class FailedPreconditionError(RuntimeError):
    """The call cannot be carried out in the server's present state (FAILED_PRECONDITION)."""
