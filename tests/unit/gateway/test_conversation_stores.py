"""The conversation stores, in memory and in a real redis-server (on a free port), alike: created
with items, read, metadata replaced, items added and deleted, deleted; 404s for what is not kept;
the capacity drops the least recently used; a store of capacity 0 keeps none."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.redis_server import RedisServer
from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.conversation_store import (
    Conversation,
    ConversationStore,
    MemoryConversationStore,
)
from treespec.gateway.responses_api.redis_conversations import RedisConversationStore
from treespec.gateway.responses_api.request import InputMessage

StoreFactory = Callable[[int], ConversationStore]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    if request.param == "memory":
        return MemoryConversationStore
    server: RedisServer = request.getfixturevalue("redis_server")
    return lambda capacity: RedisConversationStore(server.url, capacity)


def _item(n: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "user",
        "content": [{"type": "input_text", "text": f"t{n}"}],
    }


async def _status(store: ConversationStore, conversation_id: str) -> int:
    try:
        await store.get(conversation_id)
    except APIError as error:
        return error.status
    return 200


def test_a_conversation_lives_and_dies(make_store: StoreFactory) -> None:
    async def scenario() -> None:
        store = make_store(8)
        try:
            conversation = Conversation.new({"topic": "fruit"}, [_item(1)])
            await store.create(conversation)
            assert await store.get(conversation.id) == conversation
            assert (await store.set_metadata(conversation.id, {"topic": "veg"})).metadata == {"topic": "veg"}
            await store.append(conversation.id, [_item(2), _item(3)])
            await store.delete_item(conversation.id, "msg_2")
            kept = await store.get(conversation.id)
            assert kept.metadata == {"topic": "veg"} and [i["id"] for i in kept.items] == ["msg_1", "msg_3"]
            second = kept.as_input()[1]  # its items read back as a response's input
            assert isinstance(second, InputMessage) and second.text == "t3"
            with pytest.raises(APIError) as missing_item:
                await store.delete_item(conversation.id, "msg_2")
            assert missing_item.value.status == 404
            await store.delete(conversation.id)
            assert await _status(store, conversation.id) == 404
            for call in (store.append(conversation.id, [_item(4)]), store.delete(conversation.id)):
                with pytest.raises(APIError) as gone:
                    await call
                assert gone.value.status == 404
            with pytest.raises(APIError) as named:
                await store.get(conversation.id, "conversation")
            assert named.value.param == "conversation"
        finally:
            await store.close()

    asyncio.run(scenario())


def test_the_capacity_drops_the_least_recently_used(make_store: StoreFactory) -> None:
    async def scenario() -> None:
        store, none = make_store(2), make_store(0)
        try:
            a, b, c = (Conversation.new() for _ in range(3))
            await store.create(a)
            await store.create(b)
            await store.get(a.id)  # used: b is now the oldest
            await store.create(c)
            assert [await _status(store, x.id) for x in (a, b, c)] == [200, 404, 200]
            with pytest.raises(APIError) as refused:
                await none.create(Conversation.new())
            assert refused.value.status == 400
        finally:
            await store.close()
            await none.close()

    asyncio.run(scenario())
