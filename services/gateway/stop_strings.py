"""Stop strings over streamed text: cut at the first stop string, hold back what could start one.

Text that might be the beginning of a stop string is held until the next piece decides it, so
that nothing of a stop string is ever sent, even when it is split across tokens.

SGLang's stop regexes likewise (the `regex` module's partial matches tell what could start one): a
match stops the generation where it starts (or, with include_stop, ends); text that a match could
still start in is held back, up to MAX_HELD_CHARS (a pattern such as `.*END` could hold it all). The
last CONTEXT_CHARS of the text sent stay before the text searched, so that look-behinds and word
boundaries see them. A search that runs past REGEX_TIMEOUT_S counts as no match.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import regex

log = logging.getLogger(__name__)

MAX_STOP_PATTERN_CHARS = 1024
MAX_HELD_CHARS = 4096  # text a partial regex match may hold back at most
CONTEXT_CHARS = 64  # text sent already that a regex search still sees before the new text
REGEX_TIMEOUT_S = 0.05  # a search past this counts as no match


def stop_pattern_problem(pattern: str) -> str | None:
    """Why a stop regex is refused (None: it is taken): too long, not a pattern, or one that matches
    the empty string (it would stop every generation at once)."""
    if len(pattern) > MAX_STOP_PATTERN_CHARS:
        return f"a stop regex has at most {MAX_STOP_PATTERN_CHARS} characters"
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        return f"not a regular expression ({exc})"
    if compiled.search("") is not None:
        return "a stop regex must not match the empty string"
    return None


@dataclass(frozen=True)
class StopCheck:
    text: str  # safe to send now
    stopped: bool  # a stop string was found: `text` ends right before it (or with it), generation is over
    matched: str | None = None  # the stop string found (a stop regex: its pattern)


class StopStringMatcher:
    def __init__(
        self, stops: Sequence[str], include_stop: bool = False, patterns: Sequence[str] = ()
    ) -> None:
        """`include_stop`: the text sent ends with the stop string found (vLLM's
        include_stop_str_in_output), not right before it. `patterns`: SGLang's stop regexes."""
        self._stops = tuple(s for s in stops if s)
        self._patterns = tuple(regex.compile(p) for p in patterns)
        self._include_stop = include_stop
        self._held = ""
        self._context = ""  # the end of the text sent, for the regexes
        self.stopped = False

    def push(self, text: str, armed: bool = True) -> StopCheck:
        """Add the next piece of text; return what may be sent. Not `armed` (before `min_tokens`),
        nothing stops and nothing is held back."""
        if self.stopped:
            return StopCheck("", True)
        buffer = self._held + text
        if not armed:
            self._held = ""
            return self._send(buffer)
        found = self._first_stop(buffer)
        if found is not None:
            cut, end, stop = found
            self._held, self.stopped = "", True
            return StopCheck(buffer[:end] if self._include_stop else buffer[:cut], True, stop)
        keep = min(max(self._partial_stop_length(buffer), self._partial_match_length(buffer)), len(buffer))
        self._held = buffer[len(buffer) - keep :]
        return self._send(buffer[: len(buffer) - keep])

    def flush(self) -> str:
        """The text held back, at the end of generation (it turned out not to be a stop string)."""
        held, self._held = self._held, ""
        return held

    def _send(self, text: str) -> StopCheck:
        if self._patterns:
            self._context = (self._context + text)[-CONTEXT_CHARS:]
        return StopCheck(text, False)

    def _first_stop(self, buffer: str) -> tuple[int, int, str] | None:
        """Where the earliest stop starts and ends, and which (a stop string before a regex, and the
        first listed, where several start at one place)."""
        found = [(i, i + len(stop), stop) for stop in self._stops if (i := buffer.find(stop)) >= 0]
        for pattern in self._patterns:
            match = self._search(pattern, buffer, partial=False)
            if match is not None:
                start = len(self._context)
                found.append((match.start() - start, match.end() - start, pattern.pattern))
        return min(found, key=lambda hit: hit[0]) if found else None

    def _partial_stop_length(self, buffer: str) -> int:
        """Length of the longest end of `buffer` that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest

    def _partial_match_length(self, buffer: str) -> int:
        """Length of the end of `buffer` that a stop regex's match could still start in."""
        longest = 0
        for pattern in self._patterns:
            match = self._search(pattern, buffer, partial=True)
            if match is not None:
                longest = max(longest, len(self._context) + len(buffer) - match.start())
        return min(longest, MAX_HELD_CHARS)

    def _search(self, pattern: regex.Pattern[str], buffer: str, partial: bool) -> regex.Match[str] | None:
        try:
            return pattern.search(
                self._context + buffer, len(self._context), partial=partial, timeout=REGEX_TIMEOUT_S
            )
        except TimeoutError:
            log.warning(
                "stop regex %r: a search ran past %.2f s; taken as no match", pattern.pattern, REGEX_TIMEOUT_S
            )
            return None
