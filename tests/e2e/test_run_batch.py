"""`treespec run-batch` (vLLM's offline batch runner) on SmolLM2: it starts a stack of its own, sends
an OpenAI batch file's requests through the gateway (chat, completions, Responses API), and writes
every line's result in the input's order, the lines it could not send with their reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from treespec.shared.cli.main import main

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}


def _line(custom_id: str, url: str, body: dict[str, Any], method: str = "POST") -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


def test_run_batch_answers_each_line_in_order(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        _line("chat-1", "/v1/chat/completions", {**CHAT, "temperature": 0}),
        _line("comp-1", "/v1/completions", {"model": MODEL, "prompt": "Paris is", "max_tokens": 6}),
        "not json",
        _line("bad-1", "/v1/chat/completions", {**CHAT, "messages": []}),
        _line("resp-1", "/v1/responses", {"model": MODEL, "input": "Say hi.", "max_output_tokens": 6}),
        _line("emb-1", "/v1/embeddings", {"model": MODEL, "input": "hi"}),
        _line("chat-1", "/v1/chat/completions", CHAT),
        _line("chat-2", "/v1/chat/completions", {**CHAT, "temperature": 0}),
        _line("stream-1", "/v1/chat/completions", {**CHAT, "stream": True}),
    ]
    batch, results = tmp_path / "batch.jsonl", tmp_path / "results.jsonl"
    batch.write_text("\n".join(lines) + "\n\n")  # a blank line is no request
    argv = ["run-batch", "-i", str(batch), "-o", str(results), "--model-path", str(smollm_path)]
    assert main([*argv, "--max-concurrency", "2"]) == 0
    out = [json.loads(line) for line in results.read_text().splitlines()]
    assert [o["custom_id"] for o in out] == [
        "chat-1", "comp-1", None, "bad-1", "resp-1", "emb-1", "chat-1", "chat-2", "stream-1"
    ]  # fmt: skip
    statuses = [o["response"]["status_code"] if o["response"] else o["error"]["code"] for o in out]
    assert statuses == [
        200, 200, "invalid_json_line", 400, 200, "invalid_url", "duplicate_custom_id", 200, "invalid_body"
    ]  # fmt: skip
    chat, completion, _, refused, response, *_ = (o["response"] and o["response"]["body"] for o in out)
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"]
    assert out[0]["response"]["request_id"] == chat["id"]
    assert out[7]["response"]["body"]["choices"][0]["message"] == chat["choices"][0]["message"]  # greedy
    assert completion["object"] == "text_completion" and completion["choices"][0]["text"]
    assert refused["error"]["param"] == "messages"
    assert response["object"] == "response" and response["status"] in ("completed", "incomplete")
    assert "9 requests, 4 succeeded, 5 failed" in capsys.readouterr().out


def test_a_missing_batch_file_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    argv = ["run-batch", "-i", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    assert main(argv) == 2
    assert not (tmp_path / "out.jsonl").exists()
