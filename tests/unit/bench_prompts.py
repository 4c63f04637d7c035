"""A small Spec-Bench style prompts file for the benchmark verbs' end-to-end tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_prompts(path: Path, rows: list[tuple[int, str, str]]) -> Path:
    """`rows` of (question id, category, first turn) as JSONL at `path`."""
    path.write_text(
        "".join(json.dumps({"question_id": q, "category": c, "turns": [t]}) + "\n" for q, c, t in rows)
    )
    return path
