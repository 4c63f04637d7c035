"""OpenAI's Files API, for the Batch API's input and output files: files kept in the gateway's memory,
under a bound on their total bytes (`--files-max-bytes`; a file that would pass it is a 413, as is
one larger than it alone). Kept until deleted, until they expire (batch_api/expiry.py: gone from
every read, list and bound once their `expires_at` has passed), or until the gateway stops: a
replica's files are its own (the Batch API reads them from the replica that holds them)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from treespec.gateway.errors import APIError

# OpenAI's purposes: "batch" for a batch's input; the gateway writes "batch_output" itself.
UPLOAD_PURPOSES = ("batch", "user_data", "fine-tune", "assistants", "vision", "evals")
OUTPUT_PURPOSE = "batch_output"


@dataclass(frozen=True)
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    expires_at: int | None = None  # None: kept until deleted

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }


@dataclass
class FileStore:
    max_bytes: int
    clock: Callable[[], float] = time.time
    _files: dict[str, StoredFile] = field(default_factory=dict)  # in upload order
    _bytes: int = 0

    def add(
        self, filename: str, purpose: str, content: bytes, expires_after_s: int | None = None
    ) -> StoredFile:
        """A new file, kept `expires_after_s` seconds (None: until deleted)."""
        self._sweep()
        if self._bytes + len(content) > self.max_bytes:
            raise APIError(
                413,
                f"The file ({len(content)} bytes) does not fit: this server keeps at most {self.max_bytes}"
                f" bytes of files and holds {self._bytes} (--files-max-bytes). Delete files you no longer"
                " need.",
                code="file_too_large",
            )
        now = int(self.clock())
        expires_at = None if expires_after_s is None else now + expires_after_s
        stored = StoredFile(f"file-{uuid.uuid4().hex}", filename, purpose, content, now, expires_at)
        self._files[stored.id] = stored
        self._bytes += len(content)
        return stored

    def find(self, file_id: str) -> StoredFile | None:
        self._sweep()
        return self._files.get(file_id)

    def get(self, file_id: str) -> StoredFile:
        stored = self.find(file_id)
        if stored is None:
            raise APIError(404, f"No such File object: {file_id}", code="not_found", param="file_id")
        return stored

    def delete(self, file_id: str) -> None:
        stored = self.get(file_id)
        del self._files[file_id]
        self._bytes -= len(stored.content)

    def listed(self, purpose: str | None) -> list[dict[str, Any]]:
        """Every file's object (of `purpose`, if given), oldest first."""
        self._sweep()
        return [f.body() for f in self._files.values() if purpose is None or f.purpose == purpose]

    def _sweep(self) -> None:
        """Drop the files whose time has come."""
        now = self.clock()
        for stored in [f for f in self._files.values() if f.expires_at is not None and f.expires_at <= now]:
            del self._files[stored.id]
            self._bytes -= len(stored.content)
