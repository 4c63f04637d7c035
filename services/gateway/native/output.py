"""SGLang's native `/generate` answer: per output `text`, `output_ids` and `meta_info` (its id,
`finish_reason` as `{"type": "stop", "matched": ...}` or `{"type": "length", "length": ...}`, token
counts, `e2e_latency`, the speculation figures, and the log-probabilities when asked for, each token
as `[logprob, token_id, text or null]`). A stream sends the same object after every piece, its text
and ids so far (SGLang's default), `finish_reason` null until the end."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from treespec.gateway.choice_abort import ABORT
from treespec.gateway.generation import ChoiceEnd, Event, TokenLogprob
from treespec.gateway.outcome import meta_info
from treespec.gateway.token_text import TokenTexts

Entry = list[Any]  # [logprob, token id, text or None]


@dataclass(frozen=True)
class NativeLogprobs:
    """How tokens' log-probabilities are written: with their text when asked (return_text_in_logprobs)."""

    texts: TokenTexts | None

    def entry(self, token_id: int, logprob: float | None) -> Entry:
        return [logprob, token_id, self.texts.text_of(token_id) if self.texts is not None else None]

    def tokens(self, entries: list[TokenLogprob]) -> list[Entry]:
        return [self.entry(e.token_id, e.logprob) for e in entries]

    def tops(self, entries: list[TokenLogprob]) -> list[list[Entry] | None]:
        return [None if e.logprob is None else [self.entry(t, lp) for t, lp in e.top] for e in entries]


@dataclass
class NativeOutput:
    """One output (a prompt's choice) as its events arrive."""

    index: int
    rid: str
    prompt_tokens: int
    input_logprobs: int = 0  # the prompt's entries to expect first (SGLang's logprob_start_len on)
    text: str = ""
    output_ids: list[int] = field(default_factory=list)
    entries: list[TokenLogprob] = field(default_factory=list)
    completion_tokens: int = 0
    end: ChoiceEnd | None = None
    started: float = field(default_factory=time.perf_counter)

    def add(self, event: Event) -> None:
        self.output_ids += event.token_ids
        self.completion_tokens = event.completion_tokens
        if isinstance(event, ChoiceEnd):
            self.end = event
            return
        self.text += event.text
        self.entries += event.logprobs

    def body(
        self, logprobs: NativeLogprobs | None, start_len: int = 0, index: bool = False
    ) -> dict[str, Any]:
        """The object SGLang answers with; `start_len`: the first prompt position whose
        log-probability is given; `index`: the output's place in a batch (streams of several)."""
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self._finish_reason(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.end.cached_tokens if self.end is not None else 0,
            "e2e_latency": time.perf_counter() - self.started,
        }
        figures = meta_info(self.end.spec) if self.end is not None else None
        if figures is not None:
            meta |= {"spec_verify_ct": figures.spec_verify_steps, **figures.model_dump()}
        if logprobs is not None:
            meta |= self._logprobs(logprobs, start_len)
        out: dict[str, Any] = {"text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}
        if index:
            out["index"] = self.index
        return out

    def _finish_reason(self) -> dict[str, Any] | None:
        if self.end is None:
            return None
        if self.end.finish_reason == ABORT:
            return {"type": "abort", "message": "aborted by /abort_request"}
        if self.end.finish_reason == "length":
            return {"type": "length", "length": self.end.completion_tokens}
        return {"type": "stop", "matched": self.end.matched}

    def _logprobs(self, logprobs: NativeLogprobs, start_len: int) -> dict[str, Any]:
        prompt, output = self.entries[: self.input_logprobs], self.entries[self.input_logprobs :]
        fields = {
            "output_token_logprobs": logprobs.tokens(output),
            "output_top_logprobs": logprobs.tops(output),
        }
        if self.input_logprobs:
            given = prompt[start_len:]
            fields |= {
                "input_token_logprobs": logprobs.tokens(given),
                "input_top_logprobs": logprobs.tops(given),
            }
        return fields
