"""The Files API's store: files kept under a bound on their total bytes, listed by purpose, deleted,
and gone (their room freed) once they expire; an upload's expiration policy read from its form."""

from __future__ import annotations

import pytest

from treespec.gateway.batch_api.expiry import BATCH_INPUT_S, upload_expiry
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


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_file_goes_when_it_expires_and_frees_its_room() -> None:
    clock = _Clock()
    store = FileStore(max_bytes=10, clock=clock)
    brief = store.add("a.jsonl", "batch", b"123456", expires_after_s=3600)
    kept = store.add("b.jsonl", "user_data", b"1234")
    assert store.get(brief.id).body()["expires_at"] == 1_000_000 + 3600
    assert kept.body()["expires_at"] is None
    clock.now += 3599
    assert store.find(brief.id) is not None
    with pytest.raises(APIError):
        store.add("c.jsonl", "batch", b"1")  # still full
    clock.now += 1
    assert store.find(brief.id) is None
    assert [f["id"] for f in store.listed(None)] == [kept.id]
    assert store.add("c.jsonl", "batch", b"123456").content == b"123456"  # its room is free again


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
