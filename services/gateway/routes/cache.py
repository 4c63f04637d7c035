"""SGLang's /flush_cache (GET or POST) and vLLM's POST /reset_prefix_cache: the verifier forgets its
cached prompt prefixes (a benchmark's cold start, or after changing what the cache should hold). A
400 while the verifier runs or queues requests, as SGLang answers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()


@router.api_route("/flush_cache", methods=["GET", "POST"])
@router.post("/reset_prefix_cache")
async def flush_cache(state: Annotated[GatewayState, Depends(gateway_state)]) -> JSONResponse:
    freed = await state.verifier.flush_cache()
    return JSONResponse({"status": "ok", "freed_blocks": freed})
