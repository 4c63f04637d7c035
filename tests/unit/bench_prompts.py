"""A small Spec-Bench style prompts file for the benchmark verbs' end-to-end tests."""

from __future__ import annotations

import json
from pathlib import Path

from treespec.shared.model.store import models_dir, resolve_model_path

COPY_TEXT = "The old lighthouse keeper climbed the spiral stairs every evening to light the great lamp."


def write_prompts(path: Path, rows: list[tuple[int, str, str]]) -> Path:
    """`rows` of (question id, category, first turn) as JSONL at `path`."""
    path.write_text(
        "".join(json.dumps({"question_id": q, "category": c, "turns": [t]}) + "\n" for q, c, t in rows)
    )
    return path


def copy_and_qa_argv(tmp_path: Path, max_new_tokens: int) -> list[str]:
    """A bench verb's flags for a real run on the bundled model (2 threads): a prompt that repeats a
    sentence (a summarization, which the n-gram drafter copies) and a short question."""
    rows = [
        (1, "summarization", f"Repeat this sentence word for word: {COPY_TEXT}"),
        (2, "qa", "Name three colours."),
    ]
    prompts = write_prompts(tmp_path / "prompts.jsonl", rows)
    model = str(resolve_model_path(None, models_dir()))
    return [
        "--model",
        model,
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        str(max_new_tokens),
        "--threads",
        "2",
    ]
