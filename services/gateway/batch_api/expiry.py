"""OpenAI's expiration policy for files: `expires_after` on an upload (multipart fields
`expires_after[anchor]` and `expires_after[seconds]`, as the SDK writes them) and a batch's
`output_expires_after` for its output and error files. The anchor is the file's creation; the file goes
`seconds` later (1 hour to 30 days). Without one, a file of purpose "batch" goes after 30 days, as on
OpenAI's service, and any other file stays until deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from treespec.gateway.errors import APIError
from treespec.gateway.schema_types import STRICT

MIN_S = 3600
MAX_S = 30 * 24 * 3600
BATCH_INPUT_S = MAX_S  # a "batch" upload's default
_FORM_FIELDS = ("anchor", "seconds")


class ExpiresAfter(BaseModel):
    model_config = STRICT
    anchor: Literal["created_at"]
    seconds: int = Field(ge=MIN_S, le=MAX_S)


def upload_expiry(form: Mapping[str, object], purpose: str) -> int | None:
    """Seconds an uploaded file is kept (None: until deleted), from the form's expires_after fields;
    a 400 naming `expires_after` for a policy that is not one."""
    given = {name: form.get(f"expires_after[{name}]") for name in _FORM_FIELDS}
    if all(value is None for value in given.values()):
        return BATCH_INPUT_S if purpose == "batch" else None
    seconds = given["seconds"]
    try:
        number = int(seconds) if isinstance(seconds, str) and seconds.strip().isdigit() else seconds
        return ExpiresAfter.model_validate({"anchor": given["anchor"], "seconds": number}).seconds
    except ValidationError:
        raise APIError(
            400,
            "'expires_after' needs anchor 'created_at' and seconds from 3600 to 2592000 (30 days), as "
            "expires_after[anchor] and expires_after[seconds].",
            code="invalid_value",
            param="expires_after",
        ) from None
