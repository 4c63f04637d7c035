"""The Verifier gRPC service: protobuf in, the engine loop, protobuf out. Errors are raised as domain
exceptions; shared.rpc's interceptor maps them to status codes (ValueError: INVALID_ARGUMENT)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from opentelemetry import trace

from treespec.v1 import verifier_pb2 as pb
from treespec.v1 import verifier_pb2_grpc
from treespec.verifier.request import SpeculationParams
from treespec.verifier.server import convert, spans
from treespec.verifier.server.engine_loop import EngineLoop


class VerifierServicer(verifier_pb2_grpc.VerifierServicer):
    def __init__(
        self,
        loop: EngineLoop,
        model_info: pb.ModelInfo,
        speculation_defaults: SpeculationParams,
        tracer: trace.Tracer,
    ) -> None:
        self._loop = loop
        self._model_info = model_info
        self._speculation_defaults = speculation_defaults
        self._tracer = tracer

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateChunk]:
        """One chunk per engine output with tokens; the last one adds finish reason, usage, figures.
        Leaving the loop early (the client cancelled) aborts the request."""
        parent = spans.remote_context(context.invocation_metadata())
        with spans.generate_span(self._tracer, self._model_info.model_name, parent) as span:
            domain = convert.generation_request(
                request, self._speculation_defaults, spans.trace_context(span)
            )
            spans.describe_request(span, domain)
            async with await self._loop.submit(domain) as stream:
                async for output in stream:
                    if not output.finished:
                        if output.token_ids or output.prompt_logprobs is not None:
                            yield convert.generate_chunk(
                                output.token_ids,
                                logprobs=output.logprobs,
                                prompt_logprobs=output.prompt_logprobs,
                            )
                        continue
                    spans.describe_result(span, output, stream.num_output_tokens)
                    usage = pb.Usage(
                        prompt_tokens=output.num_prompt_tokens,
                        completion_tokens=stream.num_output_tokens,
                        cached_prompt_tokens=output.num_cached_tokens,
                    )
                    yield convert.generate_chunk(
                        output.token_ids,
                        output.finish_reason,
                        usage,
                        output.stats,
                        output.logprobs,
                        output.prompt_logprobs,
                    )

    async def GetModelInfo(
        self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInfo:
        return self._model_info

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.EngineStats:
        return convert.engine_stats(self._loop.snapshot())

    async def FlushCache(
        self, request: pb.FlushCacheRequest, context: grpc.aio.ServicerContext
    ) -> pb.FlushCacheReply:
        return pb.FlushCacheReply(freed_blocks=self._loop.flush_cache())

    async def StartProfile(
        self, request: pb.StartProfileRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartProfileReply:
        path = await self._loop.start_profile(request.num_steps, request.record_shapes)
        return pb.StartProfileReply(trace_path=str(path))

    async def StopProfile(
        self, request: pb.StopProfileRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopProfileReply:
        return pb.StopProfileReply(trace_path=str(await self._loop.stop_profile()))
