"""Self-distillation conversations: the target writes the user turns and answers them itself.

User turns come Magpie-style: the chat template is opened for a user turn and the target, sampling,
writes the question. Some turns are built over the target's own earlier answers (summarise, extract,
translate, answer a question about a passage), so that the head also sees long copied contexts. Answers
are generated greedily through the verifier engine, batched, as the served model would answer them.
No benchmark prompt is involved.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

_SENTINEL = "\x00USER-TURN\x00"

# Generic instructions over a passage; {passage} is one of the target's own answers.
PASSAGE_TASKS: tuple[str, ...] = (
    "Summarize the following text in a few sentences.\n\n{passage}",
    "Extract the main facts from this text as a bulleted list.\n\n{passage}",
    "Rewrite the following paragraph in simpler words.\n\n{passage}",
    "Translate the following text into French.\n\n{passage}",
    "Read the passage and list three questions it answers.\n\n{passage}",
    "{passage}\n\nWhat is the main idea of the text above?",
    "Give this text a title and a one-sentence summary.\n\n{passage}",
    "Continue the following text with one more paragraph.\n\n{passage}",
)

NO_SPECULATION = SpeculationParams(enabled=False)


@dataclass(frozen=True)
class Conversation:
    """A chat rendered to token ids: prompt (template + user turn) followed by the answer."""

    token_ids: list[int]
    answer_start: int

    @property
    def num_answer_tokens(self) -> int:
        return len(self.token_ids) - self.answer_start


@dataclass(frozen=True)
class ConversationSettings:
    user_turn_tokens: int = 96
    answer_tokens: int = 256
    user_temperature: float = 1.0
    user_top_p: float = 0.95
    passage_fraction: float = 0.3  # share of conversations built over an earlier answer
    min_user_chars: int = 12
    seed: int = 0


class ConversationMaker:
    def __init__(self, engine: Engine, tokenizer: PreTrainedTokenizerBase, settings: ConversationSettings):
        self.engine = engine
        self.tokenizer = tokenizer
        self.settings = settings
        self._rng = random.Random(settings.seed)
        self._user_prefix = self._user_turn_prefix()
        self._passages: list[str] = []
        self._serial = 0

    def batches(self, batch_size: int) -> Iterator[list[Conversation]]:
        """Endless batches of fresh conversations (the caller decides when it has enough)."""
        while True:
            users = self._user_turns(batch_size)
            yield self._answer(users)

    # ---- user turns --------------------------------------------------------------------------

    def _user_turn_prefix(self) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": _SENTINEL}], tokenize=False, add_generation_prompt=False
        )
        prefix = str(text).split(_SENTINEL, 1)[0]
        return list(self.tokenizer(prefix, add_special_tokens=False)["input_ids"])

    def _user_turns(self, n: int) -> list[str]:
        s = self.settings
        num_passage = sum(self._rng.random() < s.passage_fraction for _ in range(n)) if self._passages else 0
        turns = [self._passage_turn() for _ in range(num_passage)]
        while len(turns) < n:
            turns += self._magpie_turns(n - len(turns))
        return turns

    def _passage_turn(self) -> str:
        task = self._rng.choice(PASSAGE_TASKS)
        return task.format(passage=self._rng.choice(self._passages))

    def _magpie_turns(self, n: int) -> list[str]:
        s = self.settings
        requests = [
            GenerationRequest(
                self._next_id("user"),
                self._user_prefix,
                SamplingParams(
                    temperature=s.user_temperature,
                    top_p=s.user_top_p,
                    seed=self._rng.randrange(2**31),
                    max_new_tokens=s.user_turn_tokens,
                ),
                NO_SPECULATION,
            )
            for _ in range(n)
        ]
        results = self.engine.generate(requests)
        turns = []
        for r in requests:
            text = str(
                self.tokenizer.decode(results[r.request_id].token_ids, skip_special_tokens=True)
            ).strip()
            if len(text) >= s.min_user_chars:
                turns.append(text)
        return turns

    # ---- answers -----------------------------------------------------------------------------

    def _answer(self, users: list[str]) -> list[Conversation]:
        prompts = [self._chat_prompt(u) for u in users]
        requests = [
            GenerationRequest(
                self._next_id("answer"),
                p,
                SamplingParams(temperature=0.0, max_new_tokens=self.settings.answer_tokens),
                NO_SPECULATION,
            )
            for p in prompts
        ]
        results = self.engine.generate(requests)
        conversations = []
        for prompt, request in zip(prompts, requests, strict=True):
            answer = results[request.request_id].token_ids
            conversations.append(Conversation(prompt + answer, len(prompt)))
            text = str(self.tokenizer.decode(answer, skip_special_tokens=True)).strip()
            if len(text) > 200:
                self._passages.append(text)
        return conversations

    def _chat_prompt(self, user: str) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def _next_id(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self._serial}"
