"""The chat template: the server's own (`--chat-template`, a file or the template itself) replaces the
model's; a request's own (`chat_template`) is taken only from a server that trusts them, and a
template that does not parse is refused where it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.gateway.chat_template import TemplateOptions, load_chat_template, request_template
from treespec.gateway.errors import APIError
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.model.store import models_dir, resolve_model_path

PLAIN = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
MESSAGES = [{"role": "user", "content": "Hi"}]


def test_the_server_template_is_a_file_or_the_template_itself(tmp_path: Path) -> None:
    path = tmp_path / "plain.jinja"
    path.write_text(PLAIN)
    assert load_chat_template(str(path)) == PLAIN
    assert load_chat_template(PLAIN) == PLAIN
    with pytest.raises(ValueError, match="neither a file nor a Jinja template"):
        load_chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="does not parse"):
        load_chat_template("{% for m in messages %}")


def test_the_server_template_replaces_the_model_s() -> None:
    model = resolve_model_path(None, models_dir())
    tokenizer = PromptTokenizer(model, load_chat_template(PLAIN))
    assert tokenizer.decode(tokenizer.chat_prompt(MESSAGES)) == "user: Hi\nassistant:"
    own = PromptTokenizer(model)
    assert "<|im_start|>" in own.decode(own.chat_prompt(MESSAGES), skip_special_tokens=False)
    request_own = own.chat_prompt(MESSAGES, TemplateOptions(chat_template=PLAIN))
    assert own.decode(request_own) == "user: Hi\nassistant:"


def test_a_request_s_template_needs_a_trusting_server_and_must_parse() -> None:
    assert request_template(None, trusted=False) is None
    assert request_template(PLAIN, trusted=True) == PLAIN
    for template, trusted, says in ((PLAIN, False, "--trust-request-chat-template"), ("{{", True, "parse")):
        with pytest.raises(APIError) as refused:
            request_template(template, trusted)
        assert (refused.value.status, refused.value.param) == (400, "chat_template")
        assert says in refused.value.message


def test_a_template_that_fails_while_rendering_is_a_400_naming_it() -> None:
    tokenizer = PromptTokenizer(resolve_model_path(None, models_dir()))
    failing = "{{ raise_exception('no system messages') }}"
    with pytest.raises(APIError) as refused:
        tokenizer.chat_prompt(MESSAGES, TemplateOptions(chat_template=failing))
    assert refused.value.param == "chat_template" and "no system messages" in refused.value.message
