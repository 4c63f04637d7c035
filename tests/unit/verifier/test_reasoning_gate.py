"""The reasoning gate finds the end marker in the output's bytes however tokens split it."""

from __future__ import annotations

import pytest

from treespec.verifier.grammar.reasoning_gate import OPEN, GateState, ReasoningGate

VOCAB = [b"</", b"think", b">", b"</think>", b"a>", b"x</think>\n", b"<", b"/think", b" "]


def _run(gate: ReasoningGate, tokens: list[int]) -> list[GateState]:
    states, state = [], gate.closed
    for token in tokens:
        state = gate.after(state, token)
        states.append(state)
    return states


@pytest.mark.parametrize(
    ("tokens", "opens_at"),
    [
        ([3, 8], 0),  # one special token
        ([8, 0, 1, 2, 8], 3),  # three ordinary ones
        ([6, 7, 2], 2),  # split elsewhere
        ([5, 8], 0),  # inside a token, with bytes around it
        ([0, 1, 4, 0, 1, 2], 5),  # a near miss first ("</thinka>")
    ],
)
def test_the_gate_opens_with_the_token_that_completes_the_marker(tokens: list[int], opens_at: int) -> None:
    states = _run(ReasoningGate(b"</think>", VOCAB), tokens)
    assert [state is OPEN for state in states] == [i >= opens_at for i in range(len(tokens))]


def test_a_closed_gate_keeps_no_more_than_the_marker_could_still_need() -> None:
    gate = ReasoningGate(b"</think>", VOCAB)
    states = _run(gate, [8, 1, 1, 1, 0, 1])
    assert all(state is not OPEN and len(state) <= len(b"</think>") - 1 for state in states)
    assert states[-1] == b"</think"[-7:]  # the marker's first seven bytes are waiting for ">"
    with pytest.raises(ValueError, match="empty"):
        ReasoningGate(b"", VOCAB)
