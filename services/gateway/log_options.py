"""What the gateway tells about each request outside its answer: vLLM's X-Request-Id header
(request_ids.py), the HTTP server's log and a line per generation (request_log.py). One set of
flags, read at the edge (shared/cli/gateway.py) and handed on by `treespec serve` as `argv()`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogOptions:
    request_id_headers: bool = False  # answers carry X-Request-Id (--enable-request-id-headers)
    http_log_level: str = "info"  # uvicorn's own log (--uvicorn-log-level)
    access_log: bool = True  # a line per HTTP request (--disable-uvicorn-access-log turns it off)
    log_requests: bool = False  # a line per generation as it starts and ends (--enable-log-requests)
    max_log_len: int | None = None  # prompt characters and tokens in those lines at most (None: all)

    def argv(self) -> list[str]:
        """The options as gateway flags."""
        out = ["--uvicorn-log-level", self.http_log_level]
        out += ["--enable-request-id-headers"] if self.request_id_headers else []
        out += [] if self.access_log else ["--disable-uvicorn-access-log"]
        out += ["--enable-log-requests"] if self.log_requests else []
        return out + ([] if self.max_log_len is None else ["--max-log-len", str(self.max_log_len)])
