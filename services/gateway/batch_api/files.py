"""OpenAI's Files API, for the Batch API's input and output files: files kept in the gateway's memory,
under a bound on their total bytes (`--files-max-bytes`; a file that would pass it is a 413, as is
one larger than it alone). Kept until deleted or the gateway stops: a replica's files are its own
(the Batch API reads them from the replica that holds them)."""

from __future__ import annotations

import time
import uuid
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

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass
class FileStore:
    max_bytes: int
    _files: dict[str, StoredFile] = field(default_factory=dict)  # in upload order
    _bytes: int = 0

    def add(self, filename: str, purpose: str, content: bytes) -> StoredFile:
        if self._bytes + len(content) > self.max_bytes:
            raise APIError(
                413,
                f"The file ({len(content)} bytes) does not fit: this server keeps at most {self.max_bytes}"
                f" bytes of files and holds {self._bytes} (--files-max-bytes). Delete files you no longer"
                " need.",
                code="file_too_large",
            )
        stored = StoredFile(f"file-{uuid.uuid4().hex}", filename, purpose, content, int(time.time()))
        self._files[stored.id] = stored
        self._bytes += len(content)
        return stored

    def find(self, file_id: str) -> StoredFile | None:
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
        return [f.body() for f in self._files.values() if purpose is None or f.purpose == purpose]
