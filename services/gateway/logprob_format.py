"""Output tokens' log-probabilities in OpenAI's two shapes: chat's `content` list and the legacy
completions' parallel lists; tokens by their text, or by their id (vLLM's `return_tokens_as_token_ids`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from treespec.gateway.generation import TokenLogprob
from treespec.gateway.responses import (
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionLogprobs,
    PromptLogprob,
    PromptLogprobs,
    TopLogprob,
)
from treespec.gateway.token_text import TokenTexts

FLOOR = -9999.0  # JSON has no -inf: a log-probability below this is reported as this (vLLM's floor)


def _value(logprob: float) -> float:
    return max(logprob, FLOOR)


def _maybe(logprob: float | None) -> float | None:
    return None if logprob is None else _value(logprob)


@dataclass(frozen=True)
class LogprobFormat:
    """How a request's log-probabilities are written: each token by its text (and exact bytes), or,
    with vLLM's `return_tokens_as_token_ids`, as "token_id:N", which names every token exactly even
    where its text is part of a character (the bytes stay the token's own)."""

    texts: TokenTexts
    token_ids: bool = False

    def name(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self.token_ids else self.texts.text_of(token_id)

    def _top(self, token_id: int, logprob: float | None) -> TopLogprob:
        value = FLOOR if logprob is None else _value(logprob)  # chat has no prompt tokens: never None
        return TopLogprob(token=self.name(token_id), logprob=value, bytes=list(self.texts.bytes_of(token_id)))

    def chat(self, entries: Sequence[TokenLogprob]) -> ChatLogprobs:
        content = []
        for entry in entries:
            chosen = self._top(entry.token_id, entry.logprob)
            alternatives = [self._top(token_id, logprob) for token_id, logprob in entry.top]
            content.append(ChatTokenLogprob(**chosen.model_dump(), top_logprobs=alternatives))
        return ChatLogprobs(content=content)

    def completion(self, entries: Sequence[TokenLogprob], delta_starts: Sequence[int]) -> CompletionLogprobs:
        """`delta_starts`: where in the choice's text each token's delta starts; a token's offset adds
        the text of the tokens before it in the same delta."""
        offsets: list[int] = []
        for k, start in enumerate(delta_starts):
            same_delta = k > 0 and delta_starts[k - 1] == start
            before = len(self.texts.text_of(entries[k - 1].token_id)) if same_delta else 0
            offsets.append(offsets[-1] + before if same_delta else start)
        return CompletionLogprobs(
            tokens=[self.name(e.token_id) for e in entries],
            token_logprobs=[_maybe(e.logprob) for e in entries],
            top_logprobs=[self._completion_top(e) for e in entries],
            text_offset=offsets,
        )

    def _completion_top(self, entry: TokenLogprob) -> dict[str, float] | None:
        """The most likely tokens, and the chosen one where it is not among them: OpenAI's legacy
        completions "always return the logprob of the sampled token" (up to `logprobs` + 1 entries),
        as vLLM does; None for the prompt's first token."""
        if entry.logprob is None:
            return None
        top = {self.name(token_id): _value(logprob) for token_id, logprob in entry.top}
        top.setdefault(self.name(entry.token_id), _value(entry.logprob))
        return top

    def prompt(self, entries: Sequence[TokenLogprob]) -> PromptLogprobs:
        """vLLM's `prompt_logprobs`: per prompt token, None for the first, else its own entry first (with
        its rank in the vocabulary), then the most likely alternatives (ranks 1, 2, ...), by token id."""
        out: PromptLogprobs = []
        for entry in entries:
            if entry.logprob is None:
                out.append(None)
                continue
            own = self._prompt_entry(entry.token_id, entry.logprob, entry.rank or None)
            found = {str(entry.token_id): own}
            for rank, (token_id, logprob) in enumerate(entry.top, start=1):
                found.setdefault(str(token_id), self._prompt_entry(token_id, logprob, rank))
            out.append(found)
        return out

    def _prompt_entry(self, token_id: int, logprob: float, rank: int | None) -> PromptLogprob:
        return PromptLogprob(logprob=_value(logprob), rank=rank, decoded_token=self.name(token_id))
