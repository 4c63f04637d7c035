"""The Files API's files in Redis, beside the stored responses (`--responses-store-url`): every gateway
replica reads, lists and deletes every file, so a batch's input may be uploaded to one replica and its
batch created on another, and its output read on any; a gateway restart loses none.

A file is two keys, its description's JSON (`treespec:files:m:{id}`) and its bytes
(`treespec:files:c:{id}`); beside them the upload order (a sorted set on a counter of the store's
own), each file's size (a hash: the bound, `--files-max-bytes`, holds over all replicas' files) and
the expiry times (a sorted set). Each operation is one Lua script, one round trip and atomic among
replicas; each first drops the files whose time has come, and a file whose keys are gone (a Redis
that evicts) leaves the order and the bound on the next listing. Redis down or slow: a 503 naming
the store, until it answers again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from treespec.gateway.batch_api.files import FileStore, StoredFile
from treespec.gateway.responses_api.redis_link import TIMEOUT_S, RedisLink

PREFIX = "treespec:files"
KEYS = [f"{PREFIX}:order", f"{PREFIX}:sizes", f"{PREFIX}:expiry", f"{PREFIX}:clock"]
META_PREFIX = f"{PREFIX}:m:"
CONTENT_PREFIX = f"{PREFIX}:c:"

# KEYS: the order, the sizes, the expiry times, the counter; ARGV[1]: now, ARGV[2], ARGV[3]: the
# description's and the bytes' key prefixes.
_COMMON = """
local function drop(id)
  redis.call('DEL', ARGV[2] .. id, ARGV[3] .. id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])) do drop(id) end
"""

# ARGV[4..]: id, description, bytes, size, bound, expiry time ('' for none). {1, held} or {0, held}.
_ADD = (
    _COMMON
    + """
local held = 0
for _, size in ipairs(redis.call('HVALS', KEYS[2])) do held = held + tonumber(size) end
local size = tonumber(ARGV[7])
if held + size > tonumber(ARGV[8]) then return {0, held} end
local id = ARGV[4]
redis.call('SET', ARGV[2] .. id, ARGV[5])
redis.call('SET', ARGV[3] .. id, ARGV[6])
redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[4]), id)
redis.call('HSET', KEYS[2], id, size)
if ARGV[9] ~= '' then redis.call('ZADD', KEYS[3], tonumber(ARGV[9]), id) end
return {1, held}
"""
)

# ARGV[4]: id, ARGV[5]: the prefix of the key to read. Its value, or nil.
_READ = (
    _COMMON
    + """
return redis.call('GET', ARGV[5] .. ARGV[4])
"""
)

# ARGV[4]: id. 1 if it was there.
_REMOVE = (
    _COMMON
    + """
local there = redis.call('EXISTS', ARGV[2] .. ARGV[4])
drop(ARGV[4])
return there
"""
)

# Every description, in upload order; files whose description is gone leave the order.
_LIST = (
    _COMMON
    + """
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local meta = redis.call('GET', ARGV[2] .. id)
  if meta then table.insert(out, meta) else drop(id) end
end
return out
"""
)


class RedisFileStore(FileStore):
    def __init__(
        self, url: str, max_bytes: int, clock: Callable[[], float] = time.time, timeout_s: float = TIMEOUT_S
    ) -> None:
        super().__init__(max_bytes, clock)
        self._link = RedisLink(url, "files store", timeout_s)
        self._add = self._link.script(_ADD)
        self._read = self._link.script(_READ)
        self._remove = self._link.script(_REMOVE)
        self._list = self._link.script(_LIST)

    @property
    def shared(self) -> bool:
        return True

    async def add(
        self, filename: str, purpose: str, content: bytes, expires_after_s: int | None = None
    ) -> StoredFile:
        stored = StoredFile.new(filename, purpose, len(content), self.clock(), expires_after_s)
        expires = "" if stored.expires_at is None else stored.expires_at
        args = [stored.id, stored.to_json(), content, stored.size, self.max_bytes, expires]
        added, held = await self._run(self._add, *args)
        if not added:
            raise self.too_large(stored.size, int(held))
        return stored

    async def find(self, file_id: str) -> StoredFile | None:
        value = await self._run(self._read, file_id, META_PREFIX)
        return None if value is None else StoredFile.from_json(value)

    async def read(self, file_id: str) -> bytes | None:
        value: bytes | None = await self._run(self._read, file_id, CONTENT_PREFIX)
        return value

    async def remove(self, file_id: str) -> bool:
        return bool(await self._run(self._remove, file_id))

    async def listed(self, purpose: str | None) -> list[dict[str, Any]]:
        files = [StoredFile.from_json(value) for value in await self._run(self._list)]
        return [f.body() for f in files if purpose is None or f.purpose == purpose]

    async def close(self) -> None:
        await self._link.close()

    async def _run(self, script: Any, *args: Any) -> Any:
        common = [self.clock(), META_PREFIX, CONTENT_PREFIX]
        return await self._link.call(script(keys=KEYS, args=[*common, *args]))
