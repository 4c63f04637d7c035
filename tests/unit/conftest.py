"""Fixtures the unit tests of several modules share."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.shared.model.store import DEFAULT_MODEL_NAME, IMPORT_RECORD_FILE, MODELS_DIR_ENV


@pytest.fixture
def bench_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An imported default model and a prompts file where the bench verbs' defaults look for them."""
    model = tmp_path / "models" / DEFAULT_MODEL_NAME
    model.mkdir(parents=True)
    (model / IMPORT_RECORD_FILE).write_text("{}")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    monkeypatch.setenv("TREESPEC_BENCH_PROMPTS", str(prompts))
    return model, prompts
