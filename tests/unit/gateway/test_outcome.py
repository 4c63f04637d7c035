"""A response's usage: each prompt counted once, and its cached tokens those of its best choice."""

from __future__ import annotations

from treespec.gateway.generation import ChoiceEnd
from treespec.gateway.outcome import Outcome


def test_cached_tokens_count_each_prompt_once() -> None:
    outcome = Outcome(num_choices=4, prompt_tokens=70, choices_per_prompt=2)
    for index, cached in enumerate([0, 32, 16, 16]):  # prompts 0 and 1, two choices each
        outcome.add(ChoiceEnd(index, "stop", 3, None, cached))
    usage = outcome.usage
    assert usage.prompt_tokens == 70 and usage.completion_tokens == 12 and usage.total_tokens == 82
    assert usage.prompt_tokens_details.cached_tokens == 32 + 16
