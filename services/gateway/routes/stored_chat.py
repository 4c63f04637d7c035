"""OpenAI's stored chat completions (`client.chat.completions.list/retrieve/update/delete` and
`.messages.list`): a chat completion made with `store: true` (chat_store/) is listed by
GET /v1/chat/completions (filtered by `model` and `metadata[key]=value`), read by
GET /v1/chat/completions/{id}, its metadata replaced by POST, removed by DELETE, and its request's
messages listed by GET /v1/chat/completions/{id}/messages; lists page as OpenAI pages them."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from treespec.gateway.chat_store.store import ChatQuery
from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.listing import MAX_PAGE, list_object, page
from treespec.gateway.schema_types import STRICT, Metadata
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()

State = Annotated[GatewayState, Depends(gateway_state)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
Order = Annotated[Literal["asc", "desc"], Query()]
After = Annotated[str | None, Query(min_length=1)]
_METADATA_PARAM = re.compile(r"metadata\[(.+)\]")  # how the SDK writes a metadata pair in a query


class ChatUpdate(BaseModel):
    model_config = STRICT
    metadata: Metadata | None  # null: none


@router.get("/v1/chat/completions")
async def list_chats(
    request: Request,
    state: State,
    limit: Limit = 20,
    order: Order = "asc",
    after: After = None,
    model: Annotated[str | None, Query(min_length=1)] = None,
) -> dict[str, Any]:
    """The stored completions in the order they were made (asc: oldest first)."""
    query = ChatQuery(limit, order, after, model, _metadata_filter(request))
    chosen = await state.chats.page(query)
    return list_object([chat.body for chat in chosen.chats], chosen.has_more)


@router.get("/v1/chat/completions/{completion_id}")
async def retrieve_chat(completion_id: str, state: State) -> dict[str, Any]:
    return (await state.chats.get(completion_id)).body


@router.post("/v1/chat/completions/{completion_id}")
async def update_chat(completion_id: str, body: ChatUpdate, state: State) -> dict[str, Any]:
    """Only the metadata of a stored completion can change: it is replaced."""
    return (await state.chats.set_metadata(completion_id, body.metadata or {})).body


@router.delete("/v1/chat/completions/{completion_id}")
async def delete_chat(completion_id: str, state: State) -> dict[str, Any]:
    await state.chats.delete(completion_id)
    return {"object": "chat.completion.deleted", "id": completion_id, "deleted": True}


@router.get("/v1/chat/completions/{completion_id}/messages")
async def list_chat_messages(
    completion_id: str, state: State, limit: Limit = 20, order: Order = "asc", after: After = None
) -> dict[str, Any]:
    """The messages the completion was asked with (asc: in the conversation's order)."""
    messages = (await state.chats.get(completion_id)).messages
    return page(messages, f"Chat completion '{completion_id}'", limit, order, after)


def _metadata_filter(request: Request) -> dict[str, str]:
    """The `metadata[key]=value` pairs of the query, each of which a listed completion must hold."""
    pairs: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        found = _METADATA_PARAM.fullmatch(name)
        if found is not None:
            pairs[found.group(1)] = value
        elif name == "metadata":
            raise APIError(
                400,
                "Give metadata filters as metadata[key]=value.",
                code="invalid_value",
                param="metadata",
            )
    return pairs
