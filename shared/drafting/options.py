"""Plugin options (`--option key=value`, the CLI's flags) into a drafter's frozen config dataclass."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

ConfigT = TypeVar("ConfigT")


def config_from_options(cls: type[ConfigT], options: dict[str, Any], what: str) -> ConfigT:
    """`cls(**options)`; unknown keys and values of the wrong type are a ValueError naming `what`."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown {what} option(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**options)
    except TypeError as exc:  # a value of the wrong type, e.g. a string where a number belongs
        raise ValueError(f"invalid {what} option: {exc}") from exc
