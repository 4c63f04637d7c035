"""A log line per generation request as it starts and as it ends (vLLM's --enable-log-requests, with
--max-log-len cutting the prompt's text and tokens): what an operator greps for when a client reports
an answer, with the speculation figures beside it. Off by default: prompts are the clients' data."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from treespec.gateway.outcome import Outcome
from treespec.gateway.schemas import SamplingFields
from treespec.gateway.tokenizer import PromptTokenizer

log = logging.getLogger("treespec.gateway.requests")

SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "n")


@dataclass(frozen=True)
class RequestLog:
    max_len: int | None = None  # prompt characters and tokens logged at most (None: all)

    def started(
        self,
        response_id: str,
        operation: str,
        body: SamplingFields,
        prompts: Sequence[list[int]],
        token_limit: int | None,
        tokenizer: PromptTokenizer,
    ) -> None:
        first = list(prompts[0]) if prompts else []
        shown = first if self.max_len is None else first[: self.max_len]
        text = tokenizer.decode(shown, skip_special_tokens=False)
        if self.max_len is not None:
            text = text[: self.max_len]
        sampling = {name: getattr(body, name) for name in SAMPLING if getattr(body, name) is not None}
        log.info(
            "request %s (%s): %d prompt(s), %s prompt tokens, max_tokens %s, sampling %s, prompt %r, "
            "prompt_token_ids %s",
            response_id,
            operation,
            len(prompts),
            "+".join(str(len(p)) for p in prompts),
            token_limit,
            sampling,
            text,
            shown,
        )

    def ended(self, response_id: str, seconds: float, outcome: Outcome | None, error: str = "") -> None:
        """Its end: `outcome` when it ran to its end, else None and the `error` that stopped it."""
        if outcome is None:
            log.info("request %s failed after %.3f s: %s", response_id, seconds, error)
            return
        meta = outcome.meta_info
        accept = f", acceptance length {meta.spec_accept_length:.2f}" if meta is not None else ""
        log.info(
            "request %s finished in %.3f s: %d completion tokens, finish %s%s",
            response_id,
            seconds,
            outcome.completion_tokens,
            ",".join(outcome.finish_reasons),
            accept,
        )
