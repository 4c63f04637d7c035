"""Stored chat completions (a chat completion made with `store: true`, chat_store/record.py): what
GET /v1/chat/completions lists and GET, POST (metadata) and DELETE /v1/chat/completions/{id} read,
update and remove (routes/stored_chat.py).

They are kept like the stored responses and under the same bound (`--responses-store-size`, the
least recently used going first): in the gateway's memory (`MemoryChatStore`), or in Redis with
`--responses-store-url` (chat_store/redis_chat_store.py), shared by every replica. A list shows them
in the order they were made.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from treespec.gateway.chat_store.record import StoredChat
from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.listing import start_after
from treespec.gateway.responses_api.lru_map import LruMap

LIST_OWNER = "The stored chat completions"  # as a 400 about a list's `after` names them


@dataclass(frozen=True)
class ChatQuery:
    """A page of the list: `limit` completions made after the one `after` (in `order`; asc: oldest
    first), of `model` (None: any) and holding every pair of `metadata`."""

    limit: int = 20
    order: Literal["asc", "desc"] = "asc"
    after: str | None = None
    model: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatPage:
    chats: list[StoredChat]
    has_more: bool


class ChatStore(Protocol):
    """The stored chat completions, by id; `get`, `set_metadata` and `delete` raise a 404 for an id
    not stored, `page` a 400 for an `after` that is not."""

    @property
    def enabled(self) -> bool: ...

    async def put(self, chat: StoredChat) -> None: ...

    async def get(self, chat_id: str) -> StoredChat: ...

    async def set_metadata(self, chat_id: str, metadata: Mapping[str, str]) -> StoredChat: ...

    async def delete(self, chat_id: str) -> None: ...

    async def page(self, query: ChatQuery) -> ChatPage: ...

    async def close(self) -> None: ...


class MemoryChatStore:
    """In the gateway's memory: at most `capacity` (0: none is stored)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("the chat completions store's capacity cannot be negative")
        self.capacity = capacity
        self._chats: LruMap[tuple[int, StoredChat]] = LruMap(capacity)  # (when it was stored, it)
        self._clock = itertools.count()

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    async def put(self, chat: StoredChat) -> None:
        if self.enabled:
            self._chats.put(chat.id, (next(self._clock), chat))

    async def get(self, chat_id: str) -> StoredChat:
        entry = self._chats.get(chat_id)
        if entry is None:
            raise chat_not_found(chat_id)
        return entry[1]

    async def set_metadata(self, chat_id: str, metadata: Mapping[str, str]) -> StoredChat:
        entry = self._chats.get(chat_id)
        if entry is None:
            raise chat_not_found(chat_id)
        updated = entry[1].with_metadata(metadata)
        self._chats.put(chat_id, (entry[0], updated))
        return updated

    async def delete(self, chat_id: str) -> None:
        if self._chats.pop(chat_id) is None:
            raise chat_not_found(chat_id)

    async def page(self, query: ChatQuery) -> ChatPage:
        ordered = [chat for _, chat in sorted(self._chats.values(), key=lambda entry: entry[0])]
        if query.order == "desc":
            ordered.reverse()
        start = start_after([chat.id for chat in ordered], query.after, LIST_OWNER)
        return select(ordered[start:], query)

    async def close(self) -> None:
        pass


def select(chats: Iterable[StoredChat], query: ChatQuery) -> ChatPage:
    """The first `limit` of the ordered `chats` that the query's filters let through."""
    chosen: list[StoredChat] = []
    for chat in chats:
        if not chat.matches(query.model, query.metadata):
            continue
        if len(chosen) == query.limit:
            return ChatPage(chosen, True)
        chosen.append(chat)
    return ChatPage(chosen, False)


def chat_not_found(chat_id: str) -> APIError:
    return APIError(404, f"Chat completion with id '{chat_id}' not found.", code="not_found")
