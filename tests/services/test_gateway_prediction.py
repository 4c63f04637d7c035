"""OpenAI's Predicted Outputs through the real gateway and verifier (random drafts), with the official
client: the reply is the one without a prediction, it comes in fewer verify steps when it repeats
the prediction, and the usage says how much of the prediction it used."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.services.gateway_stack import CHAT, MODEL, chat_body
from treespec.gateway.tokenizer import PromptTokenizer

pytestmark = pytest.mark.slow

FILE = "def area(width, height):\n    return width * height\n\n\nprint(area(3, 4))\n"
EDIT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": f"Rename the function area to rectangle_area in this code:\n{FILE}"}
]


def _reply(client: openai.OpenAI, **extra: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=EDIT, max_tokens=48, temperature=0, **extra)


def _spec(reply: Any) -> dict[str, Any]:
    meta: dict[str, Any] = (reply.model_extra or {})["meta_info"]
    return meta


def test_a_prediction_keeps_the_reply_and_is_counted(
    client: openai.OpenAI, tokenizer: PromptTokenizer
) -> None:
    plain = _reply(client)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction, no details
    # The reply itself with one word changed, as a client's stale copy of the answer would be.
    words = text.split(" ")
    words[len(words) // 2] = "banana"
    prediction = " ".join(words)
    predicted = _reply(client, prediction={"type": "content", "content": prediction})
    assert predicted.choices[0].message.content == text
    details = predicted.usage.completion_tokens_details
    predicted_tokens = len(tokenizer.text_prompt(prediction, add_special_tokens=False))
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens == predicted_tokens
    assert details.accepted_prediction_tokens >= predicted.usage.completion_tokens - 6
    # The random drafter commits about one token a step; the prediction several.
    assert _spec(predicted)["spec_accept_length"] > 2.0 > _spec(plain)["spec_accept_length"]


def test_an_unrelated_prediction_is_rejected_in_the_usage_only(client: openai.OpenAI) -> None:
    plain = _reply(client)
    parts = [{"type": "text", "text": "Lorem ipsum dolor "}, {"type": "text", "text": "sit amet."}]
    predicted = _reply(client, prediction={"type": "content", "content": parts})
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    details = predicted.usage.completion_tokens_details
    assert details.rejected_prediction_tokens > details.accepted_prediction_tokens


def test_a_streamed_reply_reports_the_prediction_in_its_usage(client: openai.OpenAI) -> None:
    text = _reply(client).choices[0].message.content
    stream = _reply(
        client,
        prediction={"type": "content", "content": text},
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.accepted_prediction_tokens >= usage.completion_tokens - 2


@pytest.mark.parametrize(
    ("prediction", "param"),
    [
        ({"type": "text", "content": "x"}, "prediction.type"),
        ({"type": "content"}, "prediction.content"),
        ({"type": "content", "content": [{"type": "image_url", "text": "x"}]}, "prediction.content.0.type"),
        ("x", "prediction"),
    ],
)
def test_a_bad_prediction_is_a_400_naming_it(http: httpx.Client, prediction: Any, param: str) -> None:
    response = http.post(CHAT, json=chat_body(prediction=prediction))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def _prediction_counts(url: str) -> dict[str, float]:
    counts = {"accepted": 0.0, "rejected": 0.0}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("treespec_gateway_prediction_tokens_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


def test_the_metrics_count_the_prediction_s_tokens(client: openai.OpenAI, url: str) -> None:
    before = _prediction_counts(url)
    reply = _reply(client, prediction={"type": "content", "content": FILE})
    after = _prediction_counts(url)
    details = reply.usage.completion_tokens_details
    assert after["accepted"] - before["accepted"] == details.accepted_prediction_tokens
    assert after["rejected"] - before["rejected"] == details.rejected_prediction_tokens
