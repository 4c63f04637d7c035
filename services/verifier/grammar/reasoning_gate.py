"""Where a thinking model's grammar starts: after the end of its reasoning.

With a reasoning parser, vLLM and SGLang let a model such as DeepSeek-R1 or Qwen3 think freely and
enforce structured output on its answer only: the grammar holds from the end of the first occurrence
of a marker (`</think>`) in the output. The gate watches the output's bytes for the marker, across
token boundaries (a marker may be one special token or several ordinary ones); until it has passed,
every token is allowed and the grammar has taken none. The token that completes the marker is not
the grammar's: the answer starts with the next token (bytes of that token after the marker, such as
a newline, are left to the reasoning parser).

A gate's state is the tail of the output's bytes that may still start the marker, or OPEN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

OPEN: Final = None  # the marker has passed: the grammar holds
GateState = bytes | None


class ReasoningGate:
    def __init__(self, marker: bytes, token_bytes: Sequence[bytes]) -> None:
        if not marker:
            raise ValueError("the reasoning end marker is empty")
        self.marker = marker
        self.token_bytes = token_bytes  # each token id's bytes (xgrammar's decoded vocabulary)

    @property
    def closed(self) -> GateState:
        """The state before any output."""
        return b""

    def after(self, state: GateState, token: int) -> GateState:
        """The state once `token` follows."""
        if state is OPEN:
            return OPEN
        seen = state + self.token_bytes[token]
        if self.marker in seen:
            return OPEN
        return seen[-(len(self.marker) - 1) :] if len(self.marker) > 1 else b""  # may start the marker
