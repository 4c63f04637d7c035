"""The stored Responses API responses (responses_api/store.py): GET /v1/responses/{id} (with
`stream=true`, a streamed background response's events, responses_api/event_log.py),
GET /v1/responses/{id}/input_items (paged as OpenAI pages lists), DELETE /v1/responses/{id}, and
POST /v1/responses/{id}/cancel for one being made in the background (responses_api/background.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.background import KEPT_EVENT_LOGS
from treespec.gateway.responses_api.job import sse_events
from treespec.gateway.responses_api.listing import MAX_PAGE, page
from treespec.gateway.responses_api.store import ResponseStore, StoreOrder
from treespec.gateway.routes.responses_api import UNFINISHED
from treespec.gateway.sse import event_stream
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()

ELSEWHERE_S = 5.0  # how long a cancel waits for the replica making the response
POLL_S = 0.1


@router.get("/v1/responses/{response_id}", response_model=None)
async def retrieve_response(
    response_id: str,
    state: Annotated[GatewayState, Depends(gateway_state)],
    stream: Annotated[bool, Query()] = False,
    starting_after: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any] | Response:
    """The stored response; with `stream`, the events of one made in the background with `stream`,
    those after sequence number `starting_after` (all without it), then each as it is made."""
    body = (await state.responses.get(response_id)).body
    if not stream:
        return body
    events = await state.background.events(response_id, -1 if starting_after is None else starting_after)
    if events is None:
        kept = (
            "as long as the response"
            if state.responses.shared
            else f"the last {KEPT_EVENT_LOGS} finished ones"
        )
        raise APIError(
            400,
            f"Response '{response_id}' cannot be streamed: only a response made with background and "
            f"stream both true can, while the server keeps its events ({kept}, and those being made). "
            "Retrieve it without stream.",
            code="invalid_value",
            param="stream",
        )
    return event_stream(sse_events(events))


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    response_id: str, state: Annotated[GatewayState, Depends(gateway_state)]
) -> dict[str, Any]:
    """A background response still being made stops first (it would be stored again as it ends),
    whichever replica makes it."""
    await state.background.forget(response_id)
    if state.responses.shared and (await state.responses.get(response_id)).body["status"] in UNFINISHED:
        await state.responses.order(StoreOrder("forget", response_id))
    await state.responses.delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(
    response_id: str, state: Annotated[GatewayState, Depends(gateway_state)]
) -> dict[str, Any]:
    """A background response still being made stops, and is stored as cancelled; one cancelled
    already is answered as it is. With a shared store, another replica may be making it."""
    cancelled = await state.background.cancel(response_id)
    if cancelled is not None:
        return cancelled
    body = (await state.responses.get(response_id)).body
    if body["background"] and body["status"] in UNFINISHED and state.responses.shared:
        body = await _cancel_elsewhere(state.responses, response_id)
    if body["status"] == "cancelled":
        return body
    if not body["background"]:
        raise APIError(400, "Cannot cancel a synchronous response.", code="invalid_value")
    raise APIError(400, f"Cannot cancel a response that is {body['status']}.", code="invalid_value")


async def _cancel_elsewhere(store: ResponseStore, response_id: str) -> dict[str, Any]:
    """Order the replica making the response to cancel it, and wait until it is stored as it ended.
    If none does in time (that replica is gone), it is stored as cancelled here."""
    await store.order(StoreOrder("cancel", response_id))
    deadline = time.monotonic() + ELSEWHERE_S
    stored = await store.get(response_id)
    while stored.body["status"] in UNFINISHED and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
        stored = await store.get(response_id)
    if stored.body["status"] not in UNFINISHED:
        return stored.body
    cancelled = replace(stored, body={**stored.body, "status": "cancelled"})
    await store.put(cancelled)
    return cancelled.body


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    state: Annotated[GatewayState, Depends(gateway_state)],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
    after: Annotated[str | None, Query(min_length=1)] = None,
) -> dict[str, Any]:
    """The response's own input items (newest first by default), `limit` of them after the item
    `after`."""
    items = (await state.responses.get(response_id)).input_items
    return page(items, f"Response '{response_id}'", limit, order, after)
