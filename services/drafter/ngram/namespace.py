"""The shared memory's namespace: n-grams of one model and tokenizer never mix with another's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model")
MODEL_KEYS = ("architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers")


def memory_namespace(target_path: Path | None, vocab_size: int, tenant: str = "") -> str:
    """A digest of the tokenizer files and the model's identifying config keys (so that two copies of
    one model share a memory), or the vocabulary size when no model folder is known; then the tenant."""
    digest = hashlib.sha256(f"vocab={vocab_size}".encode())
    if target_path is not None:
        _hash_model(Path(target_path), digest)
    name = digest.hexdigest()[:16]
    return f"{name}:{tenant}" if tenant else name


def _hash_model(path: Path, digest: hashlib._Hash) -> None:
    config = path / "config.json"
    if config.is_file():
        values = json.loads(config.read_text())
        digest.update(json.dumps({k: values.get(k) for k in MODEL_KEYS}, sort_keys=True).encode())
    for name in TOKENIZER_FILES:
        file = path / name
        if file.is_file():
            digest.update(name.encode())
            digest.update(file.read_bytes())
