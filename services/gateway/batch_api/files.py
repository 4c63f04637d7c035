"""OpenAI's Files API, for the Batch API's input and output files, under a bound on their total bytes
(`--files-max-bytes`; a file that would pass it is a 413, as is one larger than it alone). Kept until
deleted or until they expire (batch_api/expiry.py: gone from every read, list and bound once their
`expires_at` has passed). Two stores: the gateway's memory (`MemoryFileStore`, a replica's own, gone
when it stops) and Redis beside the stored responses (redis_files.py: shared by every replica, kept
across restarts)."""

from __future__ import annotations

import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from treespec.gateway.errors import APIError

# OpenAI's purposes: "batch" for a batch's input; the gateway writes "batch_output" itself.
UPLOAD_PURPOSES = ("batch", "user_data", "fine-tune", "assistants", "vision", "evals")
OUTPUT_PURPOSE = "batch_output"


@dataclass(frozen=True)
class StoredFile:
    """A file's description; its bytes are read apart (`FileStore.content`)."""

    id: str
    filename: str
    purpose: str
    size: int  # bytes
    created_at: int
    expires_at: int | None = None  # None: kept until deleted

    @classmethod
    def new(
        cls, filename: str, purpose: str, size: int, now: float, expires_after_s: int | None
    ) -> StoredFile:
        created = int(now)
        expires_at = None if expires_after_s is None else created + expires_after_s
        return cls(f"file-{uuid.uuid4().hex}", filename, purpose, size, created, expires_at)

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredFile:
        return cls(**json.loads(text))


class FileStore(ABC):
    """Files under `max_bytes` in all; `clock` tells when they expire."""

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        self.max_bytes = max_bytes
        self.clock = clock

    @property
    def shared(self) -> bool:
        """Whether every replica reads the same files."""
        return False

    @abstractmethod
    async def add(
        self, filename: str, purpose: str, content: bytes, expires_after_s: int | None = None
    ) -> StoredFile:
        """A new file, kept `expires_after_s` seconds (None: until deleted); a 413 when it does not fit."""

    @abstractmethod
    async def find(self, file_id: str) -> StoredFile | None: ...

    @abstractmethod
    async def read(self, file_id: str) -> bytes | None:
        """The file's bytes; None when there is no such file."""

    @abstractmethod
    async def remove(self, file_id: str) -> bool:
        """Whether there was such a file (now gone)."""

    @abstractmethod
    async def listed(self, purpose: str | None) -> list[dict[str, Any]]:
        """Every file's object (of `purpose`, if given), oldest first."""

    async def close(self) -> None:
        return None

    async def get(self, file_id: str) -> StoredFile:
        stored = await self.find(file_id)
        if stored is None:
            raise not_found(file_id)
        return stored

    async def content(self, file_id: str) -> bytes:
        content = await self.read(file_id)
        if content is None:
            raise not_found(file_id)
        return content

    async def delete(self, file_id: str) -> None:
        if not await self.remove(file_id):
            raise not_found(file_id)

    def too_large(self, size: int, held: int) -> APIError:
        return APIError(
            413,
            f"The file ({size} bytes) does not fit: this server keeps at most {self.max_bytes} bytes of"
            f" files and holds {held} (--files-max-bytes). Delete files you no longer need.",
            code="file_too_large",
        )


def not_found(file_id: str) -> APIError:
    return APIError(404, f"No such File object: {file_id}", code="not_found", param="file_id")


@dataclass
class _Held:
    file: StoredFile
    content: bytes


class MemoryFileStore(FileStore):
    """A replica's own files, in its memory."""

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.time) -> None:
        super().__init__(max_bytes, clock)
        self._files: dict[str, _Held] = {}  # in upload order
        self._bytes = 0

    async def add(
        self, filename: str, purpose: str, content: bytes, expires_after_s: int | None = None
    ) -> StoredFile:
        self._sweep()
        if self._bytes + len(content) > self.max_bytes:
            raise self.too_large(len(content), self._bytes)
        stored = StoredFile.new(filename, purpose, len(content), self.clock(), expires_after_s)
        self._files[stored.id] = _Held(stored, content)
        self._bytes += len(content)
        return stored

    async def find(self, file_id: str) -> StoredFile | None:
        held = self._held(file_id)
        return None if held is None else held.file

    async def read(self, file_id: str) -> bytes | None:
        held = self._held(file_id)
        return None if held is None else held.content

    async def remove(self, file_id: str) -> bool:
        held = self._held(file_id)
        if held is not None:
            self._drop(held.file)
        return held is not None

    async def listed(self, purpose: str | None) -> list[dict[str, Any]]:
        self._sweep()
        return [h.file.body() for h in self._files.values() if purpose is None or h.file.purpose == purpose]

    def _held(self, file_id: str) -> _Held | None:
        self._sweep()
        return self._files.get(file_id)

    def _sweep(self) -> None:
        """Drop the files whose time has come."""
        now = self.clock()
        expired = [
            h.file for h in self._files.values() if h.file.expires_at is not None and h.file.expires_at <= now
        ]
        for stored in expired:
            self._drop(stored)

    def _drop(self, stored: StoredFile) -> None:
        del self._files[stored.id]
        self._bytes -= stored.size
