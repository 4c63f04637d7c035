"""The whole stack in separate processes, driven by the official OpenAI client."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest
import transformers
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.e2e.stack import Stack, start_stack
from treespec.bench.prompts import chat_prompt_ids
from treespec.shared.model.causal_lm import CausalLM
from treespec.v1 import verifier_pb2, verifier_pb2_grpc
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.slow
QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def stack(smollm_path: Path) -> Iterator[Stack]:
    running = start_stack(smollm_path)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_name(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def chat(client: openai.OpenAI, model: str, **kw: Any) -> ChatCompletion:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    return client.chat.completions.create(model=model, messages=messages, **{"temperature": 0.0, **kw})


def stream_chat(client: openai.OpenAI, model: str, **kw: Any) -> Iterator[ChatCompletionChunk]:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    yield from client.chat.completions.create(
        model=model, messages=messages, temperature=0.0, stream=True, **kw
    )


def verifier_stats(stack: Stack) -> verifier_pb2.EngineStats:
    with grpc.insecure_channel(stack.verifier_address) as channel:
        return verifier_pb2_grpc.VerifierStub(channel).GetStats(verifier_pb2.GetStatsRequest(), timeout=5)


def test_chat_non_streaming_with_usage(
    client: openai.OpenAI, model_name: str, tokenizer: transformers.PreTrainedTokenizerBase
) -> None:
    reply = chat(client, model_name, max_tokens=12)
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].message.content
    assert reply.choices[0].finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage is not None
    assert usage.prompt_tokens == len(chat_prompt_ids(tokenizer, QUESTION))
    assert (
        0 < usage.completion_tokens <= 12
        and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    )


def test_streaming_equals_non_streaming(client: openai.OpenAI, model_name: str) -> None:
    whole = chat(client, model_name, max_tokens=16)
    stream = stream_chat(client, model_name, max_tokens=16, stream_options={"include_usage": True})
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and whole.usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_completions_and_max_tokens(client: openai.OpenAI, model_name: str) -> None:
    reply = client.completions.create(
        model=model_name, prompt="The capital of France is", max_tokens=5, temperature=0
    )
    assert reply.choices[0].text and reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def test_stop_string_cuts_the_output(client: openai.OpenAI, model_name: str) -> None:
    full = chat(client, model_name, max_tokens=16).choices[0].message.content or ""
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), f"no usable stop string in {full!r}"
    cut = chat(client, model_name, max_tokens=16, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.message.content == full[: full.index(stop)]


def test_seed_reproduces_whatever_the_drafts(client: openai.OpenAI, model_name: str) -> None:
    """A seeded request samples by position: the random drafter's trees differ from call to call, and
    without speculation there are none, yet the text is the same."""
    kw: dict[str, Any] = dict(max_tokens=12, temperature=1.0, seed=1234)
    a = chat(client, model_name, **kw).choices[0].message.content
    b = chat(client, model_name, **kw).choices[0].message.content
    plain = chat(client, model_name, **kw, extra_body={"speculation": {"enabled": False}})
    assert a == b == plain.choices[0].message.content
    other = chat(client, model_name, **{**kw, "seed": 4321}).choices[0].message.content
    assert other != a


def test_greedy_through_the_stack_equals_the_engine(
    client: openai.OpenAI,
    model_name: str,
    smollm_path: Path,
    smollm: CausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
) -> None:
    engine = Engine(EngineConfig(model_path=smollm_path, max_total_tokens=4096), None, smollm)
    ids = chat_prompt_ids(tokenizer, QUESTION)
    request = GenerationRequest(
        "r", ids, SamplingParams(temperature=0.0, max_new_tokens=24), SpeculationParams(enabled=False)
    )
    want = engine.generate([request])["r"].token_ids
    got = chat(client, model_name, max_tokens=24).choices[0].message.content
    assert got == tokenizer.decode(want, skip_special_tokens=True)


def test_client_disconnect_frees_kv(stack: Stack, model_name: str) -> None:
    body = {
        "model": model_name,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 200,
        "stream": True,
    }
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{stack.base_url}/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
    # The stream is closed: the verifier must abort the request and free its blocks.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        stats = verifier_stats(stack)
        if stats.running_requests == 0 and stats.kv_blocks_free == stats.kv_blocks_total:
            break
        time.sleep(0.2)
    assert stats.running_requests == 0 and stats.waiting_requests == 0
    assert stats.kv_blocks_free == stats.kv_blocks_total


def test_killing_the_drafter_does_not_fail_a_request(
    client: openai.OpenAI, model_name: str, stack: Stack
) -> None:
    """Runs last in this module: the stack has no drafter afterwards."""
    want = chat(client, model_name, max_tokens=48).choices[0].message.content
    stream = stream_chat(client, model_name, max_tokens=48)
    text = ""
    for i, chunk in enumerate(stream):
        if i == 2:
            drafter = stack.service("drafter").popen
            assert drafter is not None
            drafter.send_signal(signal.SIGKILL)
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert text == want
    assert chat(client, model_name, max_tokens=8).choices[0].message.content
