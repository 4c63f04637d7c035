"""vLLM's `return_token_ids`: token ids beside the text, for clients that must not tokenize the text
again (a reinforcement-learning trainer scores the very tokens sampled).

A whole response has the prompt's ids (chat: the response's `prompt_token_ids`; completions: each
choice's) and each choice's output ids (`token_ids`, its end token included where one ended it). A
stream has them on each choice's first chunk, and on every chunk the output ids that came since that
choice's chunk before: ids whose text is held back (by a reasoning parser or a stop string that may be
starting) go with the chunk that sends it, or with the choice's last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from treespec.gateway.generation import Event


@dataclass
class StreamTokenIds:
    prompts: Sequence[Sequence[int]]  # choice index -> its prompt's ids
    enabled: bool  # the request asked for them
    _pending: dict[int, list[int]] = field(default_factory=dict)
    _started: set[int] = field(default_factory=set)

    def add(self, event: Event) -> None:
        """The ids an event brought, held for the choice's next chunk."""
        if self.enabled:
            self._pending.setdefault(event.index, []).extend(event.token_ids)

    def take(self, index: int) -> list[int] | None:
        """The output ids for the chunk choice `index` sends now (None: not asked for)."""
        return self._pending.pop(index, []) if self.enabled else None

    def prompt(self, index: int) -> list[int] | None:
        """The prompt's ids, on choice `index`'s first chunk only (None: not asked for, or sent)."""
        if not self.enabled or index in self._started:
            return None
        self._started.add(index)
        return list(self.prompts[index])
