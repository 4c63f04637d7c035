"""Self-distillation conversations: the target writes the user turns and answers them itself.

User turns come Magpie-style: the chat template is opened for a user turn and the target, sampling,
writes the question. Left alone, a small target asks mostly for help and advice, and a head trained on
that drafts worse for the coding, maths, translation or role-play people bring (the shipped SmolLM2 head
agreed with the target on 0.48 of answer tokens over its own data, on 0.31 over other prompts); so most
turns start from a generic opening of a task type (USER_OPENINGS), which the target continues. Some turns
are built over the target's own earlier answers, one to three of them as documents (summarise, extract,
translate, answer over them), so that the head also sees long copied contexts. Answers are generated
greedily through the verifier engine, batched, as the served model would answer them. No benchmark
prompt is involved.
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
    "Using only the text below, answer: what are its key points?\n\n{passage}",
    "{passage}\n\nWhich details above matter most, and why?",
    "Write a short report based on the following.\n\n{passage}",
)

# Openings of user turns by task type, continued by the target (generic instruction verbs).
USER_OPENINGS: tuple[str, ...] = (
    "Write a short story about",
    "Write a poem about",
    "Write an email to",
    "Write a blog post about",
    "Write a persuasive essay on",
    "Write a Python function that",
    "Write a JavaScript function that",
    "Write a SQL query that",
    "Fix the bug in this code:",
    "What does this code do?",
    "Implement a class in Python for",
    "Solve for x:",
    "Calculate",
    "A shop sells",
    "If a car travels",
    "How many",
    "Find the value of",
    "Prove that",
    "Explain",
    "Explain how",
    "Why do",
    "What is the difference between",
    "What are the main causes of",
    "Describe the history of",
    "Who was",
    "When did",
    "Compare",
    "List five",
    "Give me",
    "Suggest",
    "Classify the following",
    "Extract the names from",
    "Rewrite this sentence:",
    "Correct the grammar:",
    "Translate into French:",
    "Translate into German:",
    "Translate into Spanish:",
    "Translate into English:",
    "Imagine you are",
    "Pretend to be",
    "Act as a",
    "Let's play a game.",
    "Is it true that",
    "What would happen if",
    "Answer the question step by step:",
    "I have a question about",
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
    passage_fraction: float = 0.3  # share of conversations built over earlier answers
    max_passages: int = 3  # earlier answers such a turn holds, as documents (1 to this)
    free_user_fraction: float = 0.25  # share of other user turns the target starts itself (no opening)
    min_user_chars: int = 12
    seed: int = 0


class ConversationMaker:
    """Keeps the engine's batch full: a finished user turn is answered at once, a finished answer
    makes room for a new conversation (continuous batching, no waiting for a batch's longest)."""

    def __init__(self, engine: Engine, tokenizer: PreTrainedTokenizerBase, settings: ConversationSettings):
        self.engine = engine
        self.tokenizer = tokenizer
        self.settings = settings
        self._rng = random.Random(settings.seed)
        self._user_prefix = self._user_turn_prefix()
        self._passages: list[str] = []
        self._serial = 0
        self._prompts: dict[str, list[int]] = {}  # answer request id -> its prompt
        self._tokens: dict[str, list[int]] = {}
        self._openings: dict[str, str] = {}  # user-turn request id -> the opening it continues

    def stream(self, in_flight: int, every: int) -> Iterator[list[Conversation]]:
        """Endless lists of at least `every` fresh conversations (the caller decides when to stop)."""
        done: list[Conversation] = []
        for _ in range(in_flight):
            self._start_conversation()
        while True:
            for out in self.engine.step():
                self._tokens.setdefault(out.request_id, []).extend(out.token_ids)
                if out.finished:
                    finished = self._finish(out.request_id)
                    if finished is not None:
                        done.append(finished)
            if len(done) >= every:
                yield done
                done = []

    def _start_conversation(self) -> None:
        s = self.settings
        if self._passages and self._rng.random() < s.passage_fraction:
            self._start_answer(self._passage_turn())
            return
        opening = user_opening(self._rng, s.free_user_fraction)
        rid = self._next_id("user")
        self._openings[rid] = opening
        prefix = self._user_prefix + list(self.tokenizer(opening, add_special_tokens=False)["input_ids"])
        request = GenerationRequest(
            rid,
            prefix,
            SamplingParams(
                temperature=s.user_temperature,
                top_p=s.user_top_p,
                seed=self._rng.randrange(2**31),
                max_new_tokens=s.user_turn_tokens,
            ),
            NO_SPECULATION,
        )
        self.engine.add_request(request)

    def _start_answer(self, user: str) -> None:
        prompt = self._chat_prompt(user)
        rid = self._next_id("answer")
        self._prompts[rid] = prompt
        sampling = SamplingParams(temperature=0.0, max_new_tokens=self.settings.answer_tokens)
        self.engine.add_request(GenerationRequest(rid, prompt, sampling, NO_SPECULATION))

    def _finish(self, request_id: str) -> Conversation | None:
        tokens = self._tokens.pop(request_id, [])
        if request_id.startswith("user-"):
            opening = self._openings.pop(request_id, "")
            written = str(self.tokenizer.decode(tokens, skip_special_tokens=True))
            text = (opening + written).strip()
            if len(written.strip()) >= self.settings.min_user_chars:
                self._start_answer(text)
            else:
                self._start_conversation()
            return None
        prompt = self._prompts.pop(request_id)
        self._start_conversation()
        answer = str(self.tokenizer.decode(tokens, skip_special_tokens=True)).strip()
        if len(answer) > 200:
            self._passages.append(answer)
        return Conversation(prompt + tokens, len(prompt))

    # ---- user turns --------------------------------------------------------------------------

    def _user_turn_prefix(self) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": _SENTINEL}], tokenize=False, add_generation_prompt=False
        )
        prefix = str(text).split(_SENTINEL, 1)[0]
        return list(self.tokenizer(prefix, add_special_tokens=False)["input_ids"])

    def _passage_turn(self) -> str:
        return passage_turn(self._rng, self._passages, self.settings.max_passages)

    def _chat_prompt(self, user: str) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def _next_id(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self._serial}"


def user_opening(rng: random.Random, free_fraction: float) -> str:
    """The opening a user turn starts with: "" (the target writes it all) with `free_fraction`, else
    one of USER_OPENINGS (the target's tokens go on from it, a space first where it writes one)."""
    if rng.random() < free_fraction:
        return ""
    return rng.choice(USER_OPENINGS)


def passage_turn(rng: random.Random, passages: list[str], max_passages: int) -> str:
    """A task over 1..max_passages distinct earlier answers; several are labelled as documents."""
    count = rng.randint(1, max(1, min(max_passages, len(passages))))
    chosen = rng.sample(passages, count)
    if count == 1:
        passage = chosen[0]
    else:
        passage = "\n\n".join(f"Document {i + 1}:\n{text}" for i, text in enumerate(chosen))
    return rng.choice(PASSAGE_TASKS).format(passage=passage)
