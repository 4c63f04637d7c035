"""The chat template through the real gateway and verifier, with the OpenAI SDK: a gateway started
with `--chat-template FILE` renders every chat (generation and /tokenize) with it, and with
`--trust-request-chat-template` a request's own `chat_template` too; a gateway that does not trust
them answers a 400 naming `chat_template`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.services.gateway_stack import KEY, MODEL, chat_body, start_gateway
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

PLAIN = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
SHOUTING = "{% for m in messages %}{{ m.content | upper }}\n{% endfor %}ANSWER:"
MESSAGES: list[Any] = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def templated(model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("templated")
    (folder / "plain.jinja").write_text(PLAIN)
    port = free_port()
    flags = ("--chat-template", str(folder / "plain.jinja"), "--trust-request-chat-template")
    service = start_gateway(model_path, verifier, port, folder, (KEY,), flags)
    yield f"http://127.0.0.1:{port}"
    service.stop()


def _prompt_tokens(client: openai.OpenAI, **fields: Any) -> int:
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, **fields)
    assert reply.usage is not None
    return reply.usage.prompt_tokens


def test_the_server_s_template_and_a_request_s_render_the_chat(
    templated: str, tokenizer: PromptTokenizer
) -> None:
    client = openai.OpenAI(base_url=f"{templated}/v1", api_key=KEY, max_retries=0)
    headers = {"Authorization": f"Bearer {KEY}"}
    tokenized = httpx.post(f"{templated}/tokenize", json={"messages": MESSAGES}, headers=headers).json()
    assert tokenizer.decode(tokenized["tokens"]) == "user: Name a colour.\nassistant:"
    assert _prompt_tokens(client) == tokenized["count"]
    own = {"messages": MESSAGES, "chat_template": SHOUTING}
    shouted = httpx.post(f"{templated}/tokenize", json=own, headers=headers).json()
    assert tokenizer.decode(shouted["tokens"]) == "NAME A COLOUR.\nANSWER:"
    assert _prompt_tokens(client, extra_body={"chat_template": SHOUTING}) == shouted["count"]
    broken = httpx.post(
        f"{templated}/v1/chat/completions", json=chat_body(chat_template="{% if %}"), headers=headers
    )
    assert broken.status_code == 400 and broken.json()["error"]["param"] == "chat_template"


def test_a_gateway_that_does_not_trust_request_templates_refuses_them(http: httpx.Client) -> None:
    for path, body in (("/v1/chat/completions", chat_body()), ("/tokenize", {"messages": MESSAGES})):
        refused = http.post(path, json={**body, "chat_template": SHOUTING})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["param"] == "chat_template" and "--trust-request-chat-template" in error["message"]
