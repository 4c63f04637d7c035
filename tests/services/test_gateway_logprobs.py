"""Log-probabilities through the OpenAI API (`logprobs`, `top_logprobs`; completions' `logprobs`): the
target's own figures (checked against HF transformers), streamed or whole, with a speculating verifier
(random drafts) behind the gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
import transformers

from tests.services.gateway_stack import HI, MODEL
from treespec.gateway.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow

NEW = 8


def _hf_greedy(model_path: Path, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """HF's greedy continuation and the log-softmax rows its tokens came from."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
        logits = hf(torch.tensor([ids])).logits[0, len(prompt) - 1 : -1]
    return ids[len(prompt) :], torch.log_softmax(logits.float(), dim=-1)


def test_chat_logprobs_are_the_models(
    client: openai.OpenAI, tokenizer: PromptTokenizer, model_path: Path
) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=NEW,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body={"ignore_eos": True},
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    tokens, want = _hf_greedy(
        model_path, tokenizer.chat_prompt([{"role": "user", "content": "Say hello."}]), NEW
    )
    assert len(content) == NEW
    assert b"".join(bytes(t.bytes or []) for t in content) == tokenizer.decode(tokens).encode()
    assert choice.message.content == tokenizer.decode(tokens)
    for entry, token, row in zip(content, tokens, want, strict=True):
        assert entry.logprob == pytest.approx(float(row[token]), abs=2e-3)
        top = row.topk(3)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(top.values.tolist(), abs=2e-3)
        assert entry.top_logprobs[0].token == entry.token  # greedy: the most likely token


def test_streamed_logprobs_equal_the_whole_reply(client: openai.OpenAI) -> None:
    fields = {"max_tokens": NEW, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    whole = client.chat.completions.create(model=MODEL, messages=HI, **fields)  # type: ignore[call-overload]
    stream = client.chat.completions.create(model=MODEL, messages=HI, stream=True, **fields)  # type: ignore[call-overload]
    streamed, text = [], ""
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None and choice.logprobs.content:
                streamed += choice.logprobs.content
    assert whole.choices[0].logprobs is not None
    assert [(t.token, t.bytes) for t in streamed] == [
        (t.token, t.bytes) for t in whole.choices[0].logprobs.content or []
    ]
    assert text == whole.choices[0].message.content
    assert all(len(t.top_logprobs) == 2 for t in streamed)


def test_no_logprobs_unless_asked(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3, temperature=0)
    assert reply.choices[0].logprobs is None
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=3, logprobs=True)
    content = reply.choices[0].logprobs.content if reply.choices[0].logprobs else None
    assert content and all(t.top_logprobs == [] for t in content)  # sampled: any token, its own figure


def test_completion_logprobs_and_offsets_with_a_stop_string(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0, logprobs=2, stop=[" 6"]
    )
    choice = reply.choices[0]
    lp = choice.logprobs
    assert choice.finish_reason == "stop" and lp is not None
    assert lp.tokens is not None and lp.token_logprobs is not None and lp.top_logprobs is not None
    assert lp.text_offset is not None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset)
    # The tokens spell the text, then the stop string it was cut before; each sits at its offset.
    spelled = "".join(lp.tokens)
    assert spelled.startswith(choice.text) and spelled[len(choice.text) :].strip() == "6"
    assert lp.text_offset == [len("".join(lp.tokens[:k])) for k in range(len(lp.tokens))]
    # greedy: the chosen token is the likeliest of the two asked for (OpenAI: up to logprobs + 1)
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert top is not None and len(top) == 2 and max(top.values()) <= 0.0
        assert top[token] == logprob == max(top.values())


def test_completion_logprobs_zero_give_the_chosen_tokens_alone(client: openai.OpenAI) -> None:
    """`logprobs: 0` (OpenAI, vLLM): no alternatives, but each chosen token's own figure."""
    reply = client.completions.create(model=MODEL, prompt="Once", max_tokens=4, temperature=1, logprobs=0)
    lp = reply.choices[0].logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs and lp.top_logprobs
    assert lp.top_logprobs == [{t: v} for t, v in zip(lp.tokens, lp.token_logprobs, strict=True)]


def test_echo_with_logprobs_scores_the_prompt(
    client: openai.OpenAI, tokenizer: PromptTokenizer, model_path: Path
) -> None:
    """What lm-evaluation-harness asks for loglikelihood tasks: the prompt echoed with its tokens'
    log-probabilities (none for the first), then one token."""
    prompt = "The capital of France is"
    reply = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=1, temperature=0, logprobs=1, echo=True
    )
    choice = reply.choices[0]
    lp = choice.logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs and lp.top_logprobs and lp.text_offset
    ids = tokenizer.text_prompt(prompt)
    assert choice.text.startswith(prompt) and len(choice.text) > len(prompt)
    assert len(lp.tokens) == len(ids) + 1 and "".join(lp.tokens) == choice.text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.text_offset == [len("".join(lp.tokens[:k])) for k in range(len(lp.tokens))]
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        rows = torch.log_softmax(hf(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    expected = rows.gather(1, torch.tensor(ids[1:]).view(-1, 1)).squeeze(1).tolist()
    assert lp.token_logprobs[1 : len(ids)] == pytest.approx(expected, abs=2e-3)
    # the likeliest token, and the prompt's own where it is not that one (OpenAI: up to logprobs + 1)
    scored = lp.tokens[1 : len(ids)], lp.token_logprobs[1 : len(ids)], lp.top_logprobs[1 : len(ids)], rows
    for token, logprob, top, row in zip(*scored, strict=True):
        assert top is not None and top[token] == logprob
        assert len(top) == (1 if logprob == max(top.values()) else 2)
        assert max(top.values()) == pytest.approx(float(row.max()), abs=2e-3)


def test_echo_without_logprobs_and_streamed(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, temperature=0, echo=True)
    assert whole.choices[0].text.startswith("Hello") and whole.choices[0].logprobs is None
    stream = client.completions.create(
        model=MODEL, prompt="Hello", max_tokens=3, temperature=0, echo=True, stream=True
    )
    texts = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert texts[0] == "Hello" and "".join(texts) == whole.choices[0].text


def test_max_tokens_0_with_echo_scores_the_prompt_alone(client: openai.OpenAI, http: httpx.Client) -> None:
    """OpenAI's legacy prompt scoring (and older lm-evaluation-harness's loglikelihood payload):
    `max_tokens: 0` with `echo` sends the prompt back with its tokens' log-probabilities, the same
    as with one token generated, and nothing after it; without echo it is a 400."""
    prompt = "The capital of France is"
    scored = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, logprobs=1, echo=True)
    one = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=1, temperature=0, logprobs=1, echo=True
    )
    choice, lp, lp_one = scored.choices[0], scored.choices[0].logprobs, one.choices[0].logprobs
    assert choice.text == prompt and choice.finish_reason == "length"
    assert lp is not None and lp_one is not None and lp_one.tokens and lp_one.token_logprobs
    assert lp.tokens == lp_one.tokens[:-1] and lp.token_logprobs == lp_one.token_logprobs[:-1]
    assert scored.usage is not None and one.usage is not None
    assert (scored.usage.completion_tokens, scored.usage.prompt_tokens) == (0, one.usage.prompt_tokens)
    streamed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == prompt
    refused = http.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 0})
    error = refused.json()["error"]
    assert refused.status_code == 400 and "'max_tokens' 0" in error["message"] and error["param"] == "echo"


def test_lm_evaluation_harness_loglikelihood_requests(
    client: openai.OpenAI, tokenizer: PromptTokenizer, model_path: Path
) -> None:
    """lm-evaluation-harness's `local-completions` loglikelihood payload, as it sends it: a batch of
    token-id prompts (context + continuation), max_tokens 1, logprobs 1, echo, temperature 0, a seed.
    It reads token_logprobs[ctxlen:-1] and compares each with the best of top_logprobs (greedy)."""
    context = tokenizer.text_prompt("The capital of France is")
    continuations = [tokenizer.text_prompt(" Paris")[-1:], tokenizer.text_prompt(" a banana")[-2:]]
    prompts = [context + c for c in continuations]
    reply = client.completions.create(
        model=MODEL, prompt=prompts, max_tokens=1, logprobs=1, echo=True, temperature=0, seed=1234
    )
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    ctxlen = len(context)
    totals: list[float] = []
    for choice, ids in zip(sorted(reply.choices, key=lambda c: c.index), prompts, strict=True):
        lp = choice.logprobs
        assert lp is not None and lp.token_logprobs is not None and lp.top_logprobs is not None
        got = [float(x) for x in lp.token_logprobs[ctxlen:-1] if x is not None]
        tops = lp.top_logprobs[ctxlen:-1]
        totals.append(sum(got))
        with torch.no_grad():
            rows = torch.log_softmax(hf(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
        want = rows.gather(1, torch.tensor(ids[1:]).view(-1, 1)).squeeze(1)[ctxlen - 1 :]
        assert got == pytest.approx(want.tolist(), abs=2e-3)
        greedy = all(top is not None and tok == max(top.values()) for tok, top in zip(got, tops, strict=True))
        assert greedy == bool((rows[ctxlen - 1 :].argmax(-1) == torch.tensor(ids[ctxlen:])).all())
    assert totals[0] > totals[1]  # " Paris" is the likelier continuation


def test_return_tokens_as_token_ids_names_each_token_by_its_id(
    client: openai.OpenAI, tokenizer: PromptTokenizer
) -> None:
    """vLLM's `return_tokens_as_token_ids`: "token_id:N" for every token and alternative, naming the
    token whose text the plain reply shows, with the same figures, bytes and text offsets; chat and
    completions, whole and streamed."""
    by_id = {"return_tokens_as_token_ids": True}
    chat: Any = {"model": MODEL, "messages": HI, "max_tokens": NEW, "temperature": 0, "logprobs": True}
    chat["top_logprobs"] = 2
    plain = client.chat.completions.create(**chat).choices[0].logprobs
    named = client.chat.completions.create(**chat, extra_body=by_id).choices[0].logprobs
    assert plain is not None and named is not None and plain.content and named.content

    def text_of(name: str) -> str:
        prefix, _, token_id = name.partition(":")
        assert prefix == "token_id"
        return tokenizer.token_texts.text_of(int(token_id))

    assert len(named.content) == len(plain.content)
    for a, b in zip(named.content, plain.content, strict=True):
        assert text_of(a.token) == b.token and (a.logprob, a.bytes) == (b.logprob, b.bytes)
        assert [text_of(t.token) for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
    streamed = [
        t.token
        for chunk in client.chat.completions.create(**chat, stream=True, extra_body=by_id)
        for choice in chunk.choices
        if choice.logprobs is not None
        for t in choice.logprobs.content or []
    ]
    assert streamed == [t.token for t in named.content]
    fields: Any = {
        "model": MODEL,
        "prompt": "Count: 1, 2, 3,",
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": 1,
    }
    text = client.completions.create(**fields).choices[0].logprobs
    lp = client.completions.create(**fields, extra_body=by_id).choices[0].logprobs
    assert lp is not None and text is not None and lp.tokens and text.tokens and lp.top_logprobs
    assert [text_of(t) for t in lp.tokens] == text.tokens
    assert lp.text_offset == text.text_offset and lp.token_logprobs == text.token_logprobs
    assert [{text_of(k): v for k, v in top.items()} for top in lp.top_logprobs] == text.top_logprobs


def test_vllm_prompt_logprobs_score_the_prompt_with_ranks(
    client: openai.OpenAI, tokenizer: PromptTokenizer, model_path: Path
) -> None:
    """vLLM's `prompt_logprobs`: per prompt token (None for the first) the token's own entry, with its
    rank in the vocabulary, then the most likely alternatives; on a completion's choice, or at the top
    of a chat completion. Echo keeps its own number of alternatives."""
    prompt = "The capital of France is"
    ids = tokenizer.text_prompt(prompt)
    reply = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=1,
        temperature=0,
        logprobs=1,
        echo=True,
        extra_body={"prompt_logprobs": 3},
    )
    choice = reply.choices[0]
    scored: list[Any] = (choice.model_extra or {})["prompt_logprobs"]
    assert len(scored) == len(ids) and scored[0] is None
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        rows = torch.log_softmax(hf(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    for token, entry, row in zip(ids[1:], scored[1:], rows, strict=True):
        own = entry[str(token)]
        assert own["logprob"] == pytest.approx(float(row[token]), abs=2e-3)
        assert own["rank"] == int((row > row[token]).sum()) + 1
        assert own["decoded_token"] == tokenizer.decode([token])
        # the three most likely, and the prompt's token where it is not one of them
        assert sorted(e["rank"] for e in entry.values()) == sorted({1, 2, 3, own["rank"]})
    lp = choice.logprobs
    assert lp is not None and lp.top_logprobs is not None
    # echo: its own `logprobs` (1), and the chosen token where it is not the likeliest
    assert all(top is None or len(top) in (1, 2) for top in lp.top_logprobs)
    chat = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=2, temperature=0, n=2, extra_body={"prompt_logprobs": 0}
    )
    chat_scored: list[Any] = (chat.model_extra or {})["prompt_logprobs"]
    assert chat.usage is not None and len(chat_scored) == chat.usage.prompt_tokens
    assert chat_scored[0] is None and all(len(entry) == 1 for entry in chat_scored[1:])
    plain = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert (plain.model_extra or {}).get("prompt_logprobs") is None
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=2, stream=True, extra_body={"prompt_logprobs": 1}
        )
