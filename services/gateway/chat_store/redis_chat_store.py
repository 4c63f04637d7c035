"""Stored chat completions in Redis (with `--responses-store-url`), shared by every gateway replica:
each completion one key holding its JSON (`treespec:chats:c:{id}`), expiring `ttl_s` after it was
last written; a ranking by last use drops the least recently used beyond the capacity, and a second
ranking keeps the order they were made in, which lists follow (ids whose key has expired leave it as
a list comes across them). Redis down: a 503 for a client reading or changing them; a completion
being made is answered as made, and not stored (redis_link.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treespec.gateway.chat_store.record import StoredChat
from treespec.gateway.chat_store.store import LIST_OWNER, ChatPage, ChatQuery, chat_not_found, select
from treespec.gateway.responses_api.listing import start_after
from treespec.gateway.responses_api.redis_link import LRU_FUNCTIONS, TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.redis_store import DEFAULT_TTL_S

PREFIX = "treespec:chats"
CHAT_PREFIX = f"{PREFIX}:c:"
READ_CHUNK = 100  # completions read per round trip while a list is made

# KEYS: the completion's key, the ranking by use, the counter, the ranking by making. ARGV: id, JSON,
# TTL, capacity, the completions' key prefix. Those dropped leave both rankings.
_PUT = (
    LRU_FUNCTIONS
    + """
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
use(KEYS[2], KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], 'NX', redis.call('GET', KEYS[3]), ARGV[1])
for _, old in ipairs(trim(KEYS[2], tonumber(ARGV[4]), {ARGV[5]})) do redis.call('ZREM', KEYS[4], old) end
"""
)

_GET = (
    LRU_FUNCTIONS
    + """
return looked_up(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
"""
)

# ARGV: id, the new JSON, TTL. 0 when it is not stored.
_REWRITE = (
    LRU_FUNCTIONS
    + """
if not redis.call('SET', KEYS[1], ARGV[2], 'XX', 'EX', tonumber(ARGV[3])) then return 0 end
use(KEYS[2], KEYS[3], ARGV[1])
return 1
"""
)

_DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return redis.call('DEL', KEYS[1])
"""


class RedisChatStore:
    def __init__(
        self, url: str, capacity: int, ttl_s: int = DEFAULT_TTL_S, timeout_s: float = TIMEOUT_S
    ) -> None:
        if capacity < 0:
            raise ValueError("the chat completions store's capacity cannot be negative")
        if ttl_s <= 0:
            raise ValueError("the chat completions store's TTL must be positive")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._link = RedisLink(url, "chat completions store", timeout_s)
        self._put = self._link.script(_PUT)
        self._get = self._link.script(_GET)
        self._rewrite = self._link.script(_REWRITE)
        self._delete = self._link.script(_DELETE)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    async def put(self, chat: StoredChat) -> None:
        if not self.enabled:
            return
        args: list[str | int] = [chat.id, chat.to_json(), self.ttl_s, self.capacity, CHAT_PREFIX]
        await self._link.attempt(self._put(keys=_keys(chat.id), args=args))  # else not stored

    async def get(self, chat_id: str) -> StoredChat:
        value = await self._link.call(self._get(keys=_keys(chat_id), args=[chat_id]))
        if value is None:
            raise chat_not_found(chat_id)
        return StoredChat.from_json(value)

    async def set_metadata(self, chat_id: str, metadata: Mapping[str, str]) -> StoredChat:
        updated = (await self.get(chat_id)).with_metadata(metadata)
        args: list[str | int] = [chat_id, updated.to_json(), self.ttl_s]
        if not await self._link.call(self._rewrite(keys=_keys(chat_id), args=args)):
            raise chat_not_found(chat_id)
        return updated

    async def delete(self, chat_id: str) -> None:
        if not await self._link.call(self._delete(keys=_keys(chat_id), args=[chat_id])):
            raise chat_not_found(chat_id)

    async def page(self, query: ChatQuery) -> ChatPage:
        """Read in chunks, in the order made, until the page is full and one more matches."""
        client = self._link.client
        made = _keys("")[3]
        raw: list[Any] = await self._link.call(client.zrange(made, 0, -1, desc=query.order == "desc"))
        ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw]
        ids = ids[start_after(ids, query.after, LIST_OWNER) :]
        matched: list[StoredChat] = []
        for at in range(0, len(ids), READ_CHUNK):
            chunk = ids[at : at + READ_CHUNK]
            values: list[Any] = await self._link.call(client.mget([CHAT_PREFIX + i for i in chunk]))
            gone = [chat_id for chat_id, value in zip(chunk, values, strict=True) if value is None]
            if gone:
                await self._link.attempt(client.zrem(made, *gone))
            chats = (StoredChat.from_json(value) for value in values if value is not None)
            matched += [chat for chat in chats if chat.matches(query.model, query.metadata)]
            if len(matched) > query.limit:
                break
        return select(matched, query)

    async def close(self) -> None:
        await self._link.close()


def _keys(chat_id: str) -> list[str]:
    return [f"{CHAT_PREFIX}{chat_id}", f"{PREFIX}:lru", f"{PREFIX}:clock", f"{PREFIX}:made"]
