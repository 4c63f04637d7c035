"""The self-distillation conversations: user turns open with task types, passage turns hold one to
several earlier answers as documents, and the maker renders what the target wrote as chats."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import transformers

from treespec.drafter.eagle.training.conversations import (
    PASSAGE_TASKS,
    USER_OPENINGS,
    ConversationMaker,
    ConversationSettings,
    passage_turn,
    user_opening,
)
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_user_turns_open_with_every_task_type_or_none_at_the_free_share() -> None:
    rng = random.Random(0)
    drawn = [user_opening(rng, 0.25) for _ in range(4000)]
    free = drawn.count("")
    assert 0.22 < free / len(drawn) < 0.28
    assert set(drawn) - {""} == set(USER_OPENINGS)
    assert all(user_opening(rng, 1.0) == "" for _ in range(50))
    assert all(user_opening(rng, 0.0) in USER_OPENINGS for _ in range(50))


def test_a_passage_turn_holds_distinct_earlier_answers_as_documents() -> None:
    passages = [f"answer number {i} about topic {i}" for i in range(5)]
    rng = random.Random(1)
    counts = set()
    for _ in range(300):
        turn = passage_turn(rng, passages, 3)
        held = [p for p in passages if p in turn]
        assert 1 <= len(held) <= 3
        counts.add(len(held))
        assert all(turn.count(p) == 1 for p in held)
        if len(held) == 1:
            assert "Document" not in turn
        else:
            labels = [f"Document {i}:\n" for i in range(1, len(held) + 1)]
            assert all(label in turn for label in labels)
            assert f"Document {len(held) + 1}:" not in turn
        assert any(turn.startswith(t.split("{passage}")[0]) for t in PASSAGE_TASKS)
    assert counts == {1, 2, 3}
    assert all("Document" not in passage_turn(rng, passages, 1) for _ in range(50))
    assert all(passage_turn(rng, passages[:1], 3).count("answer number") == 1 for _ in range(20))


def test_the_maker_answers_user_turns_that_continue_their_opening(smol_tiny: Path) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(smol_tiny)
    engine = Engine(EngineConfig(smol_tiny, max_running_requests=4, max_total_tokens=4096))
    settings = ConversationSettings(
        user_turn_tokens=12, answer_tokens=6, passage_fraction=0.0, free_user_fraction=0.0, min_user_chars=1
    )
    maker = ConversationMaker(engine, tokenizer, settings)
    conversations = list(itertools.chain.from_iterable(itertools.islice(maker.stream(4, 4), 2)))
    assert len(conversations) >= 8
    for c in conversations:
        prompt = str(tokenizer.decode(c.token_ids[: c.answer_start]))
        user = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        assert any(user.startswith(opening) and len(user) > len(opening) for opening in USER_OPENINGS)
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        assert c.token_ids[: c.answer_start] == tokenizer(chat, add_special_tokens=False)["input_ids"]
        assert 1 <= c.num_answer_tokens <= 6
