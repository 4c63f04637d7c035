"""The stored chat completions' stores, in memory and in a real redis-server (on a free port), alike:
a completion kept as answered, with its request's metadata, fields and messages; read, its metadata
replaced, deleted; 404s for what is not kept; lists in the order made, filtered by model and
metadata, paged after an id (a 400 for one not kept); the capacity drops the least recently used
(and a list no longer shows it); a store of capacity 0 keeps none; in Redis, one whose key expired
leaves the list."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.redis_server import RedisServer
from treespec.gateway.chat_store.record import StoredChat, stored_chat
from treespec.gateway.chat_store.redis_chat_store import CHAT_PREFIX, RedisChatStore
from treespec.gateway.chat_store.store import ChatQuery, ChatStore, MemoryChatStore
from treespec.gateway.errors import APIError
from treespec.gateway.schemas import ChatCompletionRequest

StoreFactory = Callable[[int], ChatStore]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    if request.param == "memory":
        return MemoryChatStore
    server: RedisServer = request.getfixturevalue("redis_server")
    return lambda capacity: RedisChatStore(server.url, capacity)


def _chat(n: int, model: str = "m", team: str = "a") -> StoredChat:
    request = ChatCompletionRequest.model_validate(
        {
            "model": model,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi"}],
                },
            ],
            "metadata": {"team": team, "n": str(n)},
            "temperature": 0.5,
            "seed": 7,
            "user": "u1",
            "response_format": {"type": "json_object"},
        }
    )
    return stored_chat(request, _completion(f"chatcmpl-{n}", model))


def _completion(completion_id: str, model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": "hi"}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


def _ids(chats: list[StoredChat]) -> list[str]:
    return [chat.id for chat in chats]


def _run(make_store: StoreFactory, capacity: int, scenario: Callable[[ChatStore], Any]) -> None:
    async def run() -> None:
        store = make_store(capacity)
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(run())


async def _status(call: Any) -> int:
    try:
        await call
    except APIError as error:
        return error.status
    return 200


def test_the_record_holds_the_completion_its_request_fields_and_its_messages() -> None:
    chat = _chat(1)
    assert chat.body["choices"][0]["message"]["content"] == "hi" and chat.body["usage"]["total_tokens"] == 10
    assert chat.body["metadata"] == {"team": "a", "n": "1"} and chat.body["input_user"] == "u1"
    assert chat.body["temperature"] == 0.5 and chat.body["seed"] == 7
    assert chat.body["response_format"] == {"type": "json_object"} and chat.body["tools"] is None
    system, user = chat.messages
    assert system == {
        "id": "chatcmpl-1-0",
        "role": "system",
        "content": "Be brief.",
        "name": None,
        "content_parts": None,
    }
    assert user["id"] == "chatcmpl-1-1" and user["content"] == "Say hi"
    assert [part["text"] for part in user["content_parts"]] == ["Say ", "hi"]
    assert StoredChat.from_json(chat.to_json()) == chat


def test_a_completion_is_kept_read_updated_and_deleted(make_store: StoreFactory) -> None:
    async def scenario(store: ChatStore) -> None:
        chat = _chat(1)
        await store.put(chat)
        assert await store.get(chat.id) == chat
        updated = await store.set_metadata(chat.id, {"team": "b"})
        assert updated.body["metadata"] == {"team": "b"} and updated.body["choices"] == chat.body["choices"]
        assert await store.get(chat.id) == updated
        await store.delete(chat.id)
        for call in (store.get(chat.id), store.set_metadata(chat.id, {}), store.delete(chat.id)):
            assert await _status(call) == 404

    _run(make_store, 8, scenario)


def test_lists_follow_the_order_made_filter_and_page(make_store: StoreFactory) -> None:
    async def scenario(store: ChatStore) -> None:
        chats = [_chat(1), _chat(2, team="b"), _chat(3, model="other"), _chat(4)]
        for chat in chats:
            await store.put(chat)
        await store.get("chatcmpl-1")  # a read changes no list's order
        assert _ids((await store.page(ChatQuery())).chats) == _ids(chats)
        assert _ids((await store.page(ChatQuery(order="desc"))).chats) == _ids(chats[::-1])
        assert _ids((await store.page(ChatQuery(model="m"))).chats) == [
            "chatcmpl-1",
            "chatcmpl-2",
            "chatcmpl-4",
        ]
        team_a = ChatQuery(metadata={"team": "a"})
        assert _ids((await store.page(team_a)).chats) == ["chatcmpl-1", "chatcmpl-3", "chatcmpl-4"]
        assert _ids((await store.page(ChatQuery(metadata={"team": "a", "n": "3"}))).chats) == ["chatcmpl-3"]
        first = await store.page(ChatQuery(limit=2, metadata={"team": "a"}))
        assert _ids(first.chats) == ["chatcmpl-1", "chatcmpl-3"] and first.has_more
        rest = await store.page(ChatQuery(limit=2, after="chatcmpl-3", metadata={"team": "a"}))
        assert _ids(rest.chats) == ["chatcmpl-4"] and not rest.has_more
        back = await store.page(ChatQuery(limit=2, order="desc", after="chatcmpl-3"))
        assert _ids(back.chats) == ["chatcmpl-2", "chatcmpl-1"] and not back.has_more
        await store.set_metadata("chatcmpl-2", {"team": "a"})  # an update moves no completion
        assert _ids((await store.page(team_a)).chats) == [
            "chatcmpl-1",
            "chatcmpl-2",
            "chatcmpl-3",
            "chatcmpl-4",
        ]
        with pytest.raises(APIError) as unknown:
            await store.page(ChatQuery(after="chatcmpl-9"))
        assert unknown.value.status == 400 and unknown.value.param == "after"

    _run(make_store, 8, scenario)


def test_the_capacity_drops_the_least_recently_used(make_store: StoreFactory) -> None:
    async def scenario(store: ChatStore) -> None:
        for n in (1, 2):
            await store.put(_chat(n))
        await store.get("chatcmpl-1")  # now 2 is the least recently used
        await store.put(_chat(3))
        assert await _status(store.get("chatcmpl-2")) == 404
        assert _ids((await store.page(ChatQuery())).chats) == ["chatcmpl-1", "chatcmpl-3"]

    _run(make_store, 2, scenario)


def test_a_store_of_capacity_zero_keeps_none(make_store: StoreFactory) -> None:
    async def scenario(store: ChatStore) -> None:
        assert not store.enabled
        await store.put(_chat(1))
        assert await _status(store.get("chatcmpl-1")) == 404
        assert (await store.page(ChatQuery())).chats == []

    _run(make_store, 0, scenario)


def test_in_redis_an_expired_completion_leaves_the_list(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisChatStore(redis_server.url, 8)
        try:
            for n in (1, 2, 3):
                await store.put(_chat(n))
            await store._link.client.delete(CHAT_PREFIX + "chatcmpl-2")  # as its TTL would
            assert _ids((await store.page(ChatQuery())).chats) == ["chatcmpl-1", "chatcmpl-3"]
            assert await store._link.client.zrange("treespec:chats:made", 0, -1) == [
                b"chatcmpl-1",
                b"chatcmpl-3",
            ]
            ttl = await store._link.client.ttl(CHAT_PREFIX + "chatcmpl-1")
            assert 0 < ttl <= store.ttl_s
        finally:
            await store.close()

    asyncio.run(scenario())


def test_with_redis_down_a_completion_is_not_kept_and_reading_is_a_503(redis_server: RedisServer) -> None:
    async def scenario() -> None:
        store = RedisChatStore(redis_server.url, 8, timeout_s=0.5)
        try:
            redis_server.stop()
            await store.put(_chat(1))  # no error: the completion was answered already
            assert await _status(store.get("chatcmpl-1")) == 503
            assert await _status(store.page(ChatQuery())) == 503
            redis_server.start()
            await store.put(_chat(2))
            assert _ids((await store.page(ChatQuery())).chats) == ["chatcmpl-2"]
        finally:
            await store.close()

    asyncio.run(scenario())
