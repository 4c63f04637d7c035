"""SGLang's native POST /generate against the real gateway and verifier (random drafts): the same
generation as the completion of the same prompt, answered in SGLang's shape (text, output_ids,
meta_info with finish_reason, counts and log-probabilities), batched, streamed with the text so far,
and bad fields a 400 naming them by SGLang's names; /abort_request stops generations, chat and
completions requests too."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.services.gateway_stack import COUNTING, MODEL
from treespec.gateway.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0, "max_new_tokens": 8}


def _generate(http: httpx.Client, **body: Any) -> Any:
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_generation_is_the_completion_of_the_same_prompt(
    http: httpx.Client, tokenizer: PromptTokenizer
) -> None:
    out = _generate(http, text=COUNTING, sampling_params=GREEDY)
    completion = http.post(
        "/v1/completions", json={"model": MODEL, "prompt": COUNTING, "max_tokens": 8, "temperature": 0}
    ).json()
    assert out["text"] == completion["choices"][0]["text"] and out["text"]
    assert tokenizer.decode(out["output_ids"]) == out["text"]
    meta = out["meta_info"]
    assert meta["prompt_tokens"] == completion["usage"]["prompt_tokens"]
    assert meta["completion_tokens"] == len(out["output_ids"]) == 8
    assert meta["finish_reason"] == {"type": "length", "length": 8}
    assert meta["id"] and meta["e2e_latency"] > 0 and meta["spec_verify_ct"] >= 1
    same = _generate(http, input_ids=tokenizer.text_prompt(COUNTING), sampling_params=GREEDY, rid="mine")
    assert same["text"] == out["text"] and same["meta_info"]["id"] == "mine"


def test_what_stopped_it_is_matched(http: httpx.Client, tokenizer: PromptTokenizer) -> None:
    whole = _generate(http, text=COUNTING, sampling_params={**GREEDY, "max_new_tokens": 12})["text"]
    stop = whole.strip().split(",")[1].strip()  # the second number it writes
    cut = _generate(http, text=COUNTING, sampling_params={**GREEDY, "max_new_tokens": 12, "stop": [stop]})
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert whole.startswith(cut["text"]) and not cut["text"].endswith(stop)
    kept = _generate(
        http,
        text=COUNTING,
        sampling_params={**GREEDY, "max_new_tokens": 12, "stop": [stop], "no_stop_trim": True},
    )
    assert kept["text"] == cut["text"] + stop
    token = _generate(http, text=COUNTING, sampling_params=GREEDY)["output_ids"][2]
    by_id = _generate(http, text=COUNTING, sampling_params={**GREEDY, "stop_token_ids": [token]})
    assert by_id["meta_info"]["finish_reason"] == {"type": "stop", "matched": token}
    assert by_id["output_ids"][-1] == token and len(by_id["output_ids"]) == 3


def test_a_batch_with_n_answers_a_list_prompt_by_prompt(http: httpx.Client) -> None:
    outs = _generate(
        http, text=[COUNTING, "The sky is"], rid=["a", "b"],
        sampling_params={"max_new_tokens": 4, "n": 2, "temperature": 0.8, "sampling_seed": 7},
    )  # fmt: skip
    assert [o["meta_info"]["id"] for o in outs] == ["a-0", "a-1", "b-0", "b-1"]
    assert all(o["meta_info"]["completion_tokens"] == len(o["output_ids"]) for o in outs)
    assert outs[0]["meta_info"]["prompt_tokens"] != outs[2]["meta_info"]["prompt_tokens"]


def test_each_prompt_may_have_its_own_sampling_params(http: httpx.Client) -> None:
    params = [{"temperature": 0, "max_new_tokens": 3}, {"temperature": 0, "max_new_tokens": 5, "n": 2}]
    outs = _generate(http, text=[COUNTING, "The sky is"], rid=["a", "b"], sampling_params=params)
    assert [o["meta_info"]["id"] for o in outs] == ["a", "b-0", "b-1"]
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [3, 5, 5]
    alone = [
        _generate(http, text=prompt, sampling_params=p)["text"]
        for prompt, p in zip([COUNTING, "The sky is"], [params[0], {**params[1], "n": 1}], strict=True)
    ]
    assert [o["text"] for o in outs] == [alone[0], alone[1], alone[1]]  # greedy: n copies
    with http.stream(
        "POST",
        "/generate",
        json={"text": [COUNTING, "The sky is"], "sampling_params": params, "stream": True},
    ) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    last = {e["index"]: e for e in events}
    assert sorted(last) == [0, 1, 2] and [last[i]["text"] for i in range(3)] == [o["text"] for o in outs]


def test_a_stream_sends_the_text_so_far_and_ends_as_the_whole(http: httpx.Client) -> None:
    whole = _generate(http, text=COUNTING, sampling_params=GREEDY)
    with http.stream(
        "POST", "/generate", json={"text": COUNTING, "sampling_params": GREEDY, "stream": True}
    ) as r:
        assert r.status_code == 200
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(line) for line in lines[:-1]]
    assert len(events) >= 2
    for before, after in itertools.pairwise(events):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
    last = events[-1]
    assert (last["text"], last["output_ids"]) == (whole["text"], whole["output_ids"])
    assert last["meta_info"]["finish_reason"] == whole["meta_info"]["finish_reason"]


def test_logprobs_of_the_output_and_of_the_prompt(http: httpx.Client, tokenizer: PromptTokenizer) -> None:
    out = _generate(
        http, text=COUNTING, sampling_params=GREEDY, return_logprob=True, top_logprobs_num=2,
        logprob_start_len=1, return_text_in_logprobs=True,
    )  # fmt: skip
    meta = out["meta_info"]
    completion = http.post(
        "/v1/completions",
        json={
            "model": MODEL,
            "prompt": COUNTING,
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": 2,
            "echo": True,
        },
    ).json()["choices"][0]["logprobs"]
    prompt_len = meta["prompt_tokens"]
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]
    assert [e[2] for e in meta["output_token_logprobs"]] == completion["tokens"][prompt_len:]
    for got, want in zip(
        meta["output_token_logprobs"], completion["token_logprobs"][prompt_len:], strict=True
    ):
        assert got[0] == pytest.approx(want, abs=1e-3)
    assert all(len(tops) == 2 for tops in meta["output_top_logprobs"])
    prompt_ids = tokenizer.text_prompt(COUNTING)
    assert [e[1] for e in meta["input_token_logprobs"]] == prompt_ids[1:]  # from logprob_start_len
    for got, want in zip(
        meta["input_token_logprobs"], completion["token_logprobs"][1:prompt_len], strict=True
    ):
        assert got[0] == pytest.approx(want, abs=1e-3)
    plain = _generate(http, text=COUNTING, sampling_params=GREEDY, return_logprob=True)["meta_info"]
    assert "input_token_logprobs" not in plain and plain["output_token_logprobs"][0][2] is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": "hi", "input_ids": [1, 2]}, None),
        ({}, None),
        ({"text": "hi", "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
        ({"text": "hi", "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
        ({"text": "hi", "sampling_params": {"json_schema": 3}}, "sampling_params.json_schema"),
        ({"text": "hi", "sampling_params": {"colour": "red"}}, "sampling_params.colour"),
        ({"text": ["a", "b"], "rid": ["x"]}, None),
        ({"text": "hi", "image_data": "x.png"}, "image_data"),
        ({"input_ids": [10**7]}, "input_ids"),
        ({"text": "hi " * 9000}, "text"),
        ({"text": "hi", "sampling_params": {"max_new_tokens": 8192}}, "sampling_params.max_new_tokens"),
        (
            {"text": ["a", "b"], "sampling_params": [{}, {"max_new_tokens": 9000}]},
            "sampling_params.1.max_new_tokens",
        ),
        ({"text": ["a"] * 5, "sampling_params": {"n": 64}}, "sampling_params"),
        ({"text": "hi", "priority": 2**31}, "priority"),
    ],
)
def test_bad_fields_are_a_400(http: httpx.Client, body: dict[str, Any], param: str | None) -> None:
    response = http.post("/generate", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"]
    if param is not None:
        assert (error["param"] or "").startswith(param), error


def test_generate_and_the_tokenizer_are_behind_the_api_key(url: str) -> None:
    for path, body in (("/generate", {"text": "hi"}), ("/tokenize", {"prompt": "hi"})):
        assert httpx.post(f"{url}{path}", json=body).status_code == 401
    assert httpx.get(f"{url}/health").status_code == 200  # open


def test_server_and_model_info_as_sglang_s_tools_read_them(http: httpx.Client) -> None:
    _generate(http, text=COUNTING, sampling_params=GREEDY)
    info = http.get("/get_server_info").json()
    (state,) = info["internal_states"]
    assert state["spec_verify_steps"] >= 1 and state["avg_spec_accept_length"] == pytest.approx(
        1 + state["spec_accepted_tokens"] / state["spec_verify_steps"], rel=0.2
    )
    assert info["speculative_algorithm"] and info["speculative_num_draft_tokens"] >= 1
    assert info["served_model_name"] == MODEL
    # /server_info is the same report; its live counters may have moved on (a request of an earlier
    # test still finishing on a slow machine), so those are compared by name only.
    alias = http.get("/server_info").json()
    assert [sorted(s) for s in alias.pop("internal_states")] == [sorted(state)]
    assert alias == {k: v for k, v in info.items() if k != "internal_states"}
    model = http.get("/get_model_info").json()
    assert (model["model_type"], model["architectures"], model["is_generation"]) == (
        "llama",
        ["LlamaForCausalLM"],
        True,
    )


def _load(http: httpx.Client) -> int:
    return int(http.get("/load").json()["server_load"])


def _until_load(http: httpx.Client, done: Callable[[int], bool], what: str) -> None:
    for _ in range(200):
        if done(_load(http)):
            return
        time.sleep(0.05)
    raise AssertionError(what)


def _started(http: httpx.Client) -> None:
    _until_load(http, lambda n: n > 0, "the generation never started")


def _freed(http: httpx.Client) -> None:
    """The verifier gives the aborted requests up as its next step begins."""
    _until_load(http, lambda n: n == 0, "the verifier kept the aborted requests")


def test_abort_request_stops_a_generation_by_its_rid(http: httpx.Client) -> None:
    """SGLang's /abort_request: the generation ends at once with an abort finish reason and what it
    had made, and the verifier frees the request; an unknown rid is no error."""
    long = {"max_new_tokens": 2000, "ignore_eos": True, "temperature": 0}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_generate, http, text=COUNTING, sampling_params=long, rid="long-1")
        _started(http)
        assert http.post("/abort_request", json={"rid": "long-1"}).status_code == 200
        out = pending.result(timeout=60)
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "abort" and meta["id"] == "long-1"
    assert 0 < meta["completion_tokens"] < 2000 and len(out["output_ids"]) == meta["completion_tokens"]
    _freed(http)
    assert http.post("/abort_request", json={"rid": "nothing-runs"}).status_code == 200
    assert http.post("/abort_request", json={"rid": 3}).status_code == 400


def test_abort_all_stops_streams_too(http: httpx.Client) -> None:
    long = {"max_new_tokens": 2000, "ignore_eos": True}

    def stream(rid: str) -> list[Any]:
        return _stream_events(http, {"text": COUNTING, "sampling_params": long, "rid": rid, "stream": True})

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(stream, f"s-{i}") for i in range(2)]
        _started(http)
        time.sleep(0.3)
        assert http.post("/abort_request", json={"abort_all": True}).status_code == 200
        events = [p.result(timeout=60) for p in pending]
    for got in events:
        assert got[-1]["meta_info"]["finish_reason"]["type"] == "abort"
        assert all(e["meta_info"]["finish_reason"] is None for e in got[:-1])
    _freed(http)


def test_an_abort_stops_one_output_of_a_batch_and_the_others_go_on(http: httpx.Client) -> None:
    """A batch's outputs are aborted one by one: by an output's rid, or by a prompt's rid for its `n`
    choices; the rest finish as they would have, streamed or whole."""
    long = {"max_new_tokens": 2000, "ignore_eos": True, "temperature": 0}
    short = {"max_new_tokens": 24, "ignore_eos": True, "temperature": 0}
    alone = _generate(http, text=COUNTING, sampling_params=short)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        batch = {"text": [COUNTING, COUNTING], "sampling_params": [long, short], "rid": ["b-long", "b-short"]}
        pending = pool.submit(_generate, http, **batch)
        _started(http)
        assert http.post("/abort_request", json={"rid": "b-long"}).status_code == 200
        aborted, finished = pending.result(timeout=60)
    assert aborted["meta_info"]["finish_reason"]["type"] == "abort" and aborted["meta_info"]["id"] == "b-long"
    assert 0 < aborted["meta_info"]["completion_tokens"] < 2000
    assert finished["meta_info"]["finish_reason"] == {"type": "length", "length": 24}
    assert finished["output_ids"] == alone["output_ids"]
    _freed(http)

    body = {
        "text": COUNTING,
        "sampling_params": {**long, "n": 2, "temperature": 1},
        "rid": "pair",
        "stream": True,
    }
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_stream_events, http, body)
        _started(http)
        assert http.post("/abort_request", json={"rid": "pair"}).status_code == 200
        events = pending.result(timeout=60)
    ends = {
        e["meta_info"]["id"]: e["meta_info"]["finish_reason"]
        for e in events
        if e["meta_info"]["finish_reason"]
    }
    assert ends == {"pair-0": ABORTED, "pair-1": ABORTED}
    _freed(http)


def test_a_client_that_leaves_a_stream_frees_its_request(http: httpx.Client) -> None:
    """Each output waits for its next event beside its abort flag; a client gone ends that wait too,
    so the verifier gives the request up."""
    body = {"text": COUNTING, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}, "stream": True}
    with http.stream("POST", "/generate", json=body) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i > 4:
                break
    _freed(http)


def test_abort_request_stops_chat_and_completions_requests_too(
    http: httpx.Client, client: openai.OpenAI
) -> None:
    """As SGLang's: a chat stream by the id of its first chunk, a completion by the rid (vLLM's
    request_id) its client gave, and any of them by abort_all; each ends with finish reason "abort"
    and what it had, and the verifier frees its requests."""
    long: dict[str, Any] = {"max_tokens": 2000, "temperature": 0, "extra_body": {"ignore_eos": True}}
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to a thousand."}], stream=True, **long
    )
    first = next(iter(stream))
    assert http.post("/abort_request", json={"rid": first.id}).status_code == 200
    chunks = [first, *stream]
    ends = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert ends == ["abort"] and len(chunks) < 2000
    _freed(http)

    def complete(rid: str) -> Any:
        extra = {**long["extra_body"], "rid": rid}
        return client.completions.create(model=MODEL, prompt=COUNTING, n=2, **{**long, "extra_body": extra})

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        named = pool.submit(complete, "cmpl-job")
        _started(http)
        assert http.post("/abort_request", json={"rid": "cmpl-job"}).status_code == 200
        completion = named.result(timeout=60)
        assert completion.id == "cmpl-cmpl-job"
        assert [c.finish_reason for c in completion.choices] == ["abort", "abort"]
        assert completion.usage is not None and 0 < completion.usage.completion_tokens < 4000
        _freed(http)
        others = [pool.submit(complete, f"other-{i}") for i in range(2)]
        _until_load(http, lambda n: n == 4, "the four choices never ran at once")
        assert http.post("/abort_request", json={"abort_all": True}).status_code == 200
        assert {c.finish_reason for o in others for c in o.result(timeout=60).choices} == {"abort"}
    _freed(http)


ABORTED = {"type": "abort", "message": "aborted by /abort_request"}


def _stream_events(http: httpx.Client, body: dict[str, Any]) -> list[Any]:
    with http.stream("POST", "/generate", json=body) as response:
        lines = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]
