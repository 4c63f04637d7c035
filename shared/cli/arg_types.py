"""Argument types that refuse out-of-range numbers at the flag (argparse exits 2 with the flag's name)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any


def int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def positive_int(text: str) -> int:
    return int_at_least(1)(text)


def non_negative_int(text: str) -> int:
    return int_at_least(0)(text)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not 0 <= value < math.inf:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port; 0 asks the system for a free one."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port lies in 0..65535, got {value}")
    return value


def json_object(text: str, flag: str) -> dict[str, Any]:
    """A flag's JSON object (vLLM's --speculative-config, --override-generation-config); a
    ValueError naming `flag` for anything else."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag}: expected a JSON object, got {type(value).__name__}")
    return value
