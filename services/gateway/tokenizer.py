"""Prompts to token ids with the served model's own tokenizer and chat template (transformers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import transformers
from tokenizers import Tokenizer

from treespec.gateway.errors import APIError
from treespec.gateway.token_text import TokenTexts


class PromptTokenizer:
    def __init__(self, model_path: Path) -> None:
        self._hf = transformers.AutoTokenizer.from_pretrained(model_path)
        self.token_texts = TokenTexts(self.backend)  # for log-probabilities

    @property
    def backend(self) -> Tokenizer:
        """The `tokenizers` tokenizer underneath (what DecodeStream decodes with)."""
        backend: Tokenizer = self._hf.backend_tokenizer
        return backend

    def chat_prompt(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: dict[str, Any] | None = None,
        continue_final_message: bool = False,
        documents: list[dict[str, str]] | None = None,
        add_special_tokens: bool = False,
    ) -> list[int]:
        """The chat template applied to `messages` (and `tools`, for a template that renders them),
        ending with the assistant's turn opened (unless not `add_generation_prompt`), or inside the
        final message, left open for the model to continue (`continue_final_message`);
        `template_kwargs`: more variables for the template (`chat_template_kwargs`); `documents`: for
        a retrieval-augmented template (Command R's, Granite's), as vLLM passes them;
        `add_special_tokens`: the tokenizer's own special tokens (a BOS) added on top of the
        template's text (vLLM's; off by default: the template writes them)."""
        template_tools: list[Any] | None = tools
        try:
            text = self._hf.apply_chat_template(
                messages,
                tools=template_tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tokenize=False,
                **(template_kwargs or {}),
            )
        except (jinja2.TemplateError, ValueError) as exc:
            raise APIError(400, f"The chat template refused the messages: {exc}", param="messages") from exc
        return list(self._hf.encode(str(text), add_special_tokens=add_special_tokens))

    def text_prompt(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=add_special_tokens))

    def raw_prompts(self, prompts: list[str | list[int]]) -> list[list[int]]:
        """Prompts without a chat template (completions, SGLang's /generate): text tokenized, token
        ids as given."""
        return [self.text_prompt(p) if isinstance(p, str) else p for p in prompts]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self._hf.decode(token_ids, skip_special_tokens=skip_special_tokens))
