"""Conversations (OpenAI's Conversations API, routes/conversations.py): a list of items, each with its
id, that a response given `conversation` starts from and then adds its input and output to.

They are kept like the stored responses and under the same bound (`--responses-store-size`, the
least recently used going first): in the gateway's memory (`MemoryConversationStore`), or in Redis
with `--responses-store-url` (responses_api/redis_conversations.py), shared by every replica.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import TypeAdapter

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.lru_map import LruMap
from treespec.gateway.responses_api.request import InputItem

_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


@dataclass(frozen=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    items: tuple[dict[str, Any], ...] = ()  # as listed: each with its id, in order

    @classmethod
    def new(
        cls, metadata: dict[str, str] | None = None, items: Sequence[dict[str, Any]] = ()
    ) -> Conversation:
        return cls(f"conv_{uuid.uuid4().hex}", int(time.time()), dict(metadata or {}), tuple(items))

    def body(self) -> dict[str, Any]:
        """The conversation object (its items are listed apart)."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }

    def as_input(self) -> list[InputItem]:
        """Its items as a response's earlier input."""
        return _ITEMS.validate_python(list(self.items))

    def meta_json(self) -> str:
        return json.dumps({"id": self.id, "created_at": self.created_at, "metadata": self.metadata})

    @classmethod
    def from_json(cls, meta: str | bytes, items: Sequence[str | bytes]) -> Conversation:
        fields = json.loads(meta)
        return cls(
            fields["id"], fields["created_at"], fields["metadata"], tuple(json.loads(i) for i in items)
        )


class ConversationStore(Protocol):
    """The conversations, by id; a 404 for an id (or an item id) not kept."""

    async def create(self, conversation: Conversation) -> None: ...

    async def get(self, conversation_id: str, param: str | None = None) -> Conversation: ...

    async def set_metadata(self, conversation_id: str, metadata: dict[str, str]) -> Conversation: ...

    async def append(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None: ...

    async def delete_item(self, conversation_id: str, item_id: str) -> None: ...

    async def delete(self, conversation_id: str) -> None: ...

    async def close(self) -> None: ...


class MemoryConversationStore:
    """In the gateway's memory: at most `capacity` (0: none is kept, and creating one is a 400)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._conversations: LruMap[Conversation] = LruMap(capacity)

    async def create(self, conversation: Conversation) -> None:
        check_capacity(self.capacity)
        self._keep(conversation)

    async def get(self, conversation_id: str, param: str | None = None) -> Conversation:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            raise conversation_not_found(conversation_id, param)
        return conversation

    async def set_metadata(self, conversation_id: str, metadata: dict[str, str]) -> Conversation:
        updated = replace(await self.get(conversation_id), metadata=dict(metadata))
        self._keep(updated)
        return updated

    async def append(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        conversation = await self.get(conversation_id)
        self._keep(replace(conversation, items=(*conversation.items, *items)))

    async def delete_item(self, conversation_id: str, item_id: str) -> None:
        conversation = await self.get(conversation_id)
        kept = tuple(item for item in conversation.items if item.get("id") != item_id)
        if len(kept) == len(conversation.items):
            raise item_not_found(conversation_id, item_id)
        self._keep(replace(conversation, items=kept))

    async def delete(self, conversation_id: str) -> None:
        await self.get(conversation_id)
        self._conversations.pop(conversation_id)

    async def close(self) -> None:
        pass

    def _keep(self, conversation: Conversation) -> None:
        self._conversations.put(conversation.id, conversation)


def check_capacity(capacity: int) -> None:
    if capacity < 1:
        raise APIError(
            400,
            "This server keeps no conversations (--responses-store-size is 0).",
            code="invalid_value",
        )


def conversation_not_found(conversation_id: str, param: str | None = None) -> APIError:
    return APIError(
        404, f"Conversation with id '{conversation_id}' not found.", code="not_found", param=param
    )


def item_not_found(conversation_id: str, item_id: str) -> APIError:
    return APIError(
        404, f"Item with id '{item_id}' not found in conversation '{conversation_id}'.", code="not_found"
    )
