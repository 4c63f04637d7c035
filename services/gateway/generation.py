"""One choice's generation: verifier chunks in, text deltas and a final `ChoiceEnd` out.

Tokens go through the incremental detokenizer, then the stop-string matcher. When the request asked
for log-probabilities, each token's rides on the first text delta that holds its text (or on the
last delta, for text a stop string cut away). A stop token (the
request's stop_token_ids, or EOS unless ignore_eos) ends the generation and adds no text, though it
counts as a completion token. A stop string ends it early: the gRPC call is cancelled (closing the
chunk iterator does that), and the figures the verifier would have sent at the end are unknown.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol

from opentelemetry.context import Context
from tokenizers import Tokenizer

from treespec.gateway.detokenizer import IncrementalDetokenizer
from treespec.gateway.stop_strings import StopStringMatcher
from treespec.gateway.verifier_client import verifier_unavailable
from treespec.v1 import verifier_pb2

_FINISH_REASONS = {verifier_pb2.FINISH_REASON_STOP: "stop", verifier_pb2.FINISH_REASON_LENGTH: "length"}


@dataclass(frozen=True)
class SpecFigures:
    """Speculation figures of one choice (the verifier's SpeculationStats)."""

    verify_steps: int
    drafted_tokens: int
    accepted_tokens: int
    committed_tokens: int
    # Per tree depth (index 0 = depth 1): steps whose tree reached it, and steps accepting a token there.
    drafted_by_depth: tuple[int, ...] = ()
    accepted_by_depth: tuple[int, ...] = ()

    @classmethod
    def from_proto(cls, stats: verifier_pb2.SpeculationStats) -> SpecFigures:
        return cls(
            stats.verify_steps,
            stats.drafted_tokens,
            stats.accepted_tokens,
            stats.committed_tokens,
            tuple(stats.drafted_by_depth),
            tuple(stats.accepted_by_depth),
        )

    @property
    def drafting_steps(self) -> int:
        """The verify steps that had a draft to verify (vLLM's `num_drafts`)."""
        return self.drafted_by_depth[0] if self.drafted_by_depth else 0

    @property
    def acceptance_length(self) -> float:
        return self.committed_tokens / self.verify_steps if self.verify_steps else 0.0


@dataclass(frozen=True)
class TokenLogprob:
    """An output token's log-probability under the model, and the most likely tokens' (best first)."""

    token_id: int
    logprob: float | None  # None: the prompt's first token (no context to predict it from)
    top: tuple[tuple[int, float], ...]
    rank: int = 0  # in the vocabulary, 1: the most likely (0: unknown)

    @classmethod
    def from_proto(cls, token_id: int, entry: verifier_pb2.TokenLogprob) -> TokenLogprob:
        top = tuple(zip(entry.top_token_ids, entry.top_logprobs, strict=True))
        return cls(token_id, entry.logprob, top, entry.rank)


@dataclass(frozen=True)
class TextDelta:
    index: int
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # the tokens this text completes, when asked for
    offset: int = 0  # where `text` starts in the choice's whole text
    completion_tokens: int = 0  # the choice's output tokens so far, this text's included
    token_ids: tuple[int, ...] = ()  # the tokens received since the delta before (end tokens too)
    # vLLM's prompt_logprobs, on the choice's first event: one entry per prompt token (the first's None)
    prompt_logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ChoiceEnd:
    index: int
    finish_reason: str  # "stop" or "length"
    completion_tokens: int
    spec: SpecFigures | None  # None when a stop string cut the generation short
    cached_tokens: int = 0  # prompt tokens the verifier found in its prefix cache (0: unknown)
    token_ids: tuple[int, ...] = ()  # the tokens received after the last delta (an end token)
    matched: int | str | None = None  # what stopped it: an end token id, or a stop string
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # as on TextDelta, when no delta came before


Event = TextDelta | ChoiceEnd


@dataclass(frozen=True)
class ChoiceJob:
    """One Generate call: a choice of one prompt."""

    index: int
    request: verifier_pb2.GenerateRequest
    stop_strings: tuple[str, ...]
    end_token_ids: frozenset[int]  # tokens that end the generation without adding text
    echo: str | None = None  # the prompt's text, sent first (completions' `echo`)
    min_tokens: int = 0  # stop strings count from this many output tokens on (vLLM's min_tokens)
    include_stop_str: bool = False  # the text ends with the stop string found (vLLM's extension)
    stop_regexes: tuple[str, ...] = ()  # SGLang's stop_regex: patterns that stop it as stop strings do
    skip_special_tokens: bool = True  # special tokens add no text (vLLM's extension)
    prompt_logprobs: bool = False  # the first event carries the prompt's log-probabilities (vLLM's)
    echo_only: bool = False  # the echo and nothing after it (completions' max_tokens 0)


class ChunkSource(Protocol):
    """What a choice needs of the verifier (VerifierClient; a fake in tests)."""

    def generate(
        self, request: verifier_pb2.GenerateRequest, trace_context: Context | None = None
    ) -> AsyncGenerator[verifier_pb2.GenerateChunk, None]: ...


async def run_choice(
    client: ChunkSource, tokenizer: Tokenizer, job: ChoiceJob, trace_context: Context | None = None
) -> AsyncGenerator[Event, None]:
    prompt_ids = job.request.prompt_token_ids
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids, skip_special_tokens=job.skip_special_tokens)
    stops = StopStringMatcher(job.stop_strings, job.include_stop_str, job.stop_regexes)
    count = sent = 0  # tokens received, characters sent
    pending: list[TokenLogprob] = []  # tokens whose text has not been sent yet
    received: list[int] = []  # tokens not yet on a delta
    echo = job.echo
    prompt: tuple[TokenLogprob, ...] = ()  # vLLM's prompt log-probabilities, until an event takes them

    def delta(text: str, entries: tuple[TokenLogprob, ...]) -> TextDelta:
        nonlocal sent, prompt
        sent += len(text)
        tokens = tuple(received)
        received.clear()
        event = TextDelta(job.index, text, entries, sent - len(text), count, tokens, prompt)
        prompt = ()
        return event

    first = True
    async with aclosing(client.generate(job.request, trace_context)) as chunks:
        async for chunk in chunks:
            if first:
                prompt_entries = _prompt_entries(job.request, chunk)
                prompt = prompt_entries if job.prompt_logprobs else ()
                first = False
            if echo is not None:
                yield delta(echo, _echo_entries(job.request, prompt_entries))
                echo = None
                if job.echo_only:  # the prompt scored: the token the verifier made is dropped
                    yield ChoiceEnd(job.index, "length", 0, None, prompt_logprobs=prompt)
                    return
            entries = chunk.logprobs if len(chunk.logprobs) == len(chunk.token_ids) else None
            # The chunk's tokens (a verify step's accepted ones come together) go out as one delta, as
            # vLLM and SGLang stream a step: a delta per token cost the gateway an event each.
            deltas: list[TextDelta] = []
            for j, token in enumerate(chunk.token_ids):
                count += 1
                received.append(token)
                if token in job.end_token_ids:
                    continue
                if entries is not None:
                    pending.append(TokenLogprob.from_proto(token, entries[j]))
                check = stops.push(detokenizer.step(token), armed=count >= job.min_tokens)
                if check.text or (check.stopped and pending):
                    deltas.append(delta(check.text, tuple(pending)))
                    pending.clear()
                if check.stopped:
                    if deltas:
                        yield joined(deltas)
                    yield ChoiceEnd(
                        job.index,
                        "stop",
                        count,
                        None,
                        token_ids=tuple(received),
                        matched=check.matched,
                        prompt_logprobs=prompt,
                    )
                    return
            if chunk.finish_reason != verifier_pb2.FINISH_REASON_UNSPECIFIED:
                tail = stops.flush()
                if tail or pending:
                    deltas.append(delta(tail, tuple(pending)))
                if deltas:
                    yield joined(deltas)
                yield _choice_end(job, chunk, count, tuple(received), prompt)
                return
            if deltas:
                yield joined(deltas)
    raise verifier_unavailable("the generation stream ended without a finish reason")


def joined(deltas: list[TextDelta]) -> TextDelta:
    """Consecutive deltas of one choice as one: their texts, entries and tokens in order."""
    if len(deltas) == 1:
        return deltas[0]
    first, last = deltas[0], deltas[-1]
    return TextDelta(
        first.index,
        "".join(d.text for d in deltas),
        tuple(e for d in deltas for e in d.logprobs),
        first.offset,
        last.completion_tokens,
        tuple(t for d in deltas for t in d.token_ids),
        first.prompt_logprobs,
    )


def _prompt_entries(
    request: verifier_pb2.GenerateRequest, chunk: verifier_pb2.GenerateChunk
) -> tuple[TokenLogprob, ...]:
    """The prompt's log-probabilities, when asked for: none for its first token."""
    if not request.sampling.HasField("prompt_logprobs"):
        return ()
    ids = request.prompt_token_ids
    rest = [TokenLogprob.from_proto(t, e) for t, e in zip(ids[1:], chunk.prompt_logprobs, strict=False)]
    return (TokenLogprob(ids[0], None, ()), *rest)


def _echo_entries(
    request: verifier_pb2.GenerateRequest, entries: tuple[TokenLogprob, ...]
) -> tuple[TokenLogprob, ...]:
    """The echoed prompt's entries, with as many alternatives as the output's (`logprobs`; the
    verifier sent as many as the larger of that and vLLM's `prompt_logprobs`)."""
    if not request.sampling.HasField("logprobs"):
        return ()
    k = request.sampling.logprobs
    return tuple(TokenLogprob(e.token_id, e.logprob, e.top[:k], e.rank) for e in entries)


def _choice_end(
    job: ChoiceJob,
    chunk: verifier_pb2.GenerateChunk,
    count: int,
    token_ids: tuple[int, ...],
    prompt: tuple[TokenLogprob, ...],
) -> ChoiceEnd:
    """`token_ids`: the tokens received after the last delta; `prompt`: vLLM's prompt log-probabilities
    where no delta took them."""
    reason = _FINISH_REASONS.get(chunk.finish_reason)
    if reason is None:
        raise verifier_unavailable("the request was aborted (the model server is shutting down)")
    completion_tokens = chunk.usage.completion_tokens if chunk.HasField("usage") else count
    cached = chunk.usage.cached_prompt_tokens if chunk.HasField("usage") else 0
    spec = SpecFigures.from_proto(chunk.speculation) if chunk.HasField("speculation") else None
    last = chunk.token_ids[-1] if chunk.token_ids else None
    matched = last if reason == "stop" and last in job.end_token_ids else None
    return ChoiceEnd(job.index, reason, completion_tokens, spec, cached, token_ids, matched, prompt)
