"""`chat_template_kwargs` (vLLM's and SGLang's): more variables reach the chat template, such as Qwen3's
`enable_thinking`, whose template then closes the thinking in the prompt so that a constrained answer
is constrained from its first token (test_schemas.py: the template's own arguments cannot be set)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from treespec.gateway.chat_template import TemplateOptions
from treespec.gateway.reasoning_parsers.think import Qwen3Parser
from treespec.gateway.schemas import ChatCompletionRequest
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.model.store import models_dir, resolve_model_path

# Qwen3's way with thinking, and gpt-oss's reasoning effort, on SmolLM2's ChatML tokens.
THINKING_TEMPLATE = (
    "{% if documents %}<|im_start|>system\n"
    "{% for d in documents %}[{{ d.title }}] {{ d.text }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% if reasoning_effort is defined %}"
    "<|im_start|>system\nReasoning: {{ reasoning_effort }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


@pytest.fixture(scope="module")
def thinking_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> PromptTokenizer:
    source = resolve_model_path(None, models_dir())
    target = tmp_path_factory.mktemp("thinking-template")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, target / name)
    (target / "chat_template.jinja").write_text(THINKING_TEMPLATE)
    return PromptTokenizer(Path(target))


def test_template_kwargs_reach_the_template(thinking_tokenizer: PromptTokenizer) -> None:
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    thinking = thinking_tokenizer.decode(thinking_tokenizer.chat_prompt(messages), skip_special_tokens=False)
    ids = thinking_tokenizer.chat_prompt(
        messages, TemplateOptions(template_kwargs={"enable_thinking": False})
    )
    answering = thinking_tokenizer.decode(ids, skip_special_tokens=False)
    assert thinking.endswith("<|im_start|>assistant\n")
    assert answering == thinking + "<think>\n\n</think>\n\n"
    # So a constrained request's grammar holds from the first token when the thinking is off.
    assert Qwen3Parser().grammar_starts_after(thinking) == "</think>"
    assert Qwen3Parser().grammar_starts_after(answering) is None


def test_reasoning_effort_reaches_the_template(thinking_tokenizer: PromptTokenizer) -> None:
    """OpenAI's `reasoning_effort` is the template variable of that name, as gpt-oss's template reads it."""
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    fields = {"model": "m", "messages": messages, "reasoning_effort": "low"}
    body = ChatCompletionRequest.model_validate(fields)
    ids = thinking_tokenizer.chat_prompt(messages, TemplateOptions(template_kwargs=body.template_kwargs))
    prompt = thinking_tokenizer.decode(ids, skip_special_tokens=False)
    assert prompt.startswith("<|im_start|>system\nReasoning: low<|im_end|>\n<|im_start|>user\n")
    plain = thinking_tokenizer.decode(thinking_tokenizer.chat_prompt(messages), skip_special_tokens=False)
    assert "Reasoning" not in plain


def test_continue_final_message_leaves_the_reply_open(thinking_tokenizer: PromptTokenizer) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]
    ids = thinking_tokenizer.chat_prompt(
        messages, TemplateOptions(add_generation_prompt=False, continue_final_message=True)
    )
    assert thinking_tokenizer.decode(ids, skip_special_tokens=False).endswith(
        "<|im_start|>assistant\nThe answer is"
    )
    closed = thinking_tokenizer.decode(thinking_tokenizer.chat_prompt(messages), skip_special_tokens=False)
    assert closed.endswith("The answer is<|im_end|>\n<|im_start|>assistant\n")


def test_documents_reach_the_template(thinking_tokenizer: PromptTokenizer) -> None:
    """vLLM's `documents`, for retrieval-augmented templates (a template that does not read them
    renders as without them)."""
    messages = [{"role": "user", "content": "Where is the key?"}]
    documents = [{"title": "note", "text": "The key is under the mat."}]
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": messages, "documents": documents})
    ids = thinking_tokenizer.chat_prompt(messages, body.template_options(None))
    prompt = thinking_tokenizer.decode(ids, skip_special_tokens=False)
    assert prompt.startswith("<|im_start|>system\n[note] The key is under the mat.\n<|im_end|>\n")
    smol = PromptTokenizer(resolve_model_path(None, models_dir()))
    assert smol.chat_prompt(messages, TemplateOptions(documents=documents)) == smol.chat_prompt(messages)
    with pytest.raises(ValueError, match="documents"):
        ChatCompletionRequest.model_validate({"model": "m", "messages": messages, "documents": [{"t": 1}]})


def test_add_special_tokens_adds_the_tokenizer_s_own(tmp_path: Path) -> None:
    """vLLM's chat `add_special_tokens`: off by default (the template writes the special tokens);
    on, the tokenizer's own (here a BOS its post-processor adds) come on top of the template's text."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    source = resolve_model_path(None, models_dir())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, tmp_path / name)
    backend = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    bos = ("<|endoftext|>", backend.token_to_id("<|endoftext|>"))
    backend.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A $B", special_tokens=[bos]
    )
    backend.save(str(tmp_path / "tokenizer.json"))
    tokenizer = PromptTokenizer(tmp_path)
    messages = [{"role": "user", "content": "Hi"}]
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": messages, "add_special_tokens": True}
    )
    plain = tokenizer.chat_prompt(messages)
    assert tokenizer.chat_prompt(messages, body.template_options(None)) == [
        bos[1],
        *plain,
    ]
    assert plain[0] != bos[1]
