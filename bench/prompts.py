"""Benchmark prompts: Spec-Bench questions (first turn), formatted with the model's chat template."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

PROMPTS_ENV = "TREESPEC_BENCH_PROMPTS"
PROMPTS_FILE = Path("shared") / "bench" / "spec_bench_dev.jsonl"


class PromptsNotFoundError(FileNotFoundError):
    pass


@dataclass(frozen=True)
class BenchPrompt:
    question_id: int
    category: str
    text: str  # the first user turn


def default_prompts_path() -> Path:
    """$TREESPEC_BENCH_PROMPTS, else ../shared/bench/spec_bench_dev.jsonl beside the checkout."""
    if os.environ.get(PROMPTS_ENV):
        return Path(os.environ[PROMPTS_ENV])
    repo = Path(__file__).resolve().parents[1]
    for base in (Path.cwd().parent, repo.parent):
        candidate = base / PROMPTS_FILE
        if candidate.is_file():
            return candidate
    raise PromptsNotFoundError(
        f"no {PROMPTS_FILE} beside the checkout; pass --prompts PATH or set {PROMPTS_ENV}"
    )


def load_prompts(path: Path, per_category: int | None = None) -> list[BenchPrompt]:
    """All prompts in file order, or the first `per_category` of each category."""
    prompts: list[BenchPrompt] = []
    taken: dict[str, int] = {}
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        category = row["category"]
        if per_category is not None and taken.get(category, 0) >= per_category:
            continue
        taken[category] = taken.get(category, 0) + 1
        prompts.append(BenchPrompt(int(row["question_id"]), category, row["turns"][0]))
    return prompts


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of a one-turn chat, ready for the assistant's answer."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(str(rendered), add_special_tokens=False)["input_ids"])
