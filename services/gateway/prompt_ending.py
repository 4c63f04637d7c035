"""How a chat prompt ends: with the assistant's turn opened (the default), with nothing more
(`add_generation_prompt: false`), or inside the final message, which the model then continues (vLLM's
`continue_final_message`: an assistant's reply begun by the client, for instance "The answer is").
The reply holds only what the model wrote after it."""

from __future__ import annotations

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError

from treespec.gateway.schema_types import STRICT


class PromptEndingFields(BaseModel):
    model_config = STRICT
    # None: true, unless the final message is continued (then a new turn cannot be opened too).
    add_generation_prompt: bool | None = None
    continue_final_message: bool = False

    @model_validator(mode="after")
    def _one_ending(self) -> PromptEndingFields:
        if self.continue_final_message and self.add_generation_prompt:
            raise PydanticCustomError(
                "invalid_value",
                "'continue_final_message' continues the final message and 'add_generation_prompt' opens a"
                " new assistant turn; set at most one of them",
            )
        return self

    @property
    def opens_turn(self) -> bool:
        """Whether the template opens the assistant's turn after the messages."""
        if self.add_generation_prompt is None:
            return not self.continue_final_message
        return self.add_generation_prompt
