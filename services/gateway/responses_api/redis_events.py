"""The events of streamed background responses in Redis (with `--responses-store-url`): the replica
making one writes its events into a Redis stream as they are logged (responses_api/event_log.py), so a
client follows it, or resumes it after a lost connection, on any replica
(`GET /v1/responses/{id}?stream=true&starting_after=N`).

The stream `treespec:responses:e:{id}` holds a first entry (id 0-1) written before the request is
answered, each event as entry 1-{sequence number}, and an end entry (2-0) once no event follows. The
writer batches what was logged meanwhile into one script call (one round trip, idempotent: an event
written already is skipped), and writes at least every `BEAT_S`: while the response is made the stream
expires `LIVE_TTL_S` after its writer's last sign of life (a replica that dies leaves no stream that
seems alive), and once it ended, with the response (the store's TTL; the store's LRU and delete drop
it too). A stream whose response is no longer stored is dropped, and its writer stops.

Redis down or slow never touches the response being made, nor its followers on the replica making it:
the writer tries again every `RETRY_S`, from the first event if the stream lapsed meanwhile (once the
response has ended, for `LIVE_TTL_S` at most). A follower
on another replica gets an `error` event (code `store_unavailable`) and may resume with
`starting_after`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from redis.exceptions import RedisError

from treespec.gateway.responses_api.event_log import Event, EventLog, error_event
from treespec.gateway.responses_api.redis_link import TIMEOUT_S, RedisLink
from treespec.gateway.responses_api.redis_store import EVENTS_PREFIX, RESPONSES_PREFIX

LIVE_TTL_S = 30
BEAT_S = 10.0
RETRY_S = 1.0
BLOCK_MS = 1000  # a follower's wait for entries per read (under the link's timeout)
READ_COUNT = 256

FIRST_ID = "0-1"
END_ID = b"2-0"

# KEYS: the stream, the response's key; ARGV: the first event's sequence number, whether the log
# closed (1/0), the live TTL, the kept TTL, then the events' JSON. Returns 1 (written), -1 (the
# response is no longer stored: the stream is dropped) or -2 (a gap: the stream lapsed; write again
# from the first event).
_WRITE = """
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  return -1
end
local next_seq = 0
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then
  redis.call('XADD', KEYS[1], '0-1', 'begin', '1')
else
  local id = last[1][1]
  if string.sub(id, 1, 2) == '2-' then return 1 end
  if string.sub(id, 1, 2) == '1-' then next_seq = tonumber(string.sub(id, 3)) + 1 end
end
local first = tonumber(ARGV[1])
if first > next_seq then return -2 end
for i = 5, #ARGV do
  local seq = first + i - 5
  if seq >= next_seq then redis.call('XADD', KEYS[1], '1-' .. seq, 'event', ARGV[i]) end
end
if ARGV[2] == '1' then
  redis.call('XADD', KEYS[1], '2-0', 'end', '1')
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
else
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return 1
"""

WRITTEN, GONE, GAP = 1, -1, -2
_UNAVAILABLE = "The response's events are unavailable (the store did not answer); resume with starting_after."
_LAPSED = "The response's events are no longer kept: the replica making it stopped, or it was deleted."


class RedisEventStreams:
    def __init__(self, url: str, ttl_s: int, timeout_s: float = TIMEOUT_S) -> None:
        self.ttl_s = ttl_s
        self._link = RedisLink(url, "responses store", timeout_s)
        self._write_script = self._link.script(_WRITE)

    async def open(self, response_id: str) -> bool:
        """Start the response's stream (before the request is answered, so that another replica
        finds it at once); whether Redis took it (if not, the writer tries again)."""
        return await self._write(response_id, 0, [], False) == WRITTEN

    async def write(self, response_id: str, events: EventLog) -> None:
        """Write the log's events into the response's stream as they are logged, until it closes
        and all are written, or the response is no longer stored."""
        written, failures = 0, 0
        while True:
            closed = events.closed
            batch = events.since(written)
            outcome = await self._write(response_id, written, batch, closed)
            failures = failures + 1 if outcome is None else 0
            if outcome == GONE or (closed and (outcome == WRITTEN or failures * RETRY_S >= LIVE_TTL_S)):
                return  # done, or Redis was down longer than an unfinished stream lives
            if outcome == WRITTEN:
                written += len(batch)
                await events.wait(written, BEAT_S)
            elif outcome == GAP:
                written = 0
            else:
                await asyncio.sleep(RETRY_S)

    async def exists(self, response_id: str) -> bool:
        """Whether the response's events are in Redis (a 503 while Redis does not answer)."""
        return bool(await self._link.call(self._link.client.exists(_key(response_id))))

    async def follow(self, response_id: str, starting_after: int = -1) -> AsyncGenerator[Event, None]:
        """The events after sequence number `starting_after`, then each as it is written, until the
        stream ends; an `error` event when it vanishes or Redis fails meanwhile."""
        key = _key(response_id)
        last: str | bytes = FIRST_ID if starting_after < 0 else f"1-{starting_after}"
        seen = max(starting_after, -1)
        while True:
            try:
                reply: Any = await self._link.client.xread({key: last}, count=READ_COUNT, block=BLOCK_MS)
                lapsed = not reply and not await self._link.client.exists(key)
            except RedisError as error:
                self._link.failed(error)
                yield {**error_event("store_unavailable", _UNAVAILABLE), "sequence_number": seen + 1}
                return
            if lapsed:
                yield {**error_event("events_unavailable", _LAPSED), "sequence_number": seen + 1}
                return
            entries: list[tuple[bytes, dict[bytes, bytes]]] = reply[0][1] if reply else []
            for entry_id, fields in entries:
                if entry_id == END_ID:
                    return
                last = entry_id
                event: Event = json.loads(fields[b"event"])
                seen = event["sequence_number"]
                yield event

    async def close(self) -> None:
        await self._link.close()

    async def _write(self, response_id: str, first: int, batch: list[Event], closed: bool) -> int | None:
        """The script's outcome; None when Redis did not answer (logged once per outage)."""
        args: list[Any] = [
            first,
            int(closed),
            LIVE_TTL_S,
            self.ttl_s,
            *(json.dumps(event) for event in batch),
        ]
        keys = [_key(response_id), f"{RESPONSES_PREFIX}{response_id}"]
        outcome = await self._link.attempt(self._write_script(keys=keys, args=args))
        return None if outcome is None else int(outcome)


def _key(response_id: str) -> str:
    return f"{EVENTS_PREFIX}{response_id}"
