"""What a request produced, gathered from its events: texts, finish reasons, usage, figures."""

from __future__ import annotations

from collections.abc import Sequence

from treespec.gateway.generation import ChoiceEnd, Event, SpecFigures, TextDelta, TokenLogprob
from treespec.gateway.prediction import CompletionTokensDetails, prediction_details
from treespec.gateway.responses import MetaInfo, Usage


class Outcome:
    def __init__(
        self,
        num_choices: int,
        prompt_tokens: int,
        choices_per_prompt: int = 1,
        prediction: Sequence[int] = (),
    ) -> None:
        self.prompt_tokens = prompt_tokens  # every prompt once, however many choices it has
        self.choices_per_prompt = choices_per_prompt  # prompt p's choices: p * n ... p * n + n - 1
        self.prediction = prediction  # the predicted output's tokens (none: no prediction details)
        self._texts: list[list[str]] = [[] for _ in range(num_choices)]
        self._token_ids: list[list[int]] = [[] for _ in range(num_choices)]
        self._logprobs: list[list[tuple[TokenLogprob, int]]] = [[] for _ in range(num_choices)]
        self._prompt_logprobs: dict[int, tuple[TokenLogprob, ...]] = {}
        self._details: CompletionTokensDetails | None = None  # the prediction's, once settled
        self._ends: dict[int, ChoiceEnd] = {}

    def add(self, event: Event) -> None:
        self._token_ids[event.index].extend(event.token_ids)
        if event.prompt_logprobs:
            self._prompt_logprobs[event.index] = event.prompt_logprobs
        if isinstance(event, TextDelta):
            self._logprobs[event.index].extend((entry, event.offset) for entry in event.logprobs)
            self._texts[event.index].append(event.text)
        else:
            self._ends[event.index] = event

    @property
    def num_choices(self) -> int:
        return len(self._texts)

    def text(self, index: int) -> str:
        return "".join(self._texts[index])

    def token_ids(self, index: int) -> list[int]:
        """Choice `index`'s output tokens (its end token too, where one ended it)."""
        return list(self._token_ids[index])

    def logprobs(self, index: int) -> list[tuple[TokenLogprob, int]]:
        """Each output token's log-probabilities, with the offset in the text where its delta starts."""
        return self._logprobs[index]

    def prompt_logprobs(self, index: int) -> tuple[TokenLogprob, ...]:
        """vLLM's prompt log-probabilities of choice `index`'s prompt, when the request asked for them."""
        return self._prompt_logprobs.get(index, ())

    def finish_reason(self, index: int) -> str:
        return self._ends[index].finish_reason

    @property
    def finish_reasons(self) -> list[str]:
        return [self._ends[i].finish_reason for i in sorted(self._ends)]

    @property
    def completion_tokens(self) -> int:
        return sum(end.completion_tokens for end in self._ends.values())

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens found in the prefix cache, each prompt counted once (its best choice)."""
        best: dict[int, int] = {}
        for index, end in self._ends.items():
            prompt = index // self.choices_per_prompt
            best[prompt] = max(best.get(prompt, 0), end.cached_tokens)
        return sum(best.values())

    @property
    def usage(self) -> Usage:
        if self.prediction and self._details is None:
            self.settle()
        return Usage.of(self.prompt_tokens, self.completion_tokens, self.cached_tokens, self._details)

    def settle(self) -> None:
        """Count the prediction's tokens the outputs used (the usage's details): once, when they are
        complete (Observation does it off the event loop)."""
        if self.prediction:
            self._details = prediction_details(self.prediction, self._token_ids)

    @property
    def spec(self) -> SpecFigures | None:
        """The figures summed over the choices; None when any choice's are unknown."""
        figures = [end.spec for end in self._ends.values()]
        if not figures or any(f is None for f in figures):
            return None
        known = [f for f in figures if f is not None]
        return SpecFigures(
            verify_steps=sum(f.verify_steps for f in known),
            drafted_tokens=sum(f.drafted_tokens for f in known),
            accepted_tokens=sum(f.accepted_tokens for f in known),
            committed_tokens=sum(f.committed_tokens for f in known),
        )

    @property
    def meta_info(self) -> MetaInfo | None:
        return meta_info(self.spec)


def meta_info(spec: SpecFigures | None) -> MetaInfo | None:
    if spec is None:
        return None
    return MetaInfo(
        spec_verify_steps=spec.verify_steps,
        spec_accept_length=spec.acceptance_length,
        spec_accepted_tokens=spec.accepted_tokens,
        spec_drafted_tokens=spec.drafted_tokens,
    )
