"""vLLM's bad_words and allowed_token_ids through the official `openai` client against the real
gateway and verifier (random drafts): a banned word's tokens never come, only allowed tokens do, and
bad values are a 400 naming the field."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.services.gateway_stack import MODEL
from treespec.gateway.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow

QUESTION: list[Any] = [{"role": "user", "content": "What is the capital of France? Answer in a sentence."}]


def _token_ids(client: openai.OpenAI, **extra: Any) -> list[int]:
    """The greedy reply's token ids (its log-probabilities name them)."""
    reply = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, logprobs=True,
        extra_body={"return_tokens_as_token_ids": True, **extra},
    )  # fmt: skip
    content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
    assert content is not None
    return [int(t.token.removeprefix("token_id:")) for t in content]


def _holds(tokens: list[int], word: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + len(word)]) == word for i in range(len(tokens) - len(word) + 1))


def test_a_bad_word_never_comes(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    plain = _token_ids(client)
    word = "Paris"
    spellings = [tuple(tokenizer.text_prompt(w, add_special_tokens=False)) for w in (word, " " + word)]
    assert any(_holds(plain, s) for s in spellings), tokenizer.decode(plain)  # the reply names it
    banned = _token_ids(client, bad_words=[word])
    assert banned != plain and not any(_holds(banned, s) for s in spellings)


def test_only_allowed_tokens_come(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    allowed = sorted({*tokenizer.text_prompt(" yes no maybe.", add_special_tokens=False), 2})  # 2: EOS
    tokens = _token_ids(client, allowed_token_ids=allowed)
    assert tokens and set(tokens) <= set(allowed)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"bad_words": [" "]}, "bad_words"),
        ({"bad_words": ["x " * 100]}, "bad_words"),
        ({"bad_words": "Paris"}, "bad_words"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [10**6]}, "allowed_token_ids"),
        ({"allowed_token_ids": [-1]}, "allowed_token_ids"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(
    http: httpx.Client, fields: dict[str, Any], param: str
) -> None:
    for path, body in (
        ("/v1/chat/completions", {"messages": QUESTION}),
        ("/v1/completions", {"prompt": "The capital of France is"}),
    ):
        response = http.post(path, json={"model": MODEL, "max_tokens": 4, **body, **fields})
        assert response.status_code == 400, response.text
        assert (response.json()["error"]["param"] or "").startswith(param), response.text
