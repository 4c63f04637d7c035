"""The usage's prediction details: the prediction's tokens found in the reply, in order."""

from __future__ import annotations

from treespec.gateway.generation import ChoiceEnd, TextDelta
from treespec.gateway.outcome import Outcome
from treespec.gateway.prediction import EXACT_MATCH_WORK, prediction_details


def test_the_tokens_found_in_order_are_accepted_the_rest_rejected() -> None:
    prediction = [1, 2, 3, 4, 5, 6]
    edited = [1, 2, 9, 4, 5, 6, 7]  # 3 replaced, 7 added
    details = prediction_details(prediction, [edited])
    assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (5, 1)
    reordered = prediction_details(prediction, [[4, 5, 6, 1, 2, 3]])  # only one block keeps its order
    assert reordered.accepted_prediction_tokens == 3
    both = prediction_details(prediction, [edited, prediction])  # summed over the choices
    assert (both.accepted_prediction_tokens, both.rejected_prediction_tokens) == (11, 1)


def test_long_repetitive_pairs_are_still_counted() -> None:
    """Past EXACT_MATCH_WORK the output's frequent tokens only join blocks at their ends, which bounds
    the work on text that repeats a token; a copy is still counted whole."""
    prediction, output = [7, 8] * 16384, [7, 8] * 2000
    assert len(prediction) * len(output) > EXACT_MATCH_WORK
    assert prediction_details(prediction, [output]).accepted_prediction_tokens == len(output)


def test_the_outcome_settles_the_details_once_its_choices_are_in() -> None:
    outcome = Outcome(1, prompt_tokens=4, prediction=[5, 6, 7])
    outcome.add(TextDelta(0, "ab", completion_tokens=2, token_ids=(5, 6)))
    outcome.add(ChoiceEnd(0, "stop", 3, None, token_ids=(2,)))
    outcome.settle()
    details = outcome.usage.completion_tokens_details
    assert details is not None and details.accepted_prediction_tokens == 2
    assert details.rejected_prediction_tokens == 1
    assert Outcome(1, prompt_tokens=4).usage.completion_tokens_details is None
