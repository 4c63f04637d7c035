"""The Files API's store: files kept under a bound on their total bytes, listed by purpose, deleted."""

from __future__ import annotations

import pytest

from treespec.gateway.batch_api.files import FileStore
from treespec.gateway.errors import APIError


def test_files_are_kept_under_their_bound_and_deleting_frees_room() -> None:
    store = FileStore(max_bytes=10)
    first = store.add("a.jsonl", "batch", b"123456")
    with pytest.raises(APIError) as caught:
        store.add("b.jsonl", "batch", b"12345")  # 11 bytes in all
    assert caught.value.status == 413 and "--files-max-bytes" in caught.value.message
    store.delete(first.id)
    second = store.add("b.jsonl", "user_data", b"1234567890")  # exactly the bound
    assert store.get(second.id).content == b"1234567890"
    assert [f["id"] for f in store.listed("user_data")] == [second.id]
    assert store.listed("batch") == []
    body = store.get(second.id).body()
    assert (body["object"], body["bytes"], body["filename"], body["status"]) == (
        "file",
        10,
        "b.jsonl",
        "processed",
    )


def test_an_unknown_file_is_a_404() -> None:
    store = FileStore(max_bytes=10)
    assert store.find("file-x") is None
    for call in (store.get, store.delete):
        with pytest.raises(APIError) as caught:
            call("file-x")
        assert caught.value.status == 404
