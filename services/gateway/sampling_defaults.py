"""The model's default sampling parameters: what a request that leaves them out samples with.

Model makers ship the settings their model is meant to sample with in `generation_config.json`
(Qwen2.5: temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05), and vLLM (`--generation-config
auto`, its default) and SGLang (`--sampling-defaults model`) take them as the defaults of every request.
So does the gateway: the keys both read (temperature, top_p, top_k, min_p, repetition_penalty, and
max_new_tokens as the token limit where the client sets none), from the model's folder or another one,
with vLLM's `--override-generation-config` on top; `vllm` (SGLang's `openai`) keeps OpenAI's defaults.
A field the request gives always wins. Checked as a request's fields are, when the gateway starts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from treespec.gateway.schemas import SamplingFields

log = logging.getLogger(__name__)

# generation_config.json's names -> the request's.
KEYS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}
MODEL_SOURCE = "auto"  # the model folder's generation_config.json
NO_DEFAULTS = ("vllm", "openai", "none")  # OpenAI's defaults: nothing read
FILE_NAME = "generation_config.json"
OPENAI_DEFAULT = 1.0  # OpenAI's temperature and top_p where a request sets none

Body = TypeVar("Body", bound=SamplingFields)


@dataclass(frozen=True)
class SamplingDefaults:
    """None: the field's own default (the verifier's: temperature 1, no top-p, top-k or min-p)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None  # the token limit of a request that sets none

    @classmethod
    def of(cls, values: Mapping[str, Any], source: str) -> SamplingDefaults:
        """The KEYS `values` holds (others are ignored, as are nulls), checked against the request's
        own bounds; a ValueError naming `source` and the key for one out of them."""
        fields = {KEYS[key]: value for key, value in values.items() if key in KEYS and value is not None}
        try:
            checked = SamplingFields.model_validate_json(json.dumps({"model": "-", **fields}))
        except ValidationError as exc:
            problem = exc.errors()[0]
            field = next(iter(problem["loc"]), "?")
            key = next((k for k, v in KEYS.items() if v == field), field)
            raise ValueError(f"{source}: {key}: {problem['msg']}") from None
        return cls(**{name: getattr(checked, name) for name in fields})

    def overridden(self, overrides: Mapping[str, Any]) -> SamplingDefaults:
        """These defaults with `overrides` (generation_config.json's names) on top; a ValueError for a
        key that is not one of KEYS."""
        unknown = sorted(set(overrides) - set(KEYS))
        if unknown:
            known = ", ".join(KEYS)
            raise ValueError(f"--override-generation-config: unknown key {unknown[0]!r} (known: {known})")
        values = {**self.as_generation_config(), **overrides}
        return SamplingDefaults.of(values, "--override-generation-config")

    def as_generation_config(self) -> dict[str, Any]:
        """The defaults set, in generation_config.json's names."""
        names = {v: k for k, v in KEYS.items()}
        return {names[k]: v for k, v in asdict(self).items() if v is not None}

    def as_request_fields(self) -> dict[str, Any]:
        """The defaults set, in the request's names (SGLang's preferred_sampling_params)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def apply(self, body: Body) -> Body:
        """`body` with every sampling field it leaves out (None) set to its default."""
        update = {
            k: v
            for k, v in self.as_request_fields().items()
            if k != "max_tokens" and getattr(body, k) is None
        }
        return body.model_copy(update=update) if update else body

    def reported(self, temperature: float | None, top_p: float | None) -> tuple[float, float]:
        """The temperature and top_p a request samples with, as a Responses API response reports them:
        its own, else these defaults, else OpenAI's (1 and 1)."""
        return (
            next(v for v in (temperature, self.temperature, OPENAI_DEFAULT) if v is not None),
            next(v for v in (top_p, self.top_p, OPENAI_DEFAULT) if v is not None),
        )

    def token_limit(self, body: SamplingFields, limit: int | None) -> int | None:
        """The request's token limit: `limit` where the client set one, else the least of the
        endpoint's default (`limit`; None: none) and this default (as vLLM takes it)."""
        if body.token_limit_param is not None or self.max_tokens is None:
            return limit
        return self.max_tokens if limit is None else min(limit, self.max_tokens)


def load_sampling_defaults(
    source: str, model_path: Path, overrides: Mapping[str, Any] | None = None
) -> SamplingDefaults:
    """The defaults `--generation-config SOURCE` and `--override-generation-config JSON` ask for:
    SOURCE `auto` reads the model folder's generation_config.json (none there: no defaults), `vllm`
    (or `openai`, `none`) reads nothing, another value is a folder holding one. A ValueError names
    what cannot be read."""
    defaults = SamplingDefaults()
    if source.lower() not in NO_DEFAULTS:
        folder = model_path if source == MODEL_SOURCE else Path(source)
        if source != MODEL_SOURCE and not (folder / FILE_NAME).is_file():
            raise ValueError(f"--generation-config: no {FILE_NAME} in {folder}")
        defaults = SamplingDefaults.of(_read_json(folder / FILE_NAME), str(folder / FILE_NAME))
    if overrides:
        defaults = defaults.overridden(overrides)
    if defaults.as_request_fields():
        log.info(
            "default sampling parameters (a request's own win): %s; --generation-config vllm keeps "
            "OpenAI's defaults",
            defaults.as_request_fields(),
        )
    return defaults


def _read_json(file: Path) -> Mapping[str, Any]:
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: not a JSON object")
    return data
