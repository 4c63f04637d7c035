"""What a chat completion made with `store: true` keeps (OpenAI's stored chat completions,
routes/stored_chat.py): the completion as it was answered, with the request's metadata and sampling
fields beside it as OpenAI's service returns them, and the request's messages, each with an id."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from treespec.gateway.chat_messages import ChatMessage
from treespec.gateway.schemas import ChatCompletionRequest

# The request's fields a stored completion carries beside its choices (OpenAI's names).
_REQUEST_FIELDS = (
    "seed",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "tools",
    "tool_choice",
    "response_format",
)


@dataclass(frozen=True)
class StoredChat:
    body: dict[str, Any]  # the completion object, as retrieving it answers
    messages: tuple[dict[str, Any], ...]  # the request's messages as listed, in order

    @property
    def id(self) -> str:
        return str(self.body["id"])

    def matches(self, model: str | None, metadata: Mapping[str, str]) -> bool:
        """Whether a list filtered by `model` (None: any) and these metadata pairs shows it."""
        if model is not None and self.body["model"] != model:
            return False
        own = self.body["metadata"]
        return all(own.get(key) == value for key, value in metadata.items())

    def with_metadata(self, metadata: Mapping[str, str]) -> StoredChat:
        return replace(self, body={**self.body, "metadata": dict(metadata)})

    def to_json(self) -> str:
        return json.dumps({"body": self.body, "messages": self.messages})

    @classmethod
    def from_json(cls, text: str | bytes) -> StoredChat:
        data = json.loads(text)
        return cls(data["body"], tuple(data["messages"]))


def stored_chat(request: ChatCompletionRequest, completion: Mapping[str, Any]) -> StoredChat:
    """The completion answered to `request`, as it is kept."""
    body = dict(completion)
    body["object"] = "chat.completion"
    body["metadata"] = dict(request.metadata or {})
    body["input_user"] = request.user
    for name in _REQUEST_FIELDS:
        body[name] = _as_json(getattr(request, name))
    messages = tuple(_listed(m, f"{body['id']}-{i}") for i, m in enumerate(request.messages))
    return StoredChat(body, messages)


def _as_json(value: Any) -> Any:
    """A request field's value as JSON (a model, or a list of models, dumped as the request gave it)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    return value


def _listed(message: ChatMessage, message_id: str) -> dict[str, Any]:
    """A message as OpenAI lists a stored completion's: its text as `content`, and the parts it was
    given in (if any) as `content_parts`."""
    fields = message.model_dump(mode="json", exclude_none=True)
    parts = fields.pop("content", None) if isinstance(message.content, list) else None
    listed: dict[str, Any] = {"id": message_id, "role": message.role}
    listed.update(fields)
    listed["content"] = message.text if message.content is not None else None
    listed.setdefault("name", None)
    listed["content_parts"] = parts
    return listed
