"""One choice's generation over a scripted verifier: text, stop tokens, stop strings, figures, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

import pytest
from opentelemetry.context import Context
from tokenizers import Tokenizer

from treespec.gateway.errors import APIError
from treespec.gateway.fanout import merge
from treespec.gateway.generation import ChoiceEnd, ChoiceJob, Event, TextDelta, run_choice
from treespec.v1 import verifier_pb2 as pb

EOS = 2


class ScriptedVerifier:
    """Sends the given chunks; records whether the call was closed (cancelled) before its end."""

    def __init__(self, chunks: Sequence[pb.GenerateChunk]) -> None:
        self.chunks = chunks
        self.closed_early = False

    async def generate(
        self, request: pb.GenerateRequest, trace_context: Context | None = None
    ) -> AsyncGenerator[pb.GenerateChunk, None]:
        sent = 0
        try:
            for chunk in self.chunks:
                yield chunk
                sent += 1
        finally:
            self.closed_early = sent < len(self.chunks)


def _final(tokens: list[int], reason: int, completion_tokens: int) -> pb.GenerateChunk:
    stats = pb.SpeculationStats(verify_steps=3, drafted_tokens=8, accepted_tokens=4, committed_tokens=7)
    usage = pb.Usage(prompt_tokens=3, completion_tokens=completion_tokens)
    return pb.GenerateChunk(token_ids=tokens, finish_reason=reason, usage=usage, speculation=stats)  # type: ignore[arg-type]


def _job(stops: tuple[str, ...] = (), end: frozenset[int] = frozenset({EOS})) -> ChoiceJob:
    return ChoiceJob(0, pb.GenerateRequest(request_id="r", prompt_token_ids=[1, 2, 3]), stops, end)


async def _run(tokenizer: Tokenizer, verifier: ScriptedVerifier, job: ChoiceJob) -> list[Event]:
    return [event async for event in run_choice(verifier, tokenizer, job)]


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_text_and_the_final_figures(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "Hello 世界")
    chunks = [
        pb.GenerateChunk(token_ids=ids[:2]),
        _final([*ids[2:], EOS], pb.FINISH_REASON_STOP, len(ids) + 1),
    ]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job()))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    end = events[-1]
    assert text == "Hello 世界"  # EOS adds no text
    assert isinstance(end, ChoiceEnd) and end.finish_reason == "stop"
    assert end.completion_tokens == len(ids) + 1  # but counts as a token
    assert end.spec is not None and end.spec.acceptance_length == pytest.approx(7 / 3)
    # Every token received rides on a delta or the end (SGLang's output_ids), and EOS is what stopped.
    received = [t for e in events for t in e.token_ids]
    assert received == [*ids, EOS] and end.token_ids == (EOS,) and end.matched == EOS


def test_a_non_special_stop_token_adds_no_text(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "one two")
    stop = _ids(tokenizer, "!")[0]
    chunks = [_final([*ids, stop], pb.FINISH_REASON_STOP, len(ids) + 1)]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job(end=frozenset({EOS, stop}))))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "one two"


def test_a_stop_string_split_across_tokens_cancels_the_call(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "Answer: 42</done> trailing words")
    chunks = [pb.GenerateChunk(token_ids=[token]) for token in ids] + [
        _final([], pb.FINISH_REASON_LENGTH, 99)
    ]
    verifier = ScriptedVerifier(chunks)
    events = asyncio.run(_run(tokenizer, verifier, _job(stops=("</done>",))))
    end = events[-1]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Answer: 42"
    assert isinstance(end, ChoiceEnd) and end.finish_reason == "stop" and end.spec is None
    consumed = len(_ids(tokenizer, "Answer: 42</done>"))
    assert end.completion_tokens == consumed  # up to the token that completed the stop string
    assert end.matched == "</done>" and [t for e in events for t in e.token_ids] == ids[:consumed]
    assert verifier.closed_early


def test_held_back_text_is_released_at_the_end(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "wait <")
    events = asyncio.run(
        _run(tokenizer, ScriptedVerifier([_final(ids, pb.FINISH_REASON_LENGTH, 2)]), _job(("<x",)))
    )
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "wait <"
    assert isinstance(events[-1], ChoiceEnd) and events[-1].finish_reason == "length"
    assert events[-1].matched is None and [t for e in events for t in e.token_ids] == ids


@pytest.mark.parametrize(
    "chunks",
    [[pb.GenerateChunk(token_ids=[5])], [_final([5], pb.FINISH_REASON_ABORT, 1)]],
    ids=["no-finish", "abort"],
)
def test_a_stream_without_a_proper_end_is_a_503(tokenizer: Tokenizer, chunks: list[pb.GenerateChunk]) -> None:
    with pytest.raises(APIError) as caught:
        asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job()))
    assert caught.value.status == 503


async def _numbers(start: int, count: int, closed: list[int]) -> AsyncGenerator[int, None]:
    try:
        for i in range(start, start + count):
            await asyncio.sleep(0)
            yield i
    finally:
        closed.append(start)


def test_merge_yields_everything() -> None:
    async def run() -> list[int]:
        closed: list[int] = []
        return [n async for n in merge([_numbers(0, 3, closed), _numbers(10, 3, closed)])]

    assert sorted(asyncio.run(run())) == [0, 1, 2, 10, 11, 12]


def test_leaving_a_merge_early_closes_every_source() -> None:
    async def run() -> list[int]:
        closed: list[int] = []
        merged = merge([_numbers(0, 100, closed), _numbers(1000, 100, closed)])
        await anext(merged)
        await merged.aclose()
        return closed

    assert sorted(asyncio.run(run())) == [0, 1000]


def _entry(token: int) -> pb.TokenLogprob:
    return pb.TokenLogprob(logprob=-0.5 - token / 1000, top_token_ids=[token], top_logprobs=[-0.5])


def test_logprobs_ride_with_the_text_their_tokens_complete(tokenizer: Tokenizer) -> None:
    """A character split over byte tokens, an EOS that adds no text (and no entry), and tokens held
    back by a partial stop string: every other token's entry comes once, in order."""
    ids = _ids(tokenizer, "a世b")
    assert len(ids) > 3  # 世 takes more than one byte token
    tokens = [*ids, EOS]
    chunks = [
        pb.GenerateChunk(token_ids=tokens[:2], logprobs=[_entry(t) for t in tokens[:2]]),
        pb.GenerateChunk(
            token_ids=tokens[2:],
            logprobs=[_entry(t) for t in tokens[2:]],
            finish_reason=pb.FINISH_REASON_STOP,
        ),
    ]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job(stops=("bz",))))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == "a世b"
    got = [entry for d in deltas for entry in d.logprobs]
    assert [e.token_id for e in got] == ids
    assert [e.logprob for e in got] == pytest.approx([-0.5 - t / 1000 for t in ids])
    assert all(e.top == ((e.token_id, -0.5),) for e in got)
    # "b", held back by the partial stop string, comes with the final chunk's other text, its entry last
    assert deltas[-1].text.endswith("b") and deltas[-1].logprobs[-1].token_id == ids[-1]


def test_a_chunk_s_tokens_go_out_as_one_delta(tokenizer: Tokenizer) -> None:
    """A verify step's accepted tokens come in one chunk, and leave in one delta (as vLLM and SGLang
    stream a step), with every entry, token and count of the deltas it stands for."""
    ids = _ids(tokenizer, "one two three four five")
    chunks = [
        pb.GenerateChunk(token_ids=ids[:1], logprobs=[_entry(t) for t in ids[:1]]),
        pb.GenerateChunk(token_ids=ids[1:4], logprobs=[_entry(t) for t in ids[1:4]]),
        pb.GenerateChunk(
            token_ids=[*ids[4:], EOS],
            logprobs=[_entry(t) for t in [*ids[4:], EOS]],
            finish_reason=pb.FINISH_REASON_STOP,
        ),
    ]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job()))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.text for d in deltas] == ["one", " two three four", " five"]
    assert [d.completion_tokens for d in deltas] == [1, 4, len(ids)]
    assert [d.offset for d in deltas] == [0, 3, 18]
    assert [[e.token_id for e in d.logprobs] for d in deltas] == [ids[:1], ids[1:4], ids[4:]]
    assert [t for d in deltas for t in d.token_ids] == ids
    end = events[-1]
    assert isinstance(end, ChoiceEnd) and end.token_ids == (EOS,) and end.completion_tokens == len(ids) + 1


def test_a_stop_string_sends_the_entries_of_the_text_it_cut(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "x STOP y")
    chunks = [pb.GenerateChunk(token_ids=ids, logprobs=[_entry(t) for t in ids])]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), _job(stops=("STOP",))))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == "x "
    sent = [entry.token_id for d in deltas for entry in d.logprobs]
    assert sent == ids[: len(sent)] and tokenizer.decode(sent).startswith("x STOP")


def test_an_echo_comes_first_with_the_prompt_s_logprobs(tokenizer: Tokenizer) -> None:
    prompt = _ids(tokenizer, "Say hi")
    request = pb.GenerateRequest(
        request_id="r", prompt_token_ids=prompt, sampling=pb.SamplingParams(prompt_logprobs=0, logprobs=0)
    )
    job = ChoiceJob(0, request, (), frozenset({EOS}), echo="Say hi")
    out = _ids(tokenizer, " there")
    chunks = [
        pb.GenerateChunk(
            token_ids=out,
            logprobs=[_entry(t) for t in out],
            prompt_logprobs=[_entry(t) for t in prompt[1:]],
            finish_reason=pb.FINISH_REASON_LENGTH,
        )
    ]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), job))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas[0].text == "Say hi" and "".join(d.text for d in deltas) == "Say hi there"
    entries = [entry for d in deltas for entry in d.logprobs]
    assert [e.token_id for e in entries] == prompt + out
    assert entries[0].logprob is None and all(e.logprob is not None for e in entries[1:])


def test_stop_strings_wait_for_min_tokens(tokenizer: Tokenizer) -> None:
    ids = _ids(tokenizer, "ab, cd, ef")
    job = ChoiceJob(
        0, pb.GenerateRequest(request_id="r", prompt_token_ids=[1]), (",",), frozenset({EOS}), None, 3
    )
    chunks = [pb.GenerateChunk(token_ids=ids)]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), job))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    first_comma = tokenizer.decode(ids[: ids.index(_ids(tokenizer, ",")[0]) + 1])
    assert len(first_comma) < len(text) and text.startswith(first_comma) and not text.endswith(",")
    assert isinstance(events[-1], ChoiceEnd) and events[-1].finish_reason == "stop"


@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_add_text_only_when_not_skipped(tokenizer: Tokenizer, skip: bool) -> None:
    special = tokenizer.token_to_id("<|im_start|>")
    assert special is not None
    ids = [*_ids(tokenizer, "a"), special, *_ids(tokenizer, "b")]
    request = pb.GenerateRequest(request_id="r", prompt_token_ids=[1])
    job = ChoiceJob(0, request, (), frozenset({EOS}), skip_special_tokens=skip)
    chunks = [pb.GenerateChunk(token_ids=ids, finish_reason=pb.FINISH_REASON_LENGTH)]
    events = asyncio.run(_run(tokenizer, ScriptedVerifier(chunks), job))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == ("ab" if skip else "a<|im_start|>b")
