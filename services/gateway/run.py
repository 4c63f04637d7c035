"""One generation request in flight: its choices' Generate calls, merged, observed, gathered."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from treespec.gateway.bad_words import bad_word_sequences
from treespec.gateway.choice_abort import abortable
from treespec.gateway.fanout import merge
from treespec.gateway.generation import ChoiceEnd, ChoiceJob, Event, run_choice
from treespec.gateway.native.aborts import AbortTarget
from treespec.gateway.observation import Observation
from treespec.gateway.outcome import Outcome
from treespec.gateway.responses import MetaInfo, Usage
from treespec.gateway.sampling import (
    check_min_tokens,
    check_prompt,
    check_token_ids,
    check_token_limit,
    choice_jobs,
    truncated,
)
from treespec.gateway.schemas import SamplingFields
from treespec.gateway.sse import StreamUsage
from treespec.gateway.state import GatewayState


@dataclass(frozen=True)
class GenerationRun:
    id: str
    created: int
    model: str
    jobs: list[ChoiceJob]
    outcome: Outcome
    observation: Observation
    state: GatewayState
    # The names SGLang's /abort_request stops it by (abortable_events): the response's id and the
    # client's request_id (SGLang's rid).
    abort_rids: tuple[str, ...] = ()

    @classmethod
    async def start(
        cls,
        state: GatewayState,
        body: SamplingFields,
        prompts: Sequence[list[int]],
        token_limit: int | None,
        operation: str,
        id_prefix: str,
        echoes: Sequence[str] | None = None,
        grammar_after: str = "",
        prompt_param: str = "prompt",
        prediction: Sequence[int] = (),
        limit_param: str | None = None,
    ) -> GenerationRun:
        """Cut the prompts to `truncate_prompt_tokens` where the request asks, check them against the
        model (context length, vocabulary, a token limit the client set; `prompt_param` names the
        field a prompt error points at, `limit_param` the client's name for the body's token limit
        where the body was made from another request), plan the choices. Nothing is sent to the
        verifier until `events` is iterated. The model's default sampling parameters fill the fields
        the request leaves out (sampling_defaults.py). `grammar_after`: a thinking model's end of reasoning,
        after which the request's constraint holds ("": from the start). `prediction`: a predicted
        output's tokens, which every choice drafts from."""
        defaults = state.config.sampling_defaults
        body, token_limit = defaults.apply(body), defaults.token_limit(body, token_limit)
        info = await state.verifier.model_info()
        prompts = [truncated(p, body.truncate_prompt_tokens, info) for p in prompts]
        limit_param = _limit_param(body, limit_param, state.config.allow_auto_truncate)
        for prompt_ids in prompts:
            check_prompt(prompt_ids, info, prompt_param)
            check_token_limit(len(prompt_ids), token_limit, limit_param, info)
        check_token_ids(body.allowed_token_ids or (), info, "allowed_token_ids")
        check_token_ids([int(t) for t in body.logit_bias or {}], info, "logit_bias")
        check_min_tokens(body.min_tokens, token_limit)
        bad_words = bad_word_sequences(state.tokenizer, body.bad_words or ())
        # The response's id holds the client's request_id where it gave one (vLLM's); the verifier's
        # request ids stay unique, whatever the client sends.
        unique = f"{id_prefix}{uuid.uuid4().hex}"
        response_id = f"{id_prefix}{body.request_id}" if body.request_id else unique
        jobs = choice_jobs(
            body, prompts, token_limit, info, unique, echoes, grammar_after, bad_words, prediction
        )
        outcome = Outcome(len(jobs), sum(len(p) for p in prompts), body.n, prediction)
        requests = state.request_log
        if requests is not None:
            requests.started(response_id, operation, body, prompts, token_limit, state.tokenizer)
        observation = Observation(
            state.metrics, state.tracer, operation, body, token_limit, response_id, requests
        )
        abort_rids = tuple(dict.fromkeys(r for r in (response_id, body.request_id) if r))
        return cls(response_id, int(time.time()), body.model, jobs, outcome, observation, state, abort_rids)

    def events(self, aborts: Sequence[asyncio.Event] = ()) -> AsyncGenerator[Event, None]:
        """Every choice's events in arrival order; iterate once, to the end or until closed.
        `aborts`: a flag per choice that ends it early, with finish reason `abort` (none: no flags)."""
        tokenizer = self.state.tokenizer.backend
        context = self.observation.trace_context
        sources = [run_choice(self.state.verifier, tokenizer, job, context) for job in self.jobs]
        if aborts:
            sources = [
                abortable(s, job.index, f) for s, job, f in zip(sources, self.jobs, aborts, strict=True)
            ]
        return self.observation.observe(merge(sources), self.outcome)

    def chunk_fields(
        self, index: int, event: Event | None, meta: MetaInfo | None, usage: StreamUsage
    ) -> dict[str, Any]:
        """What a streamed chunk of choice `index` carries beside the choice: the response's id, time
        and model, the figures at its end, and its usage so far when the stream reports it."""
        return {
            "id": self.id,
            "created": self.created,
            "model": self.model,
            "meta_info": meta,
            "usage": self.choice_usage(index, event) if usage.continuous else None,
        }

    def choice_usage(self, index: int, event: Event | None = None) -> Usage:
        """Choice `index`'s usage so far (vLLM's continuous usage stats): its prompt's tokens and the
        output tokens it has received, at `event` (None: before any)."""
        prompt = len(self.jobs[index].request.prompt_token_ids)  # jobs are in index order
        if isinstance(event, ChoiceEnd):
            return Usage.of(prompt, event.completion_tokens, event.cached_tokens)
        return Usage.of(prompt, event.completion_tokens if event is not None else 0)

    def abortable_events(self) -> AsyncGenerator[Event, None]:
        """`events`, each choice ended early (finish reason `abort`) by SGLang's /abort_request naming
        one of `abort_rids`, or by its `abort_all` (native/aborts.py), as SGLang stops its OpenAI
        requests too."""
        targets = [AbortTarget(self.abort_rids, asyncio.Event()) for _ in self.jobs]
        return self.state.aborts.watch(self.events([t.flag for t in targets]), targets)

    async def collect(self) -> Outcome:
        """Run to the end (non-streaming responses), abortable as `abortable_events`."""
        async with aclosing(self.abortable_events()) as events:
            async for _ in events:
                pass
        return self.outcome


def _limit_param(body: SamplingFields, rename: str | None, auto_truncate: bool) -> str | None:
    """The field a token limit beyond the context is refused in (`rename`: the client's name for
    it); None where it is cut instead: a default limit, or the gateway cuts every limit."""
    given = body.token_limit_param
    if given is None or auto_truncate:
        return None
    return rename or given
