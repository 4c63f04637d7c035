"""OpenAI's Predicted Outputs: `prediction: {"type": "content", "content": ...}` on a chat request.

The client sends text it expects the reply to repeat (a file it asks to have edited). The gateway
tokenizes it and the verifier drafts from it (services/verifier/prediction.py), which never changes
the output: only how fast it comes. The usage then says how much of the prediction the reply used,
as OpenAI's does: `accepted_prediction_tokens` are the prediction's tokens that appear in the reply
(in order: the matching blocks of the two token sequences), `rejected_prediction_tokens` the rest.
Matching costs up to the product of the two lengths where tokens repeat (whitespace, a repeated
line): the gateway does it once per response, off its event loop, and on long pairs lets difflib
treat the output's most frequent tokens as junk (they join blocks only at their ends), which bounds
the work.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from treespec.gateway.chat_messages import TextPart
from treespec.gateway.schema_types import STRICT, UnicodeText


class Prediction(BaseModel):
    model_config = STRICT
    type: Literal["content"]
    content: UnicodeText | list[TextPart]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class CompletionTokensDetails(BaseModel):
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int


def prediction_details(
    prediction: Sequence[int], outputs: Sequence[Sequence[int]]
) -> CompletionTokensDetails:
    """Summed over the choices: each choice's output against the whole prediction."""
    accepted = sum(_used(prediction, output) for output in outputs)
    return CompletionTokensDetails(
        accepted_prediction_tokens=accepted,
        rejected_prediction_tokens=len(prediction) * len(outputs) - accepted,
    )


EXACT_MATCH_WORK = 1 << 22  # prediction x output lengths up to which every token is matched exactly


def _used(prediction: Sequence[int], output: Sequence[int]) -> int:
    """How many of the prediction's tokens the output holds, in the prediction's order."""
    exact = len(prediction) * len(output) <= EXACT_MATCH_WORK
    matcher = difflib.SequenceMatcher(None, list(prediction), list(output), autojunk=not exact)
    return sum(block.size for block in matcher.get_matching_blocks())
