"""OpenAI's newer service fields, as the `openai` SDK types them, against the real gateway and verifier
(conftest.py): prompt-cache hints and stream obfuscation change nothing of the reply, verbosity is
served at OpenAI's default only, and what is not implemented is a 400 naming the field
(gateway/service_hints.py)."""

from __future__ import annotations

import openai
import pytest

from tests.services.gateway_stack import HI, MODEL

pytestmark = pytest.mark.slow


def test_chat_hints_change_nothing_of_the_reply(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0)
    hinted = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}],
        max_tokens=6,
        temperature=0,
        prompt_cache_key="tenant-7",
        prompt_cache_retention="24h",
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
        verbosity="medium",
    )
    assert hinted.choices[0].message.content == plain.choices[0].message.content != ""


def test_a_stream_without_obfuscation_is_the_plain_stream(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=HI,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True, "include_obfuscation": False},
        )
    )
    whole = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    assert all(c.obfuscation is None for c in chunks)  # no padding field (the SDK types it)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"verbosity": "low"}, "verbosity"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"prompt_cache_options": {"prewarm": True}}, "prompt_cache_options.prewarm"),
    ],
)
def test_chat_refuses_what_it_does_not_implement(
    client: openai.OpenAI, fields: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, extra_body=fields)
    assert caught.value.param == param
    assert caught.value.code == "unsupported_parameter"


def test_responses_take_the_hints_and_echo_the_verbosity(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}],
        max_output_tokens=8,
        temperature=0,
        prompt_cache_retention="in_memory",
        text={"verbosity": "medium"},
    )
    assert response.status in ("completed", "incomplete") and response.output_text != ""
    assert response.text is not None and response.text.verbosity == "medium"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=4, text={"verbosity": "low"})
    assert caught.value.code == "unsupported_parameter"
