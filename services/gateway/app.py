"""The gateway's FastAPI application, built by `create_app` (everything it needs on `app.state`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from prometheus_client import CollectorRegistry

from treespec.gateway.batch_api.book import BatchBook, LocalBook
from treespec.gateway.batch_api.files import FileStore, MemoryFileStore
from treespec.gateway.batch_api.jobs import BatchJobs
from treespec.gateway.batch_api.redis_batches import RedisBatchBook
from treespec.gateway.batch_api.redis_files import RedisFileStore
from treespec.gateway.chat_store.redis_chat_store import RedisChatStore
from treespec.gateway.chat_store.store import ChatStore, MemoryChatStore
from treespec.gateway.config import GatewayConfig
from treespec.gateway.errors import APIError, install_error_handlers
from treespec.gateway.guards import RequestGuard
from treespec.gateway.metrics import GatewayMetrics, RequestCounter
from treespec.gateway.request_ids import RequestIdHeader
from treespec.gateway.request_log import RequestLog
from treespec.gateway.responses_api.background import BackgroundResponses
from treespec.gateway.responses_api.conversation_store import ConversationStore, MemoryConversationStore
from treespec.gateway.responses_api.redis_conversations import RedisConversationStore
from treespec.gateway.responses_api.redis_events import RedisEventStreams
from treespec.gateway.responses_api.redis_store import RedisResponseStore
from treespec.gateway.responses_api.store import MemoryResponseStore, ResponseStore
from treespec.gateway.routes import routers
from treespec.gateway.state import GatewayState
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.gateway.verifier_client import VerifierClient

log = logging.getLogger(__name__)

TRACER_NAME = "treespec.gateway"
WARM_UP_MAX_DELAY_S = 5.0
MULTIPART_ALLOWANCE = 64 << 10  # an upload's form around its file: boundaries, headers, the purpose


def create_app(
    config: GatewayConfig,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The application; the verifier channel opens when it starts (in the server's event loop).

    `tracer_provider` defaults to the process's; `registry` (default: a fresh one) holds the
    metrics that /metrics exposes.
    """
    provider = tracer_provider or trace.get_tracer_provider()
    metrics = GatewayMetrics(registry if registry is not None else CollectorRegistry(), config.model_name)
    tokenizer = PromptTokenizer(config.model_path, config.chat_template)
    responses = response_store(config)
    conversations = conversation_store(config)
    background = BackgroundResponses(shared=event_streams(config))
    batches = BatchJobs(file_store(config), batch_book(config))
    chats = chat_store(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        verifier = VerifierClient(
            config.verifier_addresses,
            tracer_provider=provider,
            timeout_s=config.verifier_timeout_s,
            attempts=config.model_info_attempts,
        )
        tracer = provider.get_tracer(TRACER_NAME)
        app.state.gateway = GatewayState(
            config,
            tokenizer,
            verifier,
            metrics,
            tracer,
            responses,
            background,
            conversations,
            batches,
            chats,
            request_log=RequestLog(config.logs.max_log_len) if config.logs.log_requests else None,
        )
        warm_up = asyncio.create_task(_warm_up(verifier))
        # Other replicas' orders about the background responses this one makes (a shared store).
        orders = asyncio.create_task(background.follow(responses.orders())) if responses.shared else None
        # ... and about the batches this one runs.
        batch_orders = asyncio.create_task(batches.follow()) if batches.book.shared else None
        try:
            yield
        finally:
            await _stop(warm_up, orders, batch_orders)
            await batches.close()
            await background.close()
            await responses.close()
            await conversations.close()
            await chats.close()
            await verifier.close()

    app = FastAPI(
        title="treespec gateway",
        summary="OpenAI-compatible API over the treespec verifier",
        lifespan=lifespan,
        strict_content_type=False,  # no Content-Type is read as JSON; a wrong one is refused (guards)
    )
    install_error_handlers(app)
    for name, router in routers():
        # The limit per route, not per app: the app-wide one answers a too-large Content-Length in
        # plain text, where RequestGuard answers it in OpenAI's JSON before any route runs.
        app.include_router(
            router, max_body_size=upload_limit(config) if name == "files" else config.max_body_bytes
        )
    app.add_middleware(
        RequestGuard,
        api_keys=config.api_keys,
        max_body_bytes=config.max_body_bytes,
        max_upload_bytes=upload_limit(config),
    )
    app.add_middleware(RequestCounter, metrics=metrics)
    if config.logs.request_id_headers:
        app.add_middleware(RequestIdHeader)
    config.cors.install(app)  # outermost: preflights answered before the API key is asked for
    # One server span per request: no span per ASGI message (a stream would get one per token).
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls="/health,/metrics", exclude_spans=["receive", "send"]
    )
    return app


async def _stop(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the gateway's own tasks and wait for them to end."""
    for task in tasks:
        if task is not None:
            task.cancel()
    for task in tasks:
        if task is not None:
            with suppress(asyncio.CancelledError):
                await task


async def _warm_up(verifier: VerifierClient) -> None:
    """Ask for the model's figures until the verifier answers (requests would ask anyway)."""
    delay = 0.5
    while True:
        try:
            info = await verifier.model_info()
        except APIError as exc:
            log.info("verifier not ready yet (%s); asking again in %.1fs", exc.message, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, WARM_UP_MAX_DELAY_S)
            continue
        log.info("verifier serves %s (context %d tokens)", info.model_name, info.context_length)
        return


def upload_limit(config: GatewayConfig) -> int:
    """The largest body POST /v1/files takes: a file as large as the files' bound, and its form."""
    return config.files_max_bytes + MULTIPART_ALLOWANCE


def response_store(config: GatewayConfig) -> ResponseStore:
    """Where Responses API responses are kept: Redis with a URL, else the gateway's memory."""
    if config.responses_store_url is not None:
        return RedisResponseStore(
            config.responses_store_url, config.responses_store_size, config.responses_store_ttl_s
        )
    return MemoryResponseStore(config.responses_store_size)


def event_streams(config: GatewayConfig) -> RedisEventStreams | None:
    """Where streamed background responses' events go for the other replicas: beside the responses."""
    if config.responses_store_url is None:
        return None
    return RedisEventStreams(config.responses_store_url, config.responses_store_ttl_s)


def conversation_store(config: GatewayConfig) -> ConversationStore:
    """Where conversations are kept: beside the responses."""
    size, url = config.responses_store_size, config.responses_store_url
    if url is not None:
        return RedisConversationStore(url, size, config.responses_store_ttl_s)
    return MemoryConversationStore(size)


def file_store(config: GatewayConfig) -> FileStore:
    """Where the Files API's files are kept: beside the responses."""
    if config.responses_store_url is not None:
        return RedisFileStore(config.responses_store_url, config.files_max_bytes)
    return MemoryFileStore(config.files_max_bytes)


def batch_book(config: GatewayConfig) -> BatchBook:
    """Where batches are told to the other replicas: beside the responses (none in memory)."""
    if config.responses_store_url is not None:
        return RedisBatchBook(config.responses_store_url, config.responses_store_ttl_s)
    return LocalBook()


def chat_store(config: GatewayConfig) -> ChatStore:
    """Where stored chat completions are kept: beside the responses."""
    size, url = config.responses_store_size, config.responses_store_url
    if url is not None:
        return RedisChatStore(url, size, config.responses_store_ttl_s)
    return MemoryChatStore(size)
