"""The chat template: the model's own, the server's (`--chat-template`, vLLM's and SGLang's flag: a
file, or the template itself), or a request's own (`chat_template`, vLLM's field; only with
`--trust-request-chat-template`, for a template runs on the server). Transformers renders it in its
sandboxed Jinja environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, Field

from treespec.gateway.errors import APIError
from treespec.gateway.schema_types import STRICT

MAX_TEMPLATE_CHARS = 1 << 16  # a request's own template


@dataclass(frozen=True)
class TemplateOptions:
    """How messages are rendered, beside the messages themselves."""

    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True  # the assistant's turn opened at the end
    template_kwargs: dict[str, Any] | None = None  # more variables (`chat_template_kwargs`)
    continue_final_message: bool = False  # the final message left open for the model to continue
    documents: list[dict[str, str]] | None = None  # for a retrieval-augmented template
    add_special_tokens: bool = False  # the tokenizer's own (a BOS) on top of the template's text
    chat_template: str | None = None  # the request's own template (None: the server's)


class ChatTemplateField(BaseModel):
    """vLLM's request field: the request's own chat template."""

    model_config = STRICT
    chat_template: str | None = Field(default=None, max_length=MAX_TEMPLATE_CHARS)


def load_chat_template(value: str) -> str:
    """`--chat-template`'s value: the file it names, or else the template it is."""
    path = Path(value).expanduser()
    if path.is_file():
        template = path.read_text()
    elif "{{" in value or "{%" in value:
        template = value
    else:
        raise ValueError(f"--chat-template: {value!r} is neither a file nor a Jinja template")
    check_syntax(template)
    return template


def check_syntax(template: str) -> None:
    """A ValueError naming the first syntax error, if the template has one."""
    try:
        jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"the chat template does not parse (line {exc.lineno}): {exc.message}") from exc


def request_template(template: str | None, trusted: bool) -> str | None:
    """A request's own template, if the server takes them; a 400 naming `chat_template` otherwise."""
    if template is None:
        return None
    if not trusted:
        raise APIError(
            400,
            "This server does not take a chat template from requests (start it with "
            "--trust-request-chat-template to allow them).",
            code="invalid_value",
            param="chat_template",
        )
    try:
        check_syntax(template)
    except ValueError as exc:
        raise APIError(400, str(exc), code="invalid_value", param="chat_template") from exc
    return template
