"""The benchmarks' warm-up prompt is long enough to take the prefill attention kernel, so that the
kernel's one-time build and speed check never land in the first timed prompt (plain decoding's)."""

from __future__ import annotations

import transformers

from treespec.bench.prompts import chat_prompt_ids
from treespec.bench.runs import WARM_UP_TEXT
from treespec.kernels.tree_attention import MAX_ROWS
from treespec.shared.model.store import models_dir, resolve_model_path


def test_the_warm_up_prompt_is_a_prefill_for_the_prefill_kernel() -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(resolve_model_path(None, models_dir()))
    # The attention backend sends chunks of more than MAX_ROWS new rows to the prefill kernel.
    assert len(chat_prompt_ids(tokenizer, WARM_UP_TEXT)) > MAX_ROWS
