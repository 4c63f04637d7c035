"""One batch of observations written to Redis in a single MULTI/EXEC pipeline (one round trip).

Duplicates are summed first (a hot n-gram seen 50 times in a batch is one ZINCRBY by 50). Per context:
ZINCRBY each continuation, trim to the `fanout` most frequent, refresh the TTL. Then the capacity script
stamps the contexts in the index and evicts the least recently written ones beyond `capacity`: a Lua
script is atomic, so replicas evicting at the same time never overshoot nor evict twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from treespec.drafter.ngram.memory import Context, MemoryConfig, Observation
from treespec.drafter.ngram.redis_keys import RedisKeys, pack_tokens

# KEYS[1]: the index. ARGV: context key prefix, ttl (ms), capacity, then the packed contexts just written.
# The server's clock stamps the index (the same clock as the keys' TTL, whatever the replicas' clocks say).
# Needs Redis >= 5 (scripts replicate their effects, so TIME may precede writes).
CAPACITY_SCRIPT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for i = 4, #ARGV do
  redis.call('ZADD', KEYS[1], now_ms, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now_ms - tonumber(ARGV[2])))
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
local evicted = 0
while excess > 0 do
  local popped = redis.call('ZPOPMIN', KEYS[1], math.min(excess, 512))
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    redis.call('DEL', ARGV[1] .. popped[i])
  end
  evicted = evicted + #popped / 2
  excess = excess - #popped / 2
end
return evicted
"""


@dataclass(frozen=True)
class Aggregated:
    """A batch with duplicates summed: packed context -> packed continuation -> count."""

    counts: dict[bytes, Counter[bytes]]
    contexts: list[Context]  # the contexts written (unpacked), for the local cache to forget


def aggregate(batch: Sequence[Observation]) -> Aggregated:
    """Sums duplicates; drops observations whose ids cannot be packed (they could never be looked up)."""
    counts: dict[bytes, Counter[bytes]] = {}
    contexts: dict[Context, None] = {}
    for context, continuation in batch:
        try:
            packed_context, packed_continuation = pack_tokens(context), pack_tokens(continuation)
        except ValueError:
            continue
        counts.setdefault(packed_context, Counter())[packed_continuation] += 1
        contexts[tuple(context)] = None
    return Aggregated(counts=counts, contexts=list(contexts))


def write_batch(client: redis.Redis, keys: RedisKeys, config: MemoryConfig, batch: Aggregated) -> None:
    """Raises redis errors (the writer decides between retrying and dropping)."""
    if not batch.counts:
        return
    ttl_ms = max(1, round(config.ttl_s * 1000))
    pipe = client.pipeline(transaction=True)
    for packed_context, continuations in batch.counts.items():
        key = keys.context(packed_context)
        for member, count in continuations.items():
            pipe.zincrby(key, count, member)
        pipe.zremrangebyrank(key, 0, -(config.fanout + 1))
        pipe.pexpire(key, ttl_ms)
    pipe.eval(CAPACITY_SCRIPT, 1, keys.index, keys.context_prefix, ttl_ms, config.capacity, *batch.counts)
    pipe.execute()
