"""One Responses API request in flight: its chat run turned into the response, whole
(`ResponseJob.whole`) or as the stream of typed events (`ResponseJob.stream`), stored at its end
unless the request says `store: false`."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fastapi.sse import format_sse_event

from treespec.gateway.chat_reply import ChatReplies, ChatReplyMessage
from treespec.gateway.errors import APIError
from treespec.gateway.generation import Event, TextDelta, TokenLogprob
from treespec.gateway.logprob_format import LogprobFormat
from treespec.gateway.responses_api.conversation_store import ConversationStore
from treespec.gateway.responses_api.event_log import error_event
from treespec.gateway.responses_api.output import ResponseOutput
from treespec.gateway.responses_api.request import InputItem, ResponsesRequest
from treespec.gateway.responses_api.response import response_body, response_status
from treespec.gateway.responses_api.store import ResponseStore, StoredResponse, listed_item
from treespec.gateway.run import GenerationRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResponseJob:
    request: ResponsesRequest
    run: GenerationRun
    replies: ChatReplies
    store: ResponseStore
    earlier: tuple[InputItem, ...]  # the conversation it continues (previous_response_id)
    logprob_format: LogprobFormat | None  # None: no log-probabilities asked for
    conversations: ConversationStore | None = None  # where the request's `conversation` lives

    @property
    def stores(self) -> bool:
        return self.request.stores and self.store.enabled

    @cached_property
    def listed_input(self) -> tuple[dict[str, Any], ...]:
        """The request's input items as GET .../input_items lists them, their ids made once."""
        return tuple(listed_item(item) for item in self.request.items)

    async def keep(self, payload: dict[str, Any]) -> None:
        """Store the response as it stands now, if its request asks to and the store keeps any."""
        if self.stores:
            await self.store.put(
                StoredResponse.of(payload, self.request.items, self.earlier, self.listed_input)
            )

    async def add_turn(self, payload: dict[str, Any]) -> None:
        """Add the request's input and the response's output to its conversation, if it names one.
        A conversation deleted meanwhile, or a store that does not answer, costs the turn, not the
        response."""
        conversation_id = self.request.conversation_id
        if conversation_id is None or self.conversations is None:
            return
        try:
            await self.conversations.append(conversation_id, [*self.listed_input, *payload["output"]])
        except APIError as error:
            log.warning(
                "response %s was not added to conversation %s: %s", self.run.id, conversation_id, error
            )

    def body(self, output: ResponseOutput | None, status: str) -> dict[str, Any]:
        """The response object: begun (no output yet), or with its output and figures."""
        identity = (self.run.id, self.run.created, self.run.model)
        if output is None:
            return response_body(self.request, identity, [], status, stored=self.stores)
        outcome = self.run.outcome
        items = output.output(status)
        return response_body(
            self.request, identity, items, status, outcome.usage, outcome.meta_info, self.stores
        )

    async def whole(self) -> dict[str, Any]:
        """Run to the end; the finished response, stored."""
        async with aclosing(self.run.events()) as events:
            async for _ in events:
                pass
        outcome = self.run.outcome
        reply = self.replies.message(outcome.text(0), outcome.finish_reason(0))
        status = response_status(reply.finish_reason)
        output = ResponseOutput()
        output.feed(_whole(reply), self._logprobs([entry for entry, _ in outcome.logprobs(0)]))
        output.finish(status)
        payload = self.body(output, status)
        await self.keep(payload)
        await self.add_turn(payload)
        return payload

    async def stream(self, events: AsyncGenerator[Event, None]) -> AsyncIterator[dict[str, Any]]:
        """The typed events, numbered, as `events` arrive; the finished response stored. An error
        after the start ends them with an `error` event (and nothing is stored)."""
        numbers = itertools.count()

        def numbered(event: dict[str, Any]) -> dict[str, Any]:
            return {**event, "sequence_number": next(numbers)}

        started = self.body(None, "in_progress")
        yield numbered({"type": "response.created", "response": started})
        yield numbered({"type": "response.in_progress", "response": started})
        output, deltas, status = ResponseOutput(), self.replies.stream(), "completed"
        try:
            async for event in events:
                if isinstance(event, TextDelta):
                    pieces = output.feed(deltas.text(event.index, event.text), self._logprobs(event.logprobs))
                else:
                    delta, reason = deltas.end(event.index, event.finish_reason)
                    status = response_status(reason)
                    pieces = output.feed(delta) + output.finish(status)
                for piece in pieces:
                    yield numbered(piece)
        except APIError as error:
            yield numbered(error_event(error.code, error.message, error.param))
            return
        finally:
            await events.aclose()
        final = self.body(output, status)
        await self.keep(final)
        await self.add_turn(final)
        yield numbered({"type": f"response.{status}", "response": final})

    def _logprobs(self, entries: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
        """Tokens' log-probabilities in the Responses API's shape (chat's), or none when not asked for."""
        if self.logprob_format is None:
            return []
        return [token.model_dump() for token in self.logprob_format.chat(entries).content]


async def sse_events(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Typed events as the Responses API streams them: each named by its type."""
    async for event in events:
        yield format_sse_event(data_str=json.dumps(event), event=event["type"])


def _whole(reply: ChatReplyMessage) -> dict[str, Any]:
    """A whole reply as one delta."""
    calls = [{"index": i, **call} for i, call in enumerate(reply.tool_calls or [])]
    return {"reasoning_content": reply.reasoning, "content": reply.content, "tool_calls": calls}
