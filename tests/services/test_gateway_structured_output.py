"""Structured output through the OpenAI SDK against a real verifier (SmolLM2-135M on CPU, random
drafts): OpenAI's response_format (json_schema, json_object) and vLLM's guided decoding, whole and
streamed, on chat and completions. Refusals: test_gateway_errors.py."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import BaseModel

from tests.services.gateway_stack import MODEL

pytestmark = pytest.mark.slow


class Person(BaseModel):
    name: str
    age: int


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ASK_PERSON: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Invent a person. Reply in JSON with a name and an age."}
]


def _schema_format(schema: dict[str, Any]) -> ResponseFormatJSONSchema:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


def test_json_schema_output_parses_into_the_schema(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=ASK_PERSON,
        max_tokens=48,
        temperature=0,
        response_format=_schema_format(SCHEMA),
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    person = Person.model_validate_json(choice.message.content or "")
    assert len(person.name) <= 16


def test_the_sdk_s_parse_helper_reads_a_pydantic_reply(client: openai.OpenAI) -> None:
    reply = client.chat.completions.parse(
        model=MODEL,
        messages=ASK_PERSON,
        max_tokens=48,
        temperature=0,
        response_format=Person,
    )
    assert isinstance(reply.choices[0].message.parsed, Person)


def test_json_object_and_sampling(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=ASK_PERSON,
        max_tokens=64,
        temperature=0.8,
        seed=1,
        n=4,
        response_format={"type": "json_object"},
    )
    finished = [c.message.content or "" for c in reply.choices if c.finish_reason == "stop"]
    assert finished, "no sampled reply finished within the token limit"
    assert all(isinstance(json.loads(text), dict) for text in finished)
    # One cut by the limit is still the start of a JSON object.
    assert all((c.message.content or "").lstrip().startswith("{") for c in reply.choices)


def test_streamed_structured_output_equals_the_whole_one(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": ASK_PERSON,
        "max_tokens": 48,
        "temperature": 0,
        "response_format": _schema_format(SCHEMA),
    }
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(stream=True, **kwargs)
        if chunk.choices
    )
    assert streamed == whole and json.loads(streamed)


def test_vllm_guided_choice_and_regex(client: openai.OpenAI) -> None:
    choices = ["positive", "negative", "neutral"]
    for n, review in enumerate(["I love this phone!", "It broke in a day."]):
        reply = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Sentiment of: {review}"}],
            max_tokens=8,
            temperature=0.7,
            seed=n,
            n=2,
            extra_body={"guided_choice": choices},
        )
        assert all(c.message.content in choices and c.finish_reason == "stop" for c in reply.choices)
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "When did the Berlin wall fall?"}],
        max_tokens=16,
        temperature=0,
        extra_body={"guided_regex": date},
    )
    assert re.fullmatch(date, reply.choices[0].message.content or "")


def test_vllm_structured_outputs_take_each_kind(client: openai.OpenAI) -> None:
    """vLLM's newer `structured_outputs` object, on chat and completions alike."""
    choices = ["yes", "no"]
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=4,
        temperature=0,
        extra_body={"structured_outputs": {"choice": choices}},
    )
    assert reply.choices[0].message.content in choices
    person = client.completions.create(
        model=MODEL,
        prompt="A person in JSON:",
        max_tokens=48,
        temperature=0,
        extra_body={"structured_outputs": {"json": SCHEMA}},
    )
    Person.model_validate_json(person.choices[0].text)
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    regex = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "When did the Berlin wall fall?"}],
        max_tokens=16,
        temperature=0,
        extra_body={"structured_outputs": {"regex": date}},
    )
    assert re.fullmatch(date, regex.choices[0].message.content or "")
    grammar = client.completions.create(
        model=MODEL,
        prompt="What is 6 times 7?",
        max_tokens=12,
        temperature=0,
        extra_body={"structured_outputs": {"grammar": 'root ::= "It is " [0-9]+ "."'}},
    )
    assert re.fullmatch(r"It is [0-9]+\.", grammar.choices[0].text)
    anything = client.chat.completions.create(
        model=MODEL,
        messages=ASK_PERSON,
        max_tokens=32,
        extra_body={"structured_outputs": {"json_object": True}},
    )
    assert (anything.choices[0].message.content or "").lstrip().startswith("{")


def test_completions_take_guided_json_and_a_grammar(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL,
        prompt="A person in JSON:",
        max_tokens=48,
        temperature=0,
        extra_body={"guided_json": SCHEMA},
    )
    assert reply.choices[0].finish_reason == "stop"
    Person.model_validate_json(reply.choices[0].text)
    grammar = 'root ::= "The answer is " [0-9]+ "."'
    streamed = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=MODEL,
            prompt="What is 6 times 7?",
            max_tokens=12,
            temperature=0,
            stream=True,
            extra_body={"guided_grammar": grammar},
        )
    )
    assert re.fullmatch(r"The answer is [0-9]+\.", streamed), streamed


def test_an_invalid_schema_is_a_400_naming_the_problem(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=ASK_PERSON,
            max_tokens=8,
            response_format=_schema_format({"type": "nonsense"}),
        )
    assert "json_schema" in caught.value.message and "nonsense" in caught.value.message
