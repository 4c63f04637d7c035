"""OpenAI's Batch API (batch_api/jobs.py): POST /v1/batches, GET /v1/batches (newest first; `limit`,
`after`), GET /v1/batches/{id} and POST /v1/batches/{id}/cancel."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from treespec.gateway.batch_api.expiry import ExpiresAfter
from treespec.gateway.batch_api.jobs import ClientFactory
from treespec.gateway.responses_api.listing import MAX_PAGE, page
from treespec.gateway.schema_types import STRICT, Metadata
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()
State = Annotated[GatewayState, Depends(gateway_state)]


class BatchCreate(BaseModel):
    model_config = STRICT
    input_file_id: str = Field(min_length=1, max_length=256)
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/responses"]
    completion_window: Literal["24h"] = "24h"  # COMPLETION_WINDOW
    metadata: Metadata | None = None
    output_expires_after: ExpiresAfter | None = None  # the output and error files' (expiry.py)


@router.post("/v1/batches")
async def create_batch(body: BatchCreate, request: Request, state: State) -> dict[str, Any]:
    expires_s = body.output_expires_after.seconds if body.output_expires_after is not None else None
    client = _own_client(request)
    job = await state.batches.create(body.input_file_id, body.endpoint, body.metadata, client, expires_s)
    return job.body()


@router.get("/v1/batches")
async def list_batches(
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    after: Annotated[str | None, Query(min_length=1)] = None,
) -> dict[str, Any]:
    return page(await state.batches.listed(), "The batch list", limit, "desc", after)


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, state: State) -> dict[str, Any]:
    return await state.batches.get(batch_id)


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, state: State) -> dict[str, Any]:
    return await state.batches.cancel(batch_id)


def _own_client(request: Request) -> ClientFactory:
    """Clients that send a batch's requests to this gateway's own routes, in process, with the batch
    creator's credentials (the API key, when the server has keys)."""
    app = request.app
    authorization = request.headers.get("authorization")
    headers = {"authorization": authorization} if authorization else {}

    def client() -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        return httpx.AsyncClient(
            transport=transport, base_url="http://gateway", headers=headers, timeout=None
        )

    return client
