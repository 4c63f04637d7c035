"""Prompts to token ids with the served model's own tokenizer and chat template (transformers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import transformers
from tokenizers import Tokenizer

from treespec.gateway.chat_template import TemplateOptions
from treespec.gateway.errors import APIError
from treespec.gateway.token_text import TokenTexts


class PromptTokenizer:
    def __init__(self, model_path: Path, chat_template: str | None = None) -> None:
        """`chat_template`: the server's own (None: the model's)."""
        self._hf = transformers.AutoTokenizer.from_pretrained(model_path)
        if chat_template is not None:
            self._hf.chat_template = chat_template
        self.token_texts = TokenTexts(self.backend)  # for log-probabilities

    @property
    def backend(self) -> Tokenizer:
        """The `tokenizers` tokenizer underneath (what DecodeStream decodes with)."""
        backend: Tokenizer = self._hf.backend_tokenizer
        return backend

    def chat_prompt(
        self, messages: list[dict[str, Any]], options: TemplateOptions | None = None
    ) -> list[int]:
        """The chat template applied to `messages` as `options` say (chat_template.py; None: the
        defaults, the assistant's turn opened at the end)."""
        options = options or TemplateOptions()
        template_tools: list[Any] | None = options.tools
        try:
            text = self._hf.apply_chat_template(
                messages,
                tools=template_tools,
                documents=options.documents,
                chat_template=options.chat_template,
                add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                tokenize=False,
                **(options.template_kwargs or {}),
            )
        except (jinja2.TemplateError, ValueError) as exc:
            param = "chat_template" if options.chat_template is not None else "messages"
            raise APIError(400, f"The chat template refused the messages: {exc}", param=param) from exc
        return list(self._hf.encode(str(text), add_special_tokens=options.add_special_tokens))

    def text_prompt(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=add_special_tokens))

    def raw_prompts(self, prompts: list[str | list[int]]) -> list[list[int]]:
        """Prompts without a chat template (completions, SGLang's /generate): text tokenized, token
        ids as given."""
        return [self.text_prompt(p) if isinstance(p, str) else p for p in prompts]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self._hf.decode(token_ids, skip_special_tokens=skip_special_tokens))
