"""Stored responses (`store`, on by default as on OpenAI's service): what `previous_response_id`
continues, `GET /v1/responses/{id}` reads back, `GET /v1/responses/{id}/input_items` lists and
`DELETE /v1/responses/{id}` removes.

A stored response keeps the conversation a response continuing it starts from: the earlier turns it
continued, its own input and its output, as input items (the instructions are not carried over, as
on OpenAI's service). They are kept at most `capacity` of them (`--responses-store-size`), the least
recently used going first: in the gateway's memory (`MemoryResponseStore`), or in Redis
(`--responses-store-url`, responses_api/redis_store.py), which every gateway replica shares.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.lru_map import LruMap
from treespec.gateway.responses_api.request import InputItem, InputMessage

_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


@dataclass(frozen=True)
class StoredResponse:
    body: dict[str, Any]  # the response object, as its request was answered
    input_items: tuple[dict[str, Any], ...]  # its own input, as items with ids, in order
    conversation: tuple[InputItem, ...]  # what a response continuing it starts from

    @classmethod
    def of(
        cls,
        body: dict[str, Any],
        own_input: Sequence[InputItem],
        earlier: Sequence[InputItem],
        listed: tuple[dict[str, Any], ...] | None = None,
    ) -> StoredResponse:
        """A response: `own_input` its request's items, `earlier` the conversation it continued;
        `listed`: its input items as listed before (the same ids each time a response is stored)."""
        output = _ITEMS.validate_python(body["output"])
        items = listed if listed is not None else tuple(listed_item(item) for item in own_input)
        return cls(body, items, (*earlier, *own_input, *output))

    @property
    def id(self) -> str:
        return str(self.body["id"])

    def to_json(self) -> str:
        conversation = [
            item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in self.conversation
        ]
        return json.dumps({"body": self.body, "input_items": self.input_items, "conversation": conversation})

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredResponse:
        data = json.loads(text)
        conversation = tuple(_ITEMS.validate_python(data["conversation"]))
        return cls(data["body"], tuple(data["input_items"]), conversation)


@dataclass(frozen=True)
class StoreOrder:
    """What one gateway replica asks the others about a background response that one of them makes:
    `cancel` it (stored as cancelled), or `forget` it (stopped, not stored again: it is deleted)."""

    action: Literal["cancel", "forget"]
    response_id: str


class ResponseStore(Protocol):
    """The stored responses, by id; `get` and `delete` raise a 404 for an id not stored. A store
    shared by gateway replicas also carries their orders about background responses."""

    @property
    def enabled(self) -> bool: ...

    async def put(self, response: StoredResponse) -> None: ...

    async def get(self, response_id: str, param: str | None = None) -> StoredResponse: ...

    async def delete(self, response_id: str) -> None: ...

    async def close(self) -> None: ...

    @property
    def shared(self) -> bool:
        """Whether other gateway replicas use it too (orders then reach them)."""
        ...

    async def order(self, order: StoreOrder) -> None:
        """Tell every replica (a shared store only)."""
        ...

    def orders(self) -> AsyncIterator[StoreOrder]:
        """Every replica's orders, as they come (a shared store only)."""
        ...


class MemoryResponseStore:
    """In the gateway's memory: at most `capacity` (0: none is stored)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("the responses store's capacity cannot be negative")
        self.capacity = capacity
        self._responses: LruMap[StoredResponse] = LruMap(capacity)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._responses)

    async def put(self, response: StoredResponse) -> None:
        if not self.enabled:
            return
        self._responses.put(response.id, response)

    async def get(self, response_id: str, param: str | None = None) -> StoredResponse:
        response = self._responses.get(response_id)
        if response is None:
            raise not_found(response_id, param)
        return response

    async def delete(self, response_id: str) -> None:
        await self.get(response_id)
        self._responses.pop(response_id)

    async def close(self) -> None:
        pass

    @property
    def shared(self) -> bool:
        return False

    async def order(self, order: StoreOrder) -> None:
        raise RuntimeError("a store in one gateway's memory has no other replicas to order")

    def orders(self) -> AsyncIterator[StoreOrder]:
        raise RuntimeError("a store in one gateway's memory has no other replicas to hear from")


def not_found(response_id: str, param: str | None) -> APIError:
    """The 404 for a response that is not stored (`param`: the request field that named it)."""
    what = "Previous response" if param == "previous_response_id" else "Response"
    return APIError(
        404,
        f"{what} with id '{response_id}' not found.",
        code="previous_response_not_found" if param else "not_found",
        param=param,
    )


def listed_item(item: InputItem) -> dict[str, Any]:
    """An input item as `input_items` lists it: with an id and a status, a message's text as parts."""
    listed = item.model_dump(exclude_none=True, by_alias=True)
    if isinstance(item, InputMessage) and isinstance(item.content, str):
        part: dict[str, Any] = {"type": "input_text", "text": item.content}
        if item.role == "assistant":
            part = {"type": "output_text", "text": item.content, "annotations": []}
        listed["content"] = [part]
    listed.setdefault("type", "message")
    listed.setdefault("id", f"{_ID_PREFIXES[listed['type']]}_{uuid.uuid4().hex}")
    listed.setdefault("status", "completed")
    return listed
