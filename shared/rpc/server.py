"""A grpc.aio server with what every treespec server has: health checking, server reflection (so that
grpcurl and other generic clients list and call its services), error mapping, tracing."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from treespec.shared.rpc.errors import FailedPreconditionError

log = logging.getLogger(__name__)


# Domain errors -> status codes, in one place (servicers stay thin and just raise).
ERROR_CODES: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (KeyError, grpc.StatusCode.NOT_FOUND),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
]


def status_for(exc: BaseException) -> grpc.StatusCode:
    for error, code in ERROR_CODES:
        if isinstance(exc, error):
            return code
    return grpc.StatusCode.INTERNAL


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Turns exceptions escaping a handler into a gRPC status with the exception's message."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_stream(handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _wrap_unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(request, context)
        except (grpc.aio.AbortError, grpc.RpcError):
            raise
        except Exception as exc:
            await _abort(context, exc)

    return run


def _wrap_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for item in fn(request, context):
                yield item
        except (grpc.aio.AbortError, grpc.RpcError):
            raise
        except Exception as exc:
            await _abort(context, exc)

    return run


async def _abort(context: grpc.aio.ServicerContext, exc: Exception) -> None:
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.exception("internal error in a gRPC handler")
    await context.abort(code, str(exc) or type(exc).__name__)


@dataclass
class ServerHandle:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int

    async def start(self, service_names: Sequence[str]) -> None:
        """Start serving the servicers registered on `server` (`service_names`: their full names),
        described by reflection beside health checking, and report them SERVING."""
        described = (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(described, self.server)  # handlers go in before start
        await self.server.start()
        for name in ("", *service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float | None = 5.0) -> None:
        for name in ("",):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace)


def create_server(
    address: str, extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
) -> ServerHandle:
    """A server bound to `address` (host:port; port 0 picks a free one) with health checking; an
    OSError where the port is taken, also by another gRPC server (gRPC's default SO_REUSEPORT would
    bind a second verifier on the same port beside the first and split the connections between them).

    Register servicers on `handle.server`, then `await handle.start(their full names)`.
    """
    server = grpc.aio.server(
        interceptors=[*extra_interceptors, ErrorMappingInterceptor()],
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024), ("grpc.so_reuseport", 0)],
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # recent grpcio raises where older versions returned 0
        raise OSError(f"cannot listen on {address}") from exc
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return ServerHandle(server, health_servicer, port)
