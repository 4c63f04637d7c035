"""Output tokens' log-probabilities in OpenAI's two shapes: chat's `content` list and the legacy
completions' parallel lists."""

from __future__ import annotations

from collections.abc import Sequence

from treespec.gateway.generation import TokenLogprob
from treespec.gateway.responses import ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob
from treespec.gateway.token_text import TokenTexts

FLOOR = -9999.0  # JSON has no -inf: a log-probability below this is reported as this (vLLM's floor)


def _value(logprob: float) -> float:
    return max(logprob, FLOOR)


def _maybe(logprob: float | None) -> float | None:
    return None if logprob is None else _value(logprob)


def _top(texts: TokenTexts, token_id: int, logprob: float | None) -> TopLogprob:
    value = FLOOR if logprob is None else _value(logprob)  # chat has no prompt tokens: never None
    return TopLogprob(token=texts.text_of(token_id), logprob=value, bytes=list(texts.bytes_of(token_id)))


def chat_logprobs(texts: TokenTexts, entries: Sequence[TokenLogprob]) -> ChatLogprobs:
    content = []
    for entry in entries:
        chosen = _top(texts, entry.token_id, entry.logprob)
        alternatives = [_top(texts, token_id, logprob) for token_id, logprob in entry.top]
        content.append(ChatTokenLogprob(**chosen.model_dump(), top_logprobs=alternatives))
    return ChatLogprobs(content=content)


def completion_logprobs(
    texts: TokenTexts, entries: Sequence[TokenLogprob], delta_starts: Sequence[int]
) -> CompletionLogprobs:
    """`delta_starts`: where in the choice's text each token's delta starts; a token's offset adds the
    text of the tokens before it in the same delta."""
    tokens = [texts.text_of(e.token_id) for e in entries]
    offsets: list[int] = []
    for k, start in enumerate(delta_starts):
        same_delta = k > 0 and delta_starts[k - 1] == start
        offsets.append(offsets[-1] + len(tokens[k - 1]) if same_delta else start)
    return CompletionLogprobs(
        tokens=tokens,
        token_logprobs=[_maybe(e.logprob) for e in entries],
        top_logprobs=[
            None if e.logprob is None else {texts.text_of(t): _value(lp) for t, lp in e.top} for e in entries
        ],
        text_offset=offsets,
    )
