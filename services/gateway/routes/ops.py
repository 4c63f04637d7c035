"""GET /health (200 while a verifier answers, else 503), GET /metrics (Prometheus text) and GET /version
(vLLM's: the server's version), all open without an API key."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from treespec.gateway.state import GatewayState, gateway_state
from treespec.gateway.verifier_client import verifier_unavailable

router = APIRouter()


@router.get("/health", response_model=None)
async def health(state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    if await state.verifier.healthy():
        return JSONResponse({"status": "ok"})
    return verifier_unavailable("no verifier answers its health check").response()


@router.get("/metrics")
async def metrics(state: Annotated[GatewayState, Depends(gateway_state)]) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/version")
async def version() -> JSONResponse:
    return JSONResponse({"version": package_version("treespec")})
