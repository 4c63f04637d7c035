"""The gateway's side of the wire contract: a grpc.aio channel to the verifier replicas.

Several replicas are one channel with round_robin load balancing (a DNS name resolving to all of
them, or a list of IP addresses); the trace context travels in the calls' metadata through
OpenTelemetry's client interceptors. gRPC failures become OpenAI-style errors here, in one place:
INVALID_ARGUMENT is the client's mistake (400, with the verifier's message); a verifier that is
down or busy is 503.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncGenerator, Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import context
from opentelemetry.context import Context
from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters
from opentelemetry.trace import TracerProvider

from treespec.gateway.errors import SERVER_ERROR, APIError
from treespec.v1 import verifier_pb2, verifier_pb2_grpc

log = logging.getLogger(__name__)

_CLIENT_MISTAKES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)
_UNAVAILABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
PROFILE_EXPORT_S = 120.0  # writing a long trace out takes a while
T = TypeVar("T")
_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:")


@dataclass(frozen=True)
class ModelInfo:
    model_name: str
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    speculative_algorithm: str  # "" when speculation is off
    # The tree budget a request gets unless it asks otherwise: steps, top-k, draft tokens.
    speculation_budget: tuple[int, int, int] = (0, 0, 0)


def verifier_unavailable(detail: str) -> APIError:
    return APIError(
        503, f"The model server is unavailable: {detail}", code="service_unavailable", error_type=SERVER_ERROR
    )


def api_error(exc: grpc.aio.AioRpcError) -> APIError:
    """The OpenAI-style error for a failed verifier call."""
    code, details = exc.code(), exc.details() or exc.code().name
    if code in _CLIENT_MISTAKES:
        return APIError(400, details, code="invalid_value")
    if code in _UNAVAILABLE:
        return verifier_unavailable(details)
    return APIError(
        502, f"The model server failed: {details}", code="upstream_error", error_type=SERVER_ERROR
    )


def channel_target(addresses: Sequence[str]) -> str:
    """One gRPC target for the replicas: a DNS name (all its addresses) or a list of IP addresses."""
    if len(addresses) == 1:
        address = addresses[0]
        return address if address.startswith(_SCHEMES) else f"dns:///{address}"
    hosts = [_split_host(address) for address in addresses]
    versions = {ipaddress.ip_address(host).version for host in hosts}
    if len(versions) != 1:
        raise ValueError("several verifier addresses must all be IPv4 or all IPv6 addresses")
    return f"ipv{versions.pop()}:" + ",".join(addresses)


def _split_host(address: str) -> str:
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"{address!r}: several verifier addresses must be IP addresses "
            "(or give one DNS name that resolves to every replica)"
        ) from None
    return host


class VerifierClient:
    def __init__(
        self,
        addresses: Sequence[str],
        *,
        tracer_provider: TracerProvider | None = None,
        timeout_s: float = 5.0,
        attempts: int = 3,
    ) -> None:
        self._channel = grpc.aio.insecure_channel(
            channel_target(addresses),
            options=[("grpc.lb_policy_name", "round_robin"), ("grpc.enable_retries", 1)],
            interceptors=aio_client_interceptors(
                tracer_provider=tracer_provider, filter_=filters.negate(filters.health_check())
            ),
        )
        self._stub = verifier_pb2_grpc.VerifierStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._model_info: ModelInfo | None = None

    async def generate(
        self, request: verifier_pb2.GenerateRequest, trace_context: Context | None = None
    ) -> AsyncGenerator[verifier_pb2.GenerateChunk, None]:
        """The chunks of one generation, the call a child of `trace_context`'s span. Closing the
        iterator early cancels the call (the verifier then aborts the request and frees its KV)."""
        token = context.attach(trace_context) if trace_context is not None else None
        try:
            call = self._stub.Generate(request)  # the interceptor injects the trace context here
        finally:
            if token is not None:
                context.detach(token)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise api_error(exc) from exc
        finally:
            call.cancel()

    async def model_info(self) -> ModelInfo:
        """What the verifier serves; asked once (with retries), then remembered."""
        if self._model_info is None:
            reply = await self._model_info_with_retries()
            self._model_info = ModelInfo(
                model_name=reply.model_name,
                vocab_size=reply.vocab_size,
                context_length=reply.context_length,
                eos_token_ids=tuple(reply.eos_token_ids),
                speculative_algorithm=reply.speculative_algorithm,
                speculation_budget=(
                    reply.speculation_defaults.num_steps,
                    reply.speculation_defaults.eagle_topk,
                    reply.speculation_defaults.num_draft_tokens,
                ),
            )
        return self._model_info

    async def healthy(self) -> bool:
        """Whether a verifier answers the standard health check as SERVING."""
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=self._timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    async def stats(self) -> verifier_pb2.EngineStats:
        try:
            return await self._stub.GetStats(verifier_pb2.GetStatsRequest(), timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise api_error(exc) from exc

    async def flush_cache(self) -> int:
        """Have the verifier forget its cached prefixes; the KV blocks it gave back. A 400 while it
        runs requests. With several replicas, the one the call reaches."""
        call = self._stub.FlushCache(verifier_pb2.FlushCacheRequest(), timeout=self._timeout_s)
        reply = await _in_state(call, "engine_busy")
        return int(reply.freed_blocks)

    async def start_profile(self, num_steps: int, record_shapes: bool) -> str:
        """Have the verifier record a profiler trace; where it will write it. A 400 when it records
        none (started without --profile-dir) or records one already. With several replicas, the one
        the call reaches."""
        request = verifier_pb2.StartProfileRequest(num_steps=num_steps, record_shapes=record_shapes)
        reply = await _in_state(self._stub.StartProfile(request, timeout=self._timeout_s), "profiler_state")
        return str(reply.trace_path)

    async def stop_profile(self) -> str:
        """Stop the trace and have it written (exporting takes a while); where. A 400 when none runs."""
        call = self._stub.StopProfile(verifier_pb2.StopProfileRequest(), timeout=PROFILE_EXPORT_S)
        reply = await _in_state(call, "profiler_state")
        return str(reply.trace_path)

    async def close(self) -> None:
        await self._channel.close()

    async def _model_info_with_retries(self) -> verifier_pb2.ModelInfo:
        for attempt in range(self._attempts - 1):
            try:
                return await self._get_model_info()
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in _UNAVAILABLE:
                    raise api_error(exc) from exc
                log.debug("GetModelInfo failed (%s); retrying", exc.code().name)
            await asyncio.sleep(0.2 * 2**attempt)
        try:
            return await self._get_model_info()
        except grpc.aio.AioRpcError as exc:
            raise api_error(exc) from exc

    async def _get_model_info(self) -> verifier_pb2.ModelInfo:
        request = verifier_pb2.GetModelInfoRequest()
        return await self._stub.GetModelInfo(request, timeout=self._timeout_s)


async def _in_state(call: Awaitable[T], code: str) -> T:
    """An admin call's reply; the verifier's FAILED_PRECONDITION (its state does not allow the call)
    as a 400 with `code`, other errors as their HTTP statuses."""
    try:
        return await call
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise APIError(400, exc.details() or "the verifier cannot do that now", code=code) from exc
        raise api_error(exc) from exc
