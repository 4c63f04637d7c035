"""vLLM's and OpenAI's request fields beyond the basics, through the official `openai` client against
the real gateway and verifier (conftest.py): `reasoning_effort`, `continue_final_message` and chat
`echo`, `stream_options.continuous_usage_stats`, `truncate_prompt_tokens`, `request_id`,
`return_token_ids`; SGLang's `stop_regex`, its
names for vLLM's fields and vLLM's beam-search switches."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.services.gateway_stack import COUNTING, HI, MODEL
from treespec.gateway.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow


def test_reasoning_effort_is_a_template_variable(client: openai.OpenAI) -> None:
    """The SDK's `reasoning_effort` reaches the chat template; SmolLM2's reads no such variable, so the
    prompt and the greedy reply are those without it; a value OpenAI does not know is a 400."""
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0)
    low = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=6, temperature=0, reasoning_effort="low"
    )
    assert low.choices[0].message.content == plain.choices[0].message.content
    assert low.usage is not None and plain.usage is not None
    # The same prompt (the second run finds it in the prefix cache, so only the counts are compared).
    assert (low.usage.prompt_tokens, low.usage.completion_tokens) == (
        plain.usage.prompt_tokens,
        plain.usage.completion_tokens,
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=6, extra_body={"reasoning_effort": "extreme"}
        )
    assert caught.value.param == "reasoning_effort"


def test_continue_final_message_continues_the_assistant_s_reply(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """vLLM's `continue_final_message`: the prompt ends inside the assistant's begun reply, and the
    reply holds only what the model wrote after it: the completion of those very prompt tokens."""
    begun: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Count from one to ten."},
        {"role": "assistant", "content": "1, 2, 3, 4,"},
    ]
    ids = http.post("/tokenize", json={"messages": begun, "continue_final_message": True}).json()["tokens"]
    reply = client.chat.completions.create(
        model=MODEL, messages=begun, max_tokens=6, temperature=0, extra_body={"continue_final_message": True}
    )
    completion = client.completions.create(model=MODEL, prompt=ids, max_tokens=6, temperature=0)
    assert reply.choices[0].message.content == completion.choices[0].text != ""
    assert reply.usage is not None and reply.usage.prompt_tokens == len(ids)
    opened = http.post("/tokenize", json={"messages": begun}).json()["tokens"]
    # vLLM's `echo`: the reply starts with the begun one, whole and streamed.
    echo: Any = {"continue_final_message": True, "echo": True}
    whole = client.chat.completions.create(
        model=MODEL, messages=begun, max_tokens=6, temperature=0, extra_body=echo
    )
    assert whole.choices[0].message.content == "1, 2, 3, 4," + completion.choices[0].text
    streamed = client.chat.completions.create(
        model=MODEL, messages=begun, max_tokens=6, temperature=0, stream=True, extra_body=echo
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        == whole.choices[0].message.content
    )
    # By default the reply is closed and a new turn opened after the same tokens.
    assert opened[: len(ids)] == ids and len(opened) > len(ids)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=begun,
            max_tokens=2,
            extra_body={"continue_final_message": True, "add_generation_prompt": True},
        )
    assert "continue_final_message" in caught.value.message


def test_continuous_usage_stats_put_each_choice_s_usage_in_every_chunk(
    client: openai.OpenAI, tokenizer: PromptTokenizer
) -> None:
    """vLLM's `stream_options.continuous_usage_stats`: with include_usage, every chunk carries its
    choice's usage so far, rising to what the choice ends with; the last chunk still holds the
    request's total (both choices)."""
    options: Any = {"include_usage": True, "continuous_usage_stats": True}
    prompt_tokens = len(tokenizer.text_prompt(COUNTING))
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=COUNTING,
            max_tokens=5,
            n=2,
            seed=1,
            stream=True,
            stream_options=options,
            extra_body={"ignore_eos": True},
        )
    )
    *per_choice, total = chunks
    assert total.choices == [] and total.usage is not None and total.usage.completion_tokens == 10
    for index in (0, 1):
        counts = []
        for c in per_choice:
            if c.choices[0].index == index:
                assert c.usage is not None and c.usage.prompt_tokens == prompt_tokens
                assert c.usage.total_tokens == prompt_tokens + c.usage.completion_tokens
                counts.append(c.usage.completion_tokens)
        assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] == 5
    chat = list(
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=4, temperature=0, stream=True, stream_options=options
        )
    )
    assert chat[0].usage is not None and chat[0].usage.completion_tokens == 0  # the role's chunk
    assert chat[-2].choices[0].finish_reason and chat[-2].usage == chat[-1].usage
    # include_usage alone: the total at the end, none in between
    plain = list(
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.usage is None for c in plain[:-1]) and plain[-1].usage is not None


def test_truncate_prompt_tokens_keeps_the_prompt_s_last_tokens(
    client: openai.OpenAI, tokenizer: PromptTokenizer
) -> None:
    """vLLM's `truncate_prompt_tokens`: the completion of the prompt's last N tokens, and its usage."""
    ids = tokenizer.text_prompt(COUNTING)
    cut = client.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=4, temperature=0, extra_body={"truncate_prompt_tokens": 4}
    )
    tail = client.completions.create(model=MODEL, prompt=ids[-4:], max_tokens=4, temperature=0)
    assert cut.choices[0].text == tail.choices[0].text
    assert cut.usage is not None and cut.usage.prompt_tokens == 4
    chat = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=2, temperature=0, extra_body={"truncate_prompt_tokens": 6}
    )
    assert chat.usage is not None and chat.usage.prompt_tokens == 6


def test_a_priority_reaches_the_verifier(http: httpx.Client) -> None:
    """vLLM's `priority` goes to the verifier, whose first come, first served policy (the default)
    takes only 0: a clear 400 says which policy takes others (test_engine_priority.py runs it)."""
    body = {"model": MODEL, "prompt": COUNTING, "max_tokens": 2}
    assert http.post("/v1/completions", json={**body, "priority": 0}).status_code == 200
    for path, extra in (
        ("/v1/completions", body),
        ("/generate", {"text": COUNTING}),
        ("/v1/responses", {"model": MODEL, "input": "hi"}),
    ):
        refused = http.post(path, json={**extra, "priority": 3})
        assert (
            refused.status_code == 400
            and "--scheduling-policy priority" in refused.json()["error"]["message"]
        )


def test_a_request_id_names_the_response(client: openai.OpenAI) -> None:
    """vLLM's `request_id`: the response's id is the endpoint's prefix and it; two requests sent at
    once under the same id both run (the verifier's own ids stay unique)."""
    import concurrent.futures

    def chat(_: int) -> Any:
        return client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=4, temperature=0, extra_body={"request_id": "job-7"}
        )

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(chat, range(2)))
    assert [r.id for r in replies] == ["chatcmpl-job-7"] * 2
    assert replies[0].choices[0].message.content == replies[1].choices[0].message.content
    completion = client.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=2, extra_body={"request_id": "job-8"}
    )
    assert completion.id == "cmpl-job-8"
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=2, extra_body={"request_id": ""})
    assert caught.value.param == "request_id"


def test_sglang_s_names_and_vllm_s_switches_are_taken(client: openai.OpenAI) -> None:
    """A client written for SGLang or vLLM runs unchanged: SGLang's `rid` names the response,
    `no_stop_trim` keeps the stop string and `regex` constrains the output, as vLLM's fields do; vLLM's
    beam-search switches at their "off" values, `spaces_between_special_tokens` and
    `guided_decoding_backend` change nothing."""
    reply = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=4, temperature=0, extra_body={"rid": "sgl-3"}
    )
    assert reply.id == "chatcmpl-sgl-3"
    fields: dict[str, Any] = {
        "model": MODEL,
        "prompt": COUNTING,
        "max_tokens": 12,
        "temperature": 0,
        "stop": [" 7"],
    }
    kept = client.completions.create(**fields, extra_body={"no_stop_trim": True}).choices[0].text
    assert (
        kept
        == client.completions.create(**fields, extra_body={"include_stop_str_in_output": True})
        .choices[0]
        .text
    )
    assert kept.endswith(" 7") and kept[:-2] == client.completions.create(**fields).choices[0].text
    numbers = client.completions.create(
        model=MODEL,
        prompt="My phone number is",
        max_tokens=16,
        temperature=0,
        extra_body={"regex": "[0-9]{3}-[0-9]{4}"},
    ).choices[0]
    assert re.fullmatch("[0-9]{3}-[0-9]{4}", numbers.text) and numbers.finish_reason == "stop"
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=6, temperature=0)
    switches = {
        "use_beam_search": False,
        "length_penalty": 1.0,
        "spaces_between_special_tokens": False,
        "guided_decoding_backend": "outlines",
    }
    same = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=6, temperature=0, extra_body=switches
    )
    assert same.choices[0].message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=6, extra_body={"use_beam_search": True}
        )
    assert caught.value.code == "unsupported_parameter" and caught.value.param == "use_beam_search"


def test_return_token_ids_gives_the_prompt_s_and_the_output_s_tokens(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """vLLM's `return_token_ids`: the prompt's ids are /tokenize's, the output's decode to its text
    (with its end token), whole and streamed alike; without it there are none."""
    ids = http.post("/tokenize", json={"model": MODEL, "messages": HI}).json()["tokens"]
    fields: dict[str, Any] = {"model": MODEL, "messages": HI, "max_tokens": 12, "temperature": 0}
    whole = client.chat.completions.create(**fields, extra_body={"return_token_ids": True})
    extra = whole.model_extra or {}
    output = (whole.choices[0].model_extra or {})["token_ids"]
    assert extra["prompt_token_ids"] == ids and 0 < len(output) <= 12
    text = http.post("/detokenize", json={"model": MODEL, "tokens": output}).json()["prompt"]
    assert text.startswith(whole.choices[0].message.content or "")
    chunks = list(
        client.chat.completions.create(**fields, stream=True, extra_body={"return_token_ids": True})
    )
    assert [(c.model_extra or {}).get("prompt_token_ids") for c in chunks[:1]] == [ids]
    assert all((c.model_extra or {}).get("prompt_token_ids") is None for c in chunks[1:])
    streamed = [
        t for c in chunks for choice in c.choices for t in (choice.model_extra or {}).get("token_ids") or []
    ]
    assert streamed == output
    plain = client.chat.completions.create(**fields)
    assert (plain.model_extra or {}).get("prompt_token_ids") is None
    assert (plain.choices[0].model_extra or {}).get("token_ids") is None

    prompt_ids = http.post("/tokenize", json={"model": MODEL, "prompt": COUNTING}).json()["tokens"]
    counting: dict[str, Any] = {"model": MODEL, "prompt": COUNTING, "max_tokens": 6, "temperature": 0}
    completion = client.completions.create(**counting, n=2, extra_body={"return_token_ids": True})
    for choice in completion.choices:
        extra = choice.model_extra or {}
        assert extra["prompt_token_ids"] == prompt_ids and len(extra["token_ids"]) == 6
    stream = client.completions.create(**counting, stream=True, extra_body={"return_token_ids": True})
    got: list[int] = []
    for i, chunk in enumerate(stream):
        extra = chunk.choices[0].model_extra or {}
        assert (extra.get("prompt_token_ids") == prompt_ids) == (i == 0)
        got += extra.get("token_ids") or []
    assert got == (completion.choices[0].model_extra or {})["token_ids"]


def test_a_stop_regex_ends_the_output_where_its_match_starts(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """SGLang's `stop_regex` (chat, completions and /generate alike): the text ends right before the
    first match (with `no_stop_trim`, right after it), whole and streamed; a bad pattern is a 400."""
    counting: dict[str, Any] = {"model": MODEL, "prompt": COUNTING, "max_tokens": 16, "temperature": 0}
    full = client.completions.create(**counting).choices[0].text
    match = re.search(r"[6-9],", full)
    assert match is not None
    cut = client.completions.create(**counting, extra_body={"stop_regex": [r"[6-9],"]}).choices[0]
    assert (cut.text, cut.finish_reason) == (full[: match.start()], "stop")
    streamed = client.completions.create(**counting, stream=True, extra_body={"stop_regex": r"[6-9],"})
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.text
    kept = client.completions.create(**counting, extra_body={"stop_regex": r"[6-9],", "no_stop_trim": True})
    assert kept.choices[0].text == full[: match.end()]
    native = http.post(
        "/generate",
        json={
            "text": COUNTING,
            "sampling_params": {"max_new_tokens": 16, "temperature": 0, "stop_regex": r"[6-9],"},
        },
    ).json()
    assert native["text"] == cut.text and native["meta_info"]["finish_reason"]["type"] == "stop"
    for bad in ("(unclosed", r"\d*"):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(**counting, extra_body={"stop_regex": bad})
        assert caught.value.param == "stop_regex"
