"""OpenAI's Conversations API (`client.conversations`): create, read, update (metadata) and delete a
conversation, and add, list, read and delete its items (responses_api/conversation_store.py). A
response given `conversation` starts from its items and adds its own input and output to them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from treespec.gateway.responses_api.conversation_store import Conversation, item_not_found
from treespec.gateway.responses_api.listing import MAX_PAGE, page
from treespec.gateway.responses_api.request import InputItem
from treespec.gateway.responses_api.store import listed_item
from treespec.gateway.schema_types import STRICT, Metadata
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()

MAX_ITEMS_ADDED = 20  # per call, as OpenAI takes them
Include = Annotated[list[str] | None, Query()]  # accepted: no item has more to include here


class NewConversation(BaseModel):
    model_config = STRICT
    items: list[InputItem] | None = Field(default=None, max_length=MAX_ITEMS_ADDED)
    metadata: Metadata | None = None


class ConversationUpdate(BaseModel):
    model_config = STRICT
    metadata: Metadata


class NewItems(BaseModel):
    model_config = STRICT
    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_ADDED)


State = Annotated[GatewayState, Depends(gateway_state)]


@router.post("/v1/conversations")
async def create_conversation(body: NewConversation, state: State) -> dict[str, Any]:
    conversation = Conversation.new(body.metadata, [listed_item(item) for item in body.items or []])
    await state.conversations.create(conversation)
    return conversation.body()


@router.get("/v1/conversations/{conversation_id}")
async def retrieve_conversation(conversation_id: str, state: State) -> dict[str, Any]:
    return (await state.conversations.get(conversation_id)).body()


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(conversation_id: str, body: ConversationUpdate, state: State) -> dict[str, Any]:
    return (await state.conversations.set_metadata(conversation_id, body.metadata)).body()


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, state: State) -> dict[str, Any]:
    await state.conversations.delete(conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(
    conversation_id: str, body: NewItems, state: State, include: Include = None
) -> dict[str, Any]:
    items = [listed_item(item) for item in body.items]
    await state.conversations.append(conversation_id, items)
    return page(items, f"Conversation '{conversation_id}'", len(items), "asc", None)


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(
    conversation_id: str,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
    after: Annotated[str | None, Query(min_length=1)] = None,
    include: Include = None,
) -> dict[str, Any]:
    """Its items (newest first by default), `limit` of them after the item `after`."""
    items = (await state.conversations.get(conversation_id)).items
    return page(items, f"Conversation '{conversation_id}'", limit, order, after)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def retrieve_item(
    conversation_id: str, item_id: str, state: State, include: Include = None
) -> dict[str, Any]:
    for item in (await state.conversations.get(conversation_id)).items:
        if item.get("id") == item_id:
            return item
    raise item_not_found(conversation_id, item_id)


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(conversation_id: str, item_id: str, state: State) -> dict[str, Any]:
    """The conversation, as OpenAI answers."""
    await state.conversations.delete_item(conversation_id, item_id)
    return (await state.conversations.get(conversation_id)).body()
