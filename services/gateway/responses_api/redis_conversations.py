"""Conversations in Redis (with `--responses-store-url`), shared by every gateway replica: a key with
each conversation's id, creation time and metadata (`treespec:conversations:m:{id}`), and a list of its
items, each an item's JSON (`...:i:{id}`), so that adding items is one atomic push whichever replica
adds them. Both expire `ttl_s` after the conversation was last written; a ranking by last use drops
the least recently used beyond the capacity. Each operation is one Lua script, but for deleting an
item (its exact JSON is read first, then removed). Redis down: a 503 (redis_link.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from treespec.gateway.responses_api.conversation_store import (
    Conversation,
    check_capacity,
    conversation_not_found,
    item_not_found,
)
from treespec.gateway.responses_api.redis_link import LRU_FUNCTIONS, TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.redis_store import DEFAULT_TTL_S

PREFIX = "treespec:conversations"

# KEYS: meta, items, ranking, counter. ARGV: id, meta JSON, TTL, capacity, meta prefix, items
# prefix, then the items' JSON.
_CREATE = (
    LRU_FUNCTIONS
    + """
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[2], 'EX', ttl)
redis.call('DEL', KEYS[2])
for i = 7, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
if #ARGV >= 7 then redis.call('EXPIRE', KEYS[2], ttl) end
use(KEYS[3], KEYS[4], ARGV[1])
return trim(KEYS[3], tonumber(ARGV[4]), {ARGV[5], ARGV[6]})
"""
)

# ARGV: id. Its meta and items, its use recorded; false when it is not kept.
_GET = (
    LRU_FUNCTIONS
    + """
local meta = looked_up(KEYS[1], KEYS[3], KEYS[4], ARGV[1])
if not meta then return false end
return {meta, redis.call('LRANGE', KEYS[2], 0, -1)}
"""
)

# ARGV: id, TTL, new meta JSON or '' (keep), then items' JSON to add. 0 when it is not kept.
_WRITE = (
    LRU_FUNCTIONS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[2])
if ARGV[3] ~= '' then redis.call('SET', KEYS[1], ARGV[3]) end
for i = 4, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
use(KEYS[3], KEYS[4], ARGV[1])
return 1
"""
)

_DELETE = """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[2])
return redis.call('DEL', KEYS[1])
"""


class RedisConversationStore:
    def __init__(
        self, url: str, capacity: int, ttl_s: int = DEFAULT_TTL_S, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._link = RedisLink(url, "conversations store", timeout_s)
        self._create = self._link.script(_CREATE)
        self._get = self._link.script(_GET)
        self._write = self._link.script(_WRITE)
        self._delete = self._link.script(_DELETE)

    async def create(self, conversation: Conversation) -> None:
        check_capacity(self.capacity)
        prefixes = [f"{PREFIX}:m:", f"{PREFIX}:i:"]
        args: list[str | int] = [
            conversation.id,
            conversation.meta_json(),
            self.ttl_s,
            self.capacity,
            *prefixes,
        ]
        args += [json.dumps(item) for item in conversation.items]
        await self._link.call(self._create(keys=_keys(conversation.id), args=args))

    async def get(self, conversation_id: str, param: str | None = None) -> Conversation:
        found = await self._link.call(self._get(keys=_keys(conversation_id), args=[conversation_id]))
        if not found:
            raise conversation_not_found(conversation_id, param)
        meta, items = found
        return Conversation.from_json(meta, items)

    async def set_metadata(self, conversation_id: str, metadata: dict[str, str]) -> Conversation:
        conversation = await self.get(conversation_id)
        updated = Conversation(conversation.id, conversation.created_at, dict(metadata), conversation.items)
        await self._written(conversation_id, updated.meta_json(), ())
        return updated

    async def append(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None:
        await self._written(conversation_id, "", [json.dumps(item) for item in items])

    async def delete_item(self, conversation_id: str, item_id: str) -> None:
        items_key = _keys(conversation_id)[1]
        await self.get(conversation_id)  # a 404 for the conversation itself first
        for raw in await self._link.call(self._link.client.lrange(items_key, 0, -1)):
            if json.loads(raw).get("id") == item_id and await self._link.call(
                self._link.client.lrem(items_key, 1, raw.decode() if isinstance(raw, bytes) else raw)
            ):
                return
        raise item_not_found(conversation_id, item_id)

    async def delete(self, conversation_id: str) -> None:
        if not await self._link.call(self._delete(keys=_keys(conversation_id), args=[conversation_id])):
            raise conversation_not_found(conversation_id)

    async def close(self) -> None:
        await self._link.close()

    async def _written(self, conversation_id: str, meta: str, items: Sequence[str]) -> None:
        args: list[str | int] = [conversation_id, self.ttl_s, meta, *items]
        if not await self._link.call(self._write(keys=_keys(conversation_id), args=args)):
            raise conversation_not_found(conversation_id)


def _keys(conversation_id: str) -> list[str]:
    return [
        f"{PREFIX}:m:{conversation_id}",
        f"{PREFIX}:i:{conversation_id}",
        f"{PREFIX}:lru",
        f"{PREFIX}:clock",
    ]
