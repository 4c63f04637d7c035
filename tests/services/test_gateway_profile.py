"""SGLang's and vLLM's /start_profile and /stop_profile through the real gateway and verifier (started
with --profile-dir): a trace of the engine's steps is written where the answer says, until stopped or
for `num_steps` steps; the calls that do not fit the profiler's state are 400s, and so is a request
that names its own output directory."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.services.gateway_stack import completion_body

pytestmark = pytest.mark.slow


def _traced_operators(path: str) -> set[str]:
    return {event.get("name", "") for event in json.loads(Path(path).read_text())["traceEvents"]}


def test_a_trace_is_recorded_until_stopped(http: httpx.Client) -> None:
    started = http.post("/start_profile")
    assert started.status_code == 200, started.text
    again = http.post("/start_profile", json={})
    assert again.status_code == 400 and again.json()["error"]["code"] == "profiler_state"
    assert http.post("/v1/completions", json=completion_body(max_tokens=4)).status_code == 200
    stopped = http.post("/stop_profile")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["trace_path"] == started.json()["trace_path"]
    assert any(name.startswith("aten::") for name in _traced_operators(stopped.json()["trace_path"]))
    nothing = http.post("/stop_profile")
    assert nothing.status_code == 400 and "no trace" in nothing.json()["error"]["message"]


def test_a_trace_of_so_many_steps_is_written_by_itself(http: httpx.Client) -> None:
    started = http.post("/start_profile", json={"num_steps": 2, "record_shapes": True})
    assert started.status_code == 200, started.text
    assert http.post("/v1/completions", json=completion_body(max_tokens=6)).status_code == 200
    path = Path(started.json()["trace_path"])
    deadline = time.monotonic() + 30
    while not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.is_file() and http.post("/stop_profile").status_code == 400


def test_a_request_cannot_choose_where_traces_go(http: httpx.Client) -> None:
    for body, param in (({"output_dir": "/tmp/x"}, "output_dir"), ({"num_steps": 0}, "num_steps")):
        refused = http.post("/start_profile", json=body)
        assert refused.status_code == 400 and (refused.json()["error"]["param"] or "").endswith(param)
    assert http.post("/stop_profile").status_code == 400  # nothing was started
