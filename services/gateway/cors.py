"""Cross-origin requests: which web pages' scripts may call the gateway from a browser.

vLLM and SGLang answer every origin by default (vLLM's `--allowed-origins`, `--allowed-methods`,
`--allowed-headers`, `--allow-credentials`; SGLang allows all), so a chat page served from another
host works against them out of the box; the gateway does the same, with vLLM's flags to narrow it.
The middleware wraps everything else: a preflight is answered before the API key is asked for, and
refusals (401, 400) carry the headers too, so the page's script can read the error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

ANY = ("*",)


@dataclass(frozen=True)
class CorsPolicy:
    allowed_origins: tuple[str, ...] = ANY  # "*": any; (): no cross-origin call is allowed
    allowed_methods: tuple[str, ...] = ANY
    allowed_headers: tuple[str, ...] = ANY
    allow_credentials: bool = False  # cookies and HTTP authentication (an Authorization header needs none)

    def install(self, app: FastAPI) -> None:
        """Add the middleware (last: the outermost)."""
        app.add_middleware(
            CORSMiddleware,
            allow_origins=self.allowed_origins,
            allow_methods=self.allowed_methods,
            allow_headers=self.allowed_headers,
            allow_credentials=self.allow_credentials,
        )

    def argv(self) -> list[str]:
        """The policy as gateway flags (what differs from the defaults)."""
        default = CorsPolicy()
        out: list[str] = []
        for flag, value, given in (
            ("--allowed-origins", self.allowed_origins, default.allowed_origins),
            ("--allowed-methods", self.allowed_methods, default.allowed_methods),
            ("--allowed-headers", self.allowed_headers, default.allowed_headers),
        ):
            if value != given:
                out += [flag, json.dumps(list(value))]
        return out + (["--allow-credentials"] if self.allow_credentials else [])


def string_list(text: str) -> tuple[str, ...]:
    """A flag's JSON list of strings (vLLM's form: '["http://localhost:3000"]'); a bare string is a
    list of one. A ValueError for anything else."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"not a JSON list of strings: {text}")
    return tuple(value)
