"""Operations endpoints, open without an API key: GET /health (200 while a verifier answers, else
503; also vLLM's GET or POST /ping), SGLang's GET /health_generate (200 once a verifier has generated
a token, else 503), GET /metrics (Prometheus text), vLLM's GET /version (the server's version), and
vLLM's GET /load (the requests the verifier runs or queues)."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing
from importlib.metadata import version as package_version
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from treespec.gateway.errors import APIError
from treespec.gateway.state import GatewayState, gateway_state
from treespec.gateway.verifier_client import verifier_unavailable
from treespec.v1 import verifier_pb2

router = APIRouter()

HEALTH_GENERATE_TIMEOUT_S = 20.0  # a token through a busy verifier's queue, at most


@router.get("/health", response_model=None)
@router.get("/ping", response_model=None)
@router.post("/ping", response_model=None)
async def health(state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    if await state.verifier.healthy():
        return JSONResponse({"status": "ok"})
    return verifier_unavailable("no verifier answers its health check").response()


@router.get("/health_generate", response_model=None)
async def health_generate(state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    """SGLang's deeper check: one token generated end to end (tokenizer, verifier, model)."""
    request = verifier_pb2.GenerateRequest(
        request_id=f"health-{uuid.uuid4().hex}",
        prompt_token_ids=state.tokenizer.text_prompt("Hello"),
        sampling=verifier_pb2.SamplingParams(max_new_tokens=1, temperature=0.0),
        speculation=verifier_pb2.SpeculationParams(enabled=False),
    )
    try:
        await asyncio.wait_for(_one_token(state, request), HEALTH_GENERATE_TIMEOUT_S)
    except (APIError, TimeoutError) as exc:
        return verifier_unavailable(f"the health check generated nothing: {exc!r}").response()
    return JSONResponse({"status": "ok"})


async def _one_token(state: GatewayState, request: verifier_pb2.GenerateRequest) -> None:
    async with aclosing(state.verifier.generate(request)) as chunks:
        async for chunk in chunks:
            if chunk.token_ids:
                return
    raise verifier_unavailable("the health check's generation ended without a token")


@router.get("/load")
async def load(state: Annotated[GatewayState, Depends(gateway_state)]) -> JSONResponse:
    """vLLM's: the requests in flight (here: those the verifier the call reaches runs or queues)."""
    stats = await state.verifier.stats()
    return JSONResponse({"server_load": stats.running_requests + stats.waiting_requests})


@router.get("/metrics")
async def metrics(state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    """Prometheus text: treespec's metrics, and vLLM's and SGLang's names with the engine's state."""
    try:
        engine: verifier_pb2.EngineStats | None = await state.verifier.stats()
    except APIError:
        engine = None  # the request and token counts still come
    return Response(state.metrics.render(engine), media_type=CONTENT_TYPE_LATEST)


@router.get("/version")
async def version() -> JSONResponse:
    return JSONResponse({"version": package_version("treespec")})
