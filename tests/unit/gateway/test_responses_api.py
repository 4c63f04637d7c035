"""The Responses API's pieces without a server: input items to the chat conversation, and a reply's
deltas to output items and their stream of events (the route runs in tests/services)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.output import ResponseOutput
from treespec.gateway.responses_api.request import ResponsesRequest


def _request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", **fields})


def test_items_become_the_chat_conversation() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'}
    request = _request(
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me."}]},
            call,
            {**call, "call_id": "c2"},
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call_output", "call_id": "c2", "output": "2"},
        ],
    )
    calls = [
        {"id": c, "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        for c in ("c1", "c2")
    ]
    assert request.chat_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Let me.", "tool_calls": calls},  # the calls join its message
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
    ]
    chat = request.chat_request()
    assert len(chat.messages) == 5 and not chat.stream


def test_settings_become_their_chat_counterparts() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    chat = _request(
        input="hi",
        max_output_tokens=7,
        temperature=0.5,
        top_p=0.9,
        stream=True,
        tools=[tool],
        tool_choice={"type": "function", "name": "f"},
        reasoning={"effort": "low"},
        cache_salt="tenant",
    ).chat_request()
    assert (chat.token_limit, chat.temperature, chat.top_p, chat.stream) == (7, 0.5, 0.9, True)
    assert chat.tool_call_mode is not None and chat.tool_call_mode.named == "f"
    assert chat.template_kwargs == {"reasoning_effort": "low"} and chat.cache_salt == "tenant"
    formatted = _request(input="hi", text={"format": {"type": "json_schema", "name": "x", "schema": schema}})
    assert formatted.chat_request().constraint == ("json_schema", schema)
    assert _request(input="hi", text={"format": {"type": "json_object"}}).chat_request().constraint == (
        "json_object",
        True,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"input": "hi", "conversation": "conv_1", "previous_response_id": "resp_1"},
        {"input": "hi", "conversation": {"id": ""}},
        {"input": "hi", "previous_response_id": ""},
        {"input": "hi", "include": ["reasoning.encrypted_content"]},
        {"input": "hi", "top_logprobs": 21},
        {"input": "hi", "text": {"verbosity": "low"}},
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
        {"input": [{"type": "web_search_call", "id": "w"}]},
        {"input": "hi", "tool_choice": {"type": "function", "name": "f"}},
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
    ],
)
def test_what_is_not_implemented_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _request(**fields)


def test_a_bad_chat_request_is_a_400() -> None:
    with pytest.raises(APIError) as caught:  # what only chat completions' checks refuse
        _request(input="hi", tool_choice="required").chat_request()
    assert caught.value.status == 400


def test_a_streamed_reply_opens_and_closes_items_in_order() -> None:
    output = ResponseOutput()
    events = output.feed({"reasoning_content": "Think"})
    events += output.feed({"reasoning_content": "ing.", "content": "Hi"})
    events += output.feed(
        {"content": " there", "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}
    )
    events += output.feed({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]})
    events += output.feed({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]})
    events += output.finish("completed")
    assert [e["type"].removeprefix("response.") for e in events] == [
        "output_item.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
    ]
    assert [e["output_index"] for e in events if e["type"].endswith("item.done")] == [0, 1, 2]
    reasoning, message, call = output.output("completed")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Thinking."}]
    assert message["content"][0]["text"] == "Hi there" and message["status"] == "completed"
    assert (call["call_id"], call["name"], call["arguments"]) == ("c1", "f", '{"a": 1}')
    assert events[-1]["item"] == call  # the done event holds the item as the response lists it


def test_a_whole_reply_gives_the_same_items_and_an_incomplete_one_says_so() -> None:
    output = ResponseOutput()
    output.feed({"reasoning_content": None, "content": "Hi there", "tool_calls": []})
    output.finish("incomplete")
    (message,) = output.output("incomplete")
    assert message["type"] == "message" and message["status"] == "incomplete"
    assert message["content"][0]["text"] == "Hi there"
    empty = ResponseOutput()
    assert empty.feed({}) == [] and empty.finish("completed") == [] and empty.output("completed") == []


def test_logprobs_are_asked_for_with_include() -> None:
    asked = _request(input="hi", include=["message.output_text.logprobs"], top_logprobs=3).chat_request()
    assert (asked.logprobs, asked.top_logprobs) == (True, 3)
    plain = _request(input="hi", include=["message.output_text.logprobs"]).chat_request()
    assert (plain.logprobs, plain.top_logprobs) == (True, 0)
    assert not _request(input="hi", top_logprobs=3).chat_request().logprobs  # without include: none


def _token(name: str) -> dict[str, Any]:
    return {"token": name, "logprob": -1.0, "bytes": list(name.encode()), "top_logprobs": []}


def test_the_message_carries_every_token_s_logprobs_streamed_or_whole() -> None:
    """Reasoning tokens join the message's next delta; tokens after its last text join it at the end."""
    think, end, hi, there, eos = (_token(t) for t in ("Hm", "</think>", "Hi", " there", ""))
    output = ResponseOutput()
    events = output.feed({"reasoning_content": "Hm"}, [think])
    events += output.feed({}, [end])  # the marker: no text of its own
    events += output.feed({"content": "Hi"}, [hi])
    events += output.feed({"content": " there"}, [there])
    events += output.feed({}, [eos])
    events += output.finish("completed")
    deltas = [e["logprobs"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == [[think, end, hi], [there]]
    added = next(e for e in events if e["type"] == "response.content_part.added")
    assert added["part"]["logprobs"] == []
    done = next(e for e in events if e["type"] == "response.output_text.done")
    everything = [think, end, hi, there, eos]
    assert done["logprobs"] == everything
    assert output.output("completed")[1]["content"][0]["logprobs"] == everything
    whole = ResponseOutput()
    whole.feed({"reasoning_content": "Hm", "content": "Hi there"}, [think, end, hi, there, eos])
    whole.finish("completed")
    assert whole.output("completed")[1]["content"][0]["logprobs"] == everything


def test_an_input_token_count_is_the_response_it_would_be() -> None:
    """The count's fields make the response whose prompt is counted (the served model's unless it
    names one); a response without input continues what came before, adding no items."""
    from treespec.gateway.responses_api.input_tokens import InputTokensRequest

    counted = InputTokensRequest.model_validate(
        {"input": [{"role": "user", "content": "hi"}], "instructions": "Be brief.", "text": _JSON_SCHEMA_TEXT}
    )
    request = counted.response_request("served")
    assert request.model == "served" and request.instructions == "Be brief."
    assert request.chat_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert request.text is not None and request.text.format is not None
    assert request.text.format.schema_ == _JSON_SCHEMA_TEXT["format"]["schema"]
    onward = ResponsesRequest.model_validate({"model": "m", "previous_response_id": "resp_1"})
    assert onward.items == [] and onward.chat_messages() == []
    with pytest.raises(APIError) as caught:
        InputTokensRequest.model_validate(
            {"input": "hi", "tool_choice": {"type": "function", "name": "x"}}
        ).response_request("m")
    assert caught.value.param == "tool_choice"


_JSON_SCHEMA_TEXT: dict[str, Any] = {
    "format": {"type": "json_schema", "name": "colour", "schema": {"type": "object", "properties": {}}}
}
