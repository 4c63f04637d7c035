"""OpenAI's Responses API request (`POST /v1/responses`, pydantic v2, strict), and the chat request it
runs as.

`input` is a string (one user message) or a list of items: messages (roles user, system, developer,
assistant; text content, as input_text or, for an assistant's earlier reply, output_text), the
function calls an earlier response made and their outputs, and reasoning items (which chat templates
do not render: dropped). `instructions` go first, as a system message. Function tools, `tool_choice`,
`text.format` (json_object, json_schema), `reasoning.effort` and the sampling fields become their chat
completions counterparts, so a response is generated, constrained and parsed exactly as a chat reply;
`include: ["message.output_text.logprobs"]` with `top_logprobs` asks for chat's log-probabilities.

`previous_response_id` continues a stored response (responses_api/store.py): its conversation comes
before this request's input (its instructions are not carried over). `conversation` (OpenAI's
Conversations API, responses_api/conversation_store.py) does so with a conversation's items, and the
response's input and output are then added to it. Unknown fields are refused, and fields treespec
does not implement are accepted only at their neutral value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from treespec.gateway.errors import quotable, validation_error
from treespec.gateway.request_options import ReasoningEffort, SpeculationOptions
from treespec.gateway.schema_types import STRICT, Metadata, UnicodeText, unsupported
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.service_hints import (
    PromptCacheBreakpoint,
    PromptCacheOptions,
    PromptCacheRetention,
    Verbosity,
    default_verbosity_only,
)
from treespec.gateway.tool_schemas import FUNCTION_NAME, MAX_TOOLS, FunctionDef
from treespec.shared.rpc.limits import MAX_TOP_LOGPROBS

MAX_INPUT_ITEMS = 4096


class TextPart(BaseModel):
    """A message's text: input_text, or output_text for an assistant's earlier reply as the SDK
    writes it back (with its annotations and log-probabilities, which are dropped)."""

    model_config = STRICT
    type: Literal["input_text", "output_text"]
    text: UnicodeText
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None  # accepted, ignored (service_hints.py)


class ConversationRef(BaseModel):
    model_config = STRICT
    id: str = Field(min_length=1, max_length=256)


class InputMessage(BaseModel):
    model_config = STRICT
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: UnicodeText | list[TextPart]
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(BaseModel):
    """A function call an earlier response made."""

    model_config = STRICT
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(pattern=FUNCTION_NAME)
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(BaseModel):
    """What the client's function returned for a call."""

    model_config = STRICT
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: UnicodeText
    id: str | None = None
    status: str | None = None


class ReasoningItem(BaseModel):
    """An earlier response's reasoning, written back: accepted and dropped (chat templates leave an
    earlier turn's reasoning out)."""

    model_config = STRICT
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[Any] = Field(default_factory=list)
    content: list[Any] | None = None
    encrypted_content: str | None = None
    status: str | None = None


def _item_kind(value: Any) -> str:
    """An item's type; a message may leave it out (OpenAI's "easy" input message)."""
    if isinstance(value, dict):
        return str(value.get("type", "message"))
    return str(getattr(value, "type", "message"))


InputItem = Annotated[
    Annotated[InputMessage, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind),
]
InputItems = Annotated[list[InputItem], Field(min_length=1, max_length=MAX_INPUT_ITEMS)]


class FunctionTool(FunctionDef):
    """A function tool as the Responses API gives it: chat's function definition, flat."""

    type: Literal["function"]


class FunctionChoice(BaseModel):
    model_config = STRICT
    type: Literal["function"]
    name: str


class TextFormat(BaseModel):
    """`text.format`: free text, any JSON object, or JSON following a schema (its fields flat, unlike
    chat's `response_format.json_schema`)."""

    model_config = STRICT
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _a_schema_has_its_fields(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise PydanticCustomError("missing", "a json_schema format needs its 'name' and 'schema'")
        return self

    def response_format(self) -> dict[str, Any]:
        """Chat's `response_format` for this format."""
        if self.type != "json_schema":
            return {"type": self.type}
        fields = {
            "name": self.name,
            "description": self.description,
            "schema": self.schema_,
            "strict": self.strict,
        }
        return {"type": "json_schema", "json_schema": {k: v for k, v in fields.items() if v is not None}}


class TextConfig(BaseModel):
    model_config = STRICT
    format: TextFormat | None = None
    verbosity: Verbosity | None = None

    _check_verbosity = field_validator("verbosity")(default_verbosity_only)


class ReasoningConfig(BaseModel):
    model_config = STRICT
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(BaseModel):
    model_config = STRICT
    model: str = Field(min_length=1)
    # None: the response continues its previous response or conversation with no new input.
    input: (
        UnicodeText | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_INPUT_ITEMS)] | None
    ) = None
    instructions: UnicodeText | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    store: bool | None = None  # None: stored
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    # Accepted and ignored: hints for OpenAI's own service.
    metadata: Metadata | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: PromptCacheRetention | None = None  # prompt caching: service_hints.py
    prompt_cache_options: PromptCacheOptions | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    truncation: Literal["disabled"] | None = None
    # OpenAI's bound on calls to its built-in tools: this server runs none (a function call is the
    # client's to run), so any bound holds; echoed in the response.
    max_tool_calls: int | None = Field(default=None, ge=1)
    # Extensions, as on chat completions.
    cache_salt: UnicodeText | None = Field(default=None, min_length=1, max_length=1024)
    speculation: SpeculationOptions | None = None
    priority: int | None = None  # vLLM's, as on chat completions
    # A conversation (its id, or {"id": ...}) the response starts from and adds its turn to.
    conversation: Annotated[str, Field(min_length=1, max_length=256)] | ConversationRef | None = None
    # Not implemented: accepted at their neutral value only.
    prompt: Any = None
    background: bool | None = None  # made by the gateway's own task, fetched later (background.py)
    background_options: dict[str, Any] | None = None
    context_management: list[Any] | None = None
    moderation: dict[str, Any] | None = None
    image: dict[str, Any] | None = None
    access_programs: Any = None
    # Log-probabilities: the message's tokens with include ["message.output_text.logprobs"], and as
    # many alternatives per token as top_logprobs asks.
    include: list[Literal["message.output_text.logprobs"]] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)

    _check_unsupported = field_validator(
        "prompt",
        "background_options",
        "context_management",
        "moderation",
        "image",
        "access_programs",
    )(unsupported)

    @field_validator("conversation")
    @classmethod
    def _one_earlier_conversation(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("previous_response_id") is not None:
            raise PydanticCustomError(
                "invalid_value",
                "'conversation' and 'previous_response_id' both give the earlier conversation; "
                "give one of them",
            )
        return value

    @property
    def conversation_id(self) -> str | None:
        return self.conversation.id if isinstance(self.conversation, ConversationRef) else self.conversation

    @field_validator("background")
    @classmethod
    def _a_background_response_is_fetched_later(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value and info.data.get("store") is False:
            raise PydanticCustomError("invalid_value", "a background response must be stored (store: true)")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _a_named_function_is_a_tool(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, FunctionChoice):
            names = [t.name for t in info.data.get("tools") or []]
            if value.name not in names:
                raise PydanticCustomError(
                    "invalid_value",
                    "tool_choice names '{name}', which is not among the tools",
                    {"name": quotable(value.name)},
                )
        return value

    @property
    def streams(self) -> bool:
        return bool(self.stream)

    @property
    def logprobs(self) -> bool:
        """Whether the message's output_text carries its tokens' log-probabilities."""
        return "message.output_text.logprobs" in (self.include or [])

    @property
    def stores(self) -> bool:
        return self.store is not False

    @property
    def items(self) -> list[InputItem]:
        """The request's own input as items (a string is one user message; none: no items)."""
        if isinstance(self.input, str):
            return [InputMessage(role="user", content=self.input)]
        return self.input or []

    def chat_request(self, earlier: Sequence[InputItem] = ()) -> ChatCompletionRequest:
        """The chat completions request this one runs as, continuing the `earlier` conversation (a
        400 naming the problem where the conversation does not make one, such as a tool_choice naming
        no tool)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.chat_messages(earlier),
            "max_completion_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stream": self.streams,
            "cache_salt": self.cache_salt,
            "priority": self.priority,
            "speculation": self.speculation.model_dump(exclude_none=True) if self.speculation else None,
        }
        if self.logprobs:
            body |= {"logprobs": True, "top_logprobs": self.top_logprobs or 0}
        if self.tools:
            body["tools"] = [
                {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                for t in self.tools
            ]
        if isinstance(self.tool_choice, FunctionChoice):
            body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice.name}}
        elif self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.text is not None and self.text.format is not None:
            body["response_format"] = self.text.format.response_format()
        if self.reasoning is not None and self.reasoning.effort is not None:
            body["reasoning_effort"] = self.reasoning.effort
        try:
            return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})
        except ValidationError as exc:
            raise validation_error(exc.errors()) from None

    def chat_messages(self, earlier: Sequence[InputItem] = ()) -> list[dict[str, Any]]:
        """The conversation as chat messages: the instructions, then the `earlier` items and the
        input items in order, a run of function calls joined to the assistant message before it (or
        one of their own)."""
        messages: list[dict[str, Any]] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        for item in (*earlier, *self.items):
            if isinstance(item, InputMessage):
                messages.append({"role": item.role, "content": item.text})
            elif isinstance(item, FunctionCallItem):
                function = {"name": item.name, "arguments": item.arguments}
                call: dict[str, Any] = {"id": item.call_id, "type": "function", "function": function}
                last = messages[-1] if messages else None
                if last is None or last["role"] != "assistant":
                    last = {"role": "assistant", "content": None}
                    messages.append(last)
                last.setdefault("tool_calls", []).append(call)
            elif isinstance(item, FunctionCallOutputItem):
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        return messages
