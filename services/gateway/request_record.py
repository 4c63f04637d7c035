"""A generation request as the metrics see it once it has ended with its outputs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FinishedRequest:
    e2e_s: float  # from its arrival to its last output
    ttft_s: float | None  # to its first output (None: there was none)
    tpot_s: float | None  # mean time per output token after the first (None: under two tokens)
    prompt_tokens: int  # every prompt once, however many choices it has
    completion_tokens: int  # summed over the choices
    cached_tokens: int  # prompt tokens found in the prefix cache
    finish_reasons: tuple[str, ...]  # one per choice
    choices: int  # the request's n
    max_tokens: int | None  # its token limit, when it set one
