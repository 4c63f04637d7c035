"""The Files API's store: files kept under a bound on their total bytes, listed by purpose, deleted,
and gone (their room freed) once they expire; an upload's expiration policy read from its form."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from tests.redis_server import RedisServer
from tests.unit.gateway.closing_stores import run_closing
from treespec.gateway.batch_api.expiry import BATCH_INPUT_S, upload_expiry
from treespec.gateway.batch_api.files import FileStore, MemoryFileStore
from treespec.gateway.batch_api.redis_files import RedisFileStore
from treespec.gateway.errors import APIError


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


StoreMaker = Callable[..., FileStore]


@pytest.fixture(params=["memory", "redis"])
def make_store(request: pytest.FixtureRequest) -> Iterator[StoreMaker]:
    """Stores of either kind (those in Redis all share one real redis-server: two are two replicas)."""
    if request.param == "memory":
        yield MemoryFileStore
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    yield lambda max_bytes, clock=None: RedisFileStore(
        server.url, max_bytes, **({"clock": clock} if clock else {})
    )


async def _status(call: Awaitable[Any]) -> int:
    try:
        await call
    except APIError as error:
        return error.status
    return 200


def test_files_are_kept_under_their_bound_and_deleting_frees_room(make_store: StoreMaker) -> None:
    async def scenario(store: FileStore) -> None:
        first = await store.add("a.jsonl", "batch", b"123456")
        with pytest.raises(APIError) as caught:
            await store.add("b.jsonl", "batch", b"12345")  # 11 bytes in all
        assert caught.value.status == 413 and "--files-max-bytes" in caught.value.message
        assert "holds 6" in caught.value.message
        await store.delete(first.id)
        second = await store.add("b.jsonl", "user_data", b"1234567890")  # exactly the bound
        assert await store.content(second.id) == b"1234567890"
        assert [f["id"] for f in await store.listed("user_data")] == [second.id]
        assert await store.listed("batch") == []
        body = (await store.get(second.id)).body()
        assert (body["object"], body["bytes"], body["filename"], body["status"]) == (
            "file",
            10,
            "b.jsonl",
            "processed",
        )

    run_closing(scenario, make_store(10))


def test_an_unknown_file_is_a_404(make_store: StoreMaker) -> None:
    async def scenario(store: FileStore) -> None:
        assert await store.find("file-x") is None
        for call in (store.get, store.content, store.delete):
            assert await _status(call("file-x")) == 404

    run_closing(scenario, make_store(10))


def test_a_file_goes_when_it_expires_and_frees_its_room(make_store: StoreMaker) -> None:
    async def scenario(store: FileStore, clock: _Clock) -> None:
        brief = await store.add("a.jsonl", "batch", b"123456", expires_after_s=3600)
        kept = await store.add("b.jsonl", "user_data", b"1234")
        assert (await store.get(brief.id)).body()["expires_at"] == 1_000_000 + 3600
        assert kept.body()["expires_at"] is None
        clock.now += 3599
        assert await store.find(brief.id) is not None
        assert await _status(store.add("c.jsonl", "batch", b"1")) == 413  # still full
        clock.now += 1
        assert await store.find(brief.id) is None and await store.read(brief.id) is None
        assert [f["id"] for f in await store.listed(None)] == [kept.id]
        added = await store.add("c.jsonl", "batch", b"123456")  # its room is free again
        assert await store.content(added.id) == b"123456"

    clock = _Clock()
    store = make_store(10, clock)
    run_closing(lambda s: scenario(s, clock), store)


def test_replicas_share_files_and_their_bound(redis_server: RedisServer) -> None:
    """Two replicas' stores in one Redis: a file uploaded to one is read, listed (in upload order)
    and deleted on the other, and the bound holds over both."""

    async def scenario(a: FileStore, b: FileStore) -> None:
        first = await a.add("a.jsonl", "batch", b"12345")
        second = await b.add("b.jsonl", "batch", b"123")
        assert await b.content(first.id) == b"12345" and await b.get(first.id) == first
        assert [f["id"] for f in await a.listed(None)] == [first.id, second.id]
        assert await _status(b.add("c.jsonl", "batch", b"123")) == 413  # 11 bytes over both
        await b.delete(first.id)
        assert await _status(a.get(first.id)) == 404
        await a.add("c.jsonl", "batch", b"1234567")

    run_closing(scenario, RedisFileStore(redis_server.url, 10), RedisFileStore(redis_server.url, 10))


def test_files_vanished_from_redis_leave_the_listing_and_the_bound(redis_server: RedisServer) -> None:
    """A Redis that evicts every kind of key (allkeys-lru) may drop a file's keys; the store forgets
    it on its next listing and its room is free; Redis down is a 503 naming the store, and it serves
    again after."""

    async def scenario(store: FileStore) -> None:
        gone = await store.add("a.jsonl", "batch", b"123456")
        kept = await store.add("b.jsonl", "batch", b"1234")
        link = store._link  # type: ignore[attr-defined]
        await link.client.delete(f"treespec:files:m:{gone.id}", f"treespec:files:c:{gone.id}")
        assert [f["id"] for f in await store.listed(None)] == [kept.id]
        await store.add("c.jsonl", "batch", b"123456")
        redis_server.stop()
        with pytest.raises(APIError) as caught:
            await store.listed(None)
        assert (caught.value.status, caught.value.code) == (503, "store_unavailable")
        assert "files store" in caught.value.message
        redis_server.start()  # empty: a restart without persistence
        assert await store.listed(None) == []

    run_closing(scenario, RedisFileStore(redis_server.url, 10))


@pytest.mark.parametrize(
    ("form", "purpose", "expected"),
    [
        ({}, "batch", BATCH_INPUT_S),
        ({}, "user_data", None),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}, "user_data", 3600),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "86400"}, "batch", 86400),
    ],
)
def test_an_upload_expiry_is_read_from_its_form(
    form: dict[str, str], purpose: str, expected: int | None
) -> None:
    assert upload_expiry(form, purpose) == expected


@pytest.mark.parametrize(
    "form",
    [
        {"expires_after[seconds]": "3600"},
        {"expires_after[anchor]": "created_at"},
        {"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "59"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "1h"},
    ],
)
def test_an_upload_expiry_that_is_none_is_a_400(form: dict[str, str]) -> None:
    with pytest.raises(APIError) as caught:
        upload_expiry(form, "batch")
    assert caught.value.status == 400 and caught.value.param == "expires_after"
