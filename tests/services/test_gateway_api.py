"""The OpenAI gateway against a real verifier (`treespec verifier`, SmolLM2-135M on CPU, random
drafts), both as child processes (conftest.py), driven with the official `openai` client and with
httpx. Bad input: test_gateway_errors.py."""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from tests.services.gateway_stack import (
    CHAT,
    COUNTING,
    HI,
    KEY,
    MODEL,
    chat_body,
    completion_body,
    start_gateway,
)
from treespec.gateway.app import create_app
from treespec.gateway.config import GatewayConfig
from treespec.gateway.tokenizer import PromptTokenizer
from treespec.shared.launcher.ports import free_port
from treespec.v1 import verifier_pb2, verifier_pb2_grpc

pytestmark = pytest.mark.slow


def _extra(obj: Any, name: str) -> Any:
    return (obj.model_extra or {}).get(name)


# -- the API, through the official client ----------------------------------------------------------


def test_models(client: openai.OpenAI, model_path: Path) -> None:
    (model,) = client.models.list().data
    assert model.id == MODEL and model.object == "model"
    # vLLM's card fields: the model the name serves, and no parent (no adapters here).
    assert (model.model_extra or {})["root"] == str(model_path) and (model.model_extra or {})[
        "parent"
    ] is None


def test_health_checks_and_load_are_open(url: str) -> None:
    """vLLM's /ping (GET or POST) answers as /health; SGLang's /health_generate generates a token end
    to end; vLLM's /load counts the requests in flight; none needs the API key."""
    assert httpx.get(f"{url}/ping").json() == httpx.post(f"{url}/ping").json() == {"status": "ok"}
    assert httpx.get(f"{url}/health_generate", timeout=60).json() == {"status": "ok"}
    load = httpx.get(f"{url}/load")
    assert load.status_code == 200 and load.json()["server_load"] >= 0


def test_version_is_open(url: str) -> None:
    """vLLM's GET /version: the installed treespec's version, without an API key."""
    got = httpx.get(f"{url}/version")
    assert got.status_code == 200 and got.json() == {"version": importlib.metadata.version("treespec")}


def test_model_retrieve(client: openai.OpenAI, url: str) -> None:
    (listed,) = client.models.list().data
    time.sleep(1.1)  # `created` is the gateway's start, not the time of the call
    assert client.models.retrieve(MODEL) == listed
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-5")
    assert (caught.value.code, caught.value.param) == ("model_not_found", "model")
    assert httpx.get(f"{url}/v1/models/{MODEL}").status_code == 401


def test_chat_non_streaming(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8, temperature=0)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage is not None
    assert usage.prompt_tokens == len(tokenizer.chat_prompt([{"role": "user", "content": "Say hello."}]))
    assert 1 <= usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    meta = _extra(reply, "meta_info")
    assert meta["spec_verify_steps"] >= 1 and meta["spec_drafted_tokens"] > 0  # random drafts
    assert meta["spec_accept_length"] >= 1.0


def test_chat_streaming_matches_non_streaming(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=HI,
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].message.content  # greedy, lossless, same detokenization
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert _extra(finals[0], "meta_info")["spec_verify_steps"] >= 1
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage == whole.usage


def test_completions_text_and_token_prompts_agree(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    by_text = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=8, temperature=0)
    ids = tokenizer.text_prompt(COUNTING)
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=8, temperature=0)
    assert by_text.object == "text_completion"
    assert by_text.choices[0].text == by_ids.choices[0].text
    assert by_text.choices[0].text.startswith(" 5, 6")
    assert by_text.usage is not None and by_text.usage.prompt_tokens == len(ids)


def test_a_token_prompt_ending_inside_a_character_is_not_echoed(
    client: openai.OpenAI, tokenizer: PromptTokenizer
) -> None:
    prompt = tokenizer.text_prompt("I love sushi 🍣")[:-2]  # it ends with the emoji's first bytes
    assert tokenizer.decode(prompt).endswith("\ufffd")
    kwargs: dict[str, Any] = dict(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    text = client.completions.create(**kwargs).choices[0].text
    assert text and "love" not in text
    streamed = client.completions.create(stream=True, **kwargs)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text


def test_completions_streaming(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=6, temperature=0)
    stream = client.completions.create(
        model=MODEL,
        prompt=COUNTING,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage == whole.usage


def test_stop_strings_cut_the_output(client: openai.OpenAI) -> None:
    full = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=12, temperature=0).choices[0]
    stop = full.text[6:9]  # a piece from the middle, which may span tokens
    others = [f"zz{i}" for i in range(7)]  # more than OpenAI's 4, as vLLM and SGLang take
    cut = client.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=12, temperature=0, stop=[*others, stop]
    )
    assert cut.choices[0].text == full.text[: full.text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.usage is not None and cut.usage.completion_tokens < 12
    streamed = client.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=12, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text
    kept = client.completions.create(
        model=MODEL,
        prompt=COUNTING,
        max_tokens=12,
        temperature=0,
        stop=[stop],
        extra_body={"include_stop_str_in_output": True},
    )
    assert kept.choices[0].text == full.text[: full.text.index(stop) + len(stop)]


def test_penalties_change_greedy_output(client: openai.OpenAI) -> None:
    """Penalties reach the verifier (and its trees, verified row by row under them): a counting
    prompt repeats itself without them, and the same request gives the same text twice."""
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Repeat: la la la la la la"}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0)
    penalised = [
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=16,
            temperature=0,
            presence_penalty=2.0,
            frequency_penalty=2.0,
            extra_body={"repetition_penalty": 1.5},
        )
        for _ in range(2)
    ]
    texts = [reply.choices[0].message.content for reply in penalised]
    assert texts[0] == texts[1] and texts[0] != plain.choices[0].message.content


def test_logit_bias_forces_a_token(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    (token,) = tokenizer.text_prompt(" yes")
    reply = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=5, temperature=0.8, logit_bias={str(token): 100}
    )
    assert reply.choices[0].message.content == " yes" * 5


def test_min_tokens_holds_back_the_end(client: openai.OpenAI) -> None:
    """The reply to "Say hello." ends before 64 tokens; min_tokens makes it go on (a vLLM extension)."""
    short = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=64, temperature=0)
    assert short.usage is not None and short.choices[0].finish_reason == "stop"
    floor = short.usage.completion_tokens + 10
    assert floor < 64
    longer = client.chat.completions.create(
        model=MODEL, messages=HI, max_tokens=64, temperature=0, extra_body={"min_tokens": floor}
    )
    assert longer.usage is not None and longer.usage.completion_tokens >= floor


def test_max_tokens_is_exact(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def test_a_reply_goes_back_as_the_sdk_dumps_it(client: openai.OpenAI, tokenizer: PromptTokenizer) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, temperature=0)
    dumped = reply.choices[0].message.model_dump()  # refusal, tool_calls, ... all None
    again = {"role": "user", "content": "Again."}
    for assistant, text in ((dumped, dumped["content"]), ({"role": "assistant", "content": None}, "")):
        messages: list[Any] = [*HI, assistant, again]
        follow_up = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
        expected = [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": text}, again]
        assert follow_up.usage is not None
        assert follow_up.usage.prompt_tokens == len(tokenizer.chat_prompt(expected))


def test_null_options_take_their_defaults(http: httpx.Client) -> None:
    nulls = {"n": None, "stream": None, "temperature": None, "stop": None, "seed": None}
    chat = http.post(CHAT, json=chat_body(**nulls))
    assert chat.status_code == 200, chat.text
    assert chat.json()["object"] == "chat.completion" and len(chat.json()["choices"]) == 1
    completion = http.post("/v1/completions", json=completion_body(best_of=None, **nulls))
    assert completion.status_code == 200, completion.text
    assert len(completion.json()["choices"]) == 1


def test_seed_reproduces_and_n_gives_distinct_choices(client: openai.OpenAI) -> None:
    # With random drafts: a seeded request samples by position, whatever the drafter proposes.
    story: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me a story."}]
    kwargs: dict[str, Any] = dict(model=MODEL, messages=story, max_tokens=10, temperature=1.0)
    first = client.chat.completions.create(seed=1234, **kwargs)
    again = client.chat.completions.create(seed=1234, **kwargs)
    assert first.choices[0].message.content == again.choices[0].message.content
    several = client.chat.completions.create(seed=1234, n=3, **kwargs)
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert several.choices[0].message.content == first.choices[0].message.content  # choice 0: the seed itself
    assert len({c.message.content for c in several.choices}) > 1
    assert several.usage is not None and first.usage is not None
    assert several.usage.prompt_tokens == first.usage.prompt_tokens  # the prompt counts once
    assert several.usage.total_tokens == several.usage.prompt_tokens + several.usage.completion_tokens


def test_batched_prompts(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt=["The sky is", COUNTING], max_tokens=3, temperature=0, n=2
    )
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert reply.choices[0].text == reply.choices[1].text and reply.choices[2].text == reply.choices[3].text
    # Batches and n past OpenAI's old habits (vLLM sets no bound; evaluation harnesses send dozens).
    many = client.completions.create(model=MODEL, prompt=["The sky is"] * 20, max_tokens=1, temperature=0)
    assert [c.index for c in many.choices] == list(range(20)) and len({c.text for c in many.choices}) == 1
    wide = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=1, temperature=1.0, n=12)
    assert [c.index for c in wide.choices] == list(range(12))


def test_the_verifier_s_own_refusals_are_400(client: openai.OpenAI) -> None:
    too_big = {"speculation": {"num_draft_tokens": 1000}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match="num_draft_tokens"):
            client.completions.create(
                model=MODEL, prompt="x", max_tokens=2, stream=stream, extra_body=too_big
            )


def test_client_disconnect_cancels_the_generation(url: str, verifier: int) -> None:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
            assert response.status_code == 200
            for i, _ in enumerate(response.iter_lines()):
                if i > 4:
                    break
        assert _verifier_idle(verifier)
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/completions", json=body, timeout=1.5)
        assert _verifier_idle(verifier)


def _verifier_idle(port: int, timeout_s: float = 10.0) -> bool:
    async def poll() -> bool:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                stats = await stub.GetStats(verifier_pb2.GetStatsRequest())
                if stats.running_requests == 0 and stats.waiting_requests == 0:
                    return stats.kv_blocks_free == stats.kv_blocks_total
                await asyncio.sleep(0.1)
        return False

    return asyncio.run(poll())


def test_metrics_expose_requests_and_acceptance(client: openai.OpenAI, http: httpx.Client) -> None:
    client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, temperature=0)
    text = http.get("/metrics").text
    assert 'treespec_gateway_requests_total{endpoint="/v1/chat/completions",status="200"}' in text
    for name in (
        "treespec_gateway_time_to_first_token_seconds_bucket",
        "treespec_gateway_time_per_output_token_seconds_bucket",
        "treespec_gateway_e2e_request_latency_seconds_bucket",
        "treespec_gateway_spec_acceptance_length_bucket",
        "treespec_gateway_spec_drafted_tokens_total",
        "treespec_gateway_spec_accepted_tokens_total",
    ):
        assert name in text


# -- no verifier -------------------------------------------------------------------------------------


def test_503_when_the_verifier_is_down(model_path: Path, tmp_path: Path) -> None:
    port = free_port()
    service = start_gateway(model_path, free_port(), port, tmp_path)  # nothing listens there
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/health").status_code == 503
        for check in (httpx.get(f"{url}/ping"), httpx.get(f"{url}/health_generate")):
            assert check.status_code == 503 and check.json()["error"]["code"]
        dead = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        with pytest.raises(openai.APIStatusError) as caught:
            dead.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        assert caught.value.status_code == 503
        assert dead.models.list().data[0].id == MODEL  # the model list needs no verifier
    finally:
        service.stop()


# -- in process: the trace continues from the gateway into the verifier -------------------------------


def test_genai_span_and_trace_context_reach_the_verifier(model_path: Path, verifier: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    config = GatewayConfig(verifier_addresses=(f"127.0.0.1:{verifier}",), model_path=model_path)
    with TestClient(create_app(config, tracer_provider=provider, registry=registry)) as app:
        with app.stream("POST", CHAT, json=chat_body(max_tokens=3, temperature=0, stream=True)) as stream:
            assert sum(1 for line in stream.iter_lines() if line.startswith("data:")) >= 4
        response = app.post(CHAT, json=chat_body(max_tokens=3, temperature=0))
    assert response.status_code == 200, response.text
    body = response.json()
    spans = exporter.get_finished_spans()
    assert not any(span.name.endswith(("http send", "http receive")) for span in spans)  # none per chunk
    chats = [span for span in spans if span.name == f"chat {MODEL}"]
    assert len(chats) == 2
    (chat,) = [span for span in chats if (span.attributes or {}).get("gen_ai.response.id") == body["id"]]
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.system"] == "treespec"
    assert attributes["gen_ai.request.max_tokens"] == 3
    assert attributes["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"]
    assert attributes["gen_ai.response.finish_reasons"] == (body["choices"][0]["finish_reason"],)
    assert "treespec.spec.accept_length" in attributes
    rpcs = [span for span in spans if span.name == "/treespec.v1.Verifier/Generate"]
    assert any(rpc.parent is not None and rpc.parent.span_id == chat.context.span_id for rpc in rpcs)
    generated = sum(span.attributes["gen_ai.usage.output_tokens"] for span in chats)  # type: ignore[index, misc]
    assert registry.get_sample_value("treespec_gateway_completion_tokens_total") == generated


def test_round_robin_skips_a_dead_replica(model_path: Path, verifier: int) -> None:
    replicas = (f"127.0.0.1:{verifier}", f"127.0.0.1:{free_port()}")  # the second one is down
    config = GatewayConfig(verifier_addresses=replicas, model_path=model_path)
    with TestClient(create_app(config, tracer_provider=TracerProvider())) as app:
        statuses = [app.post(CHAT, json=chat_body(max_tokens=1)).status_code for _ in range(4)]
        assert app.get("/health").status_code == 200
    assert statuses == [200] * 4


def test_a_repeated_prefix_is_reported_as_cached(client: openai.OpenAI) -> None:
    system = "You answer questions about the solar system in one short sentence. " * 4
    usages = []
    for question in ("How many planets are there?", "Which planet is largest?"):
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            max_tokens=4,
            temperature=0,
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        usages.append(reply.usage)
    first, second = (u.prompt_tokens_details.cached_tokens or 0 for u in usages if u.prompt_tokens_details)
    # The second request found the shared system prompt (whole KV blocks of it) computed by the first.
    assert second >= first + 48 and second < usages[1].prompt_tokens


def test_a_cache_salt_shares_cached_prefixes_with_its_own_salt_only(client: openai.OpenAI) -> None:
    system = "You answer questions about rivers in one short sentence, and name the river first. " * 4

    def cached(salt: str | None, question: str) -> int:
        extra = {} if salt is None else {"cache_salt": salt}
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            max_tokens=2,
            temperature=0,
            extra_body=extra,
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        return reply.usage.prompt_tokens_details.cached_tokens or 0

    assert cached("tenant-a", "Which river is longest?") == 0
    assert cached("tenant-b", "Which river is widest?") == 0  # tenant-a's prefix is not found
    assert cached(None, "Which river is oldest?") == 0
    assert cached("tenant-a", "Which river is deepest?") >= 48  # its own salt's prefix is
    with pytest.raises(openai.BadRequestError) as refused:
        cached("", "Which river is coldest?")
    assert "cache_salt" in str(refused.value)


def test_tokenize_and_detokenize(http: httpx.Client, tokenizer: PromptTokenizer) -> None:
    got = http.post("/tokenize", json={"model": MODEL, "prompt": "Hello there"}).json()
    assert got["tokens"] == tokenizer.text_prompt("Hello there") and got["count"] == len(got["tokens"])
    assert got["max_model_len"] > 0
    messages = [{"role": "user", "content": "Hi!"}]
    chat = http.post("/tokenize", json={"messages": messages}).json()
    assert chat["tokens"] == tokenizer.chat_prompt(messages)  # what /v1/chat/completions generates from
    open_turn = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()
    assert open_turn["count"] < chat["count"]
    # SmolLM2's template reads no `enable_thinking`: accepted, and the same prompt.
    kwargs = {"messages": messages, "chat_template_kwargs": {"enable_thinking": False}}
    assert http.post("/tokenize", json=kwargs).json()["tokens"] == chat["tokens"]
    back = http.post("/detokenize", json={"tokens": chat["tokens"]}).json()
    assert back["prompt"].startswith("<|im_start|>") and "Hi!" in back["prompt"]
    for path, body in [
        ("/tokenize", {"prompt": "x", "messages": messages}),
        ("/tokenize", {}),
        ("/detokenize", {"tokens": [10**7]}),
        ("/detokenize", {"tokens": ["a"]}),
        ("/tokenize", {"model": "gpt-5", "prompt": "x"}),
        ("/tokenize", {"messages": messages, "chat_template_kwargs": {"tokenize": True}}),
    ]:
        response = http.post(path, json=body)
        assert response.status_code in (400, 404), (path, body, response.text)
        assert response.json()["error"]["message"]
