"""`treespec serve` as a user runs it: prints the URL, serves (with EAGLE3 co-located, its drafts
accepted), restarts a drafter that dies, stops everything on Ctrl-C or when another child dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import psutil
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.tls_files import write_tls_files
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow


@pytest.fixture()
def serve(smollm_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    args = ["serve", "--model-path", str(smollm_path), "--port", str(port)]
    args += ["--verifier-port", str(free_port()), "--drafter-port", str(free_port())]
    args += getattr(request, "param", [])
    process = subprocess.Popen(
        [sys.executable, "-m", "treespec.shared.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    yield process, port
    if process.poll() is None:
        process.kill()
        process.wait()


def wait_for_url(process: subprocess.Popen[str], port: int) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if f"http://127.0.0.1:{port}/v1" in line:
            return
    raise AssertionError(f"treespec serve exited with {process.wait()} before printing its URL")


def children(process: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(process.pid).children(recursive=True)


def services_named(process: subprocess.Popen[str], name: str) -> list[psutil.Process]:
    """The launcher's live processes whose command line holds `name`; one that has just exited (a
    zombie its parent has not reaped yet, or gone) is left out."""
    found = []
    for child in children(process):
        try:
            if name in child.cmdline():
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


# Pace is not these tests' point, so neither the drafter's pace nor the verify cost measured as the
# verifier starts may stop the drafts. Under a CPU hog the co-located head's first passes missed the
# 50 ms deadline three times running, after which the verifier stopped waiting on it, and the first
# reply drafted 7 nodes and accepted none; under two hogs the cost measured made no n-gram node worth
# its row, and the first reply drafted nothing. A killed drafter's stream breaks at once, whatever the
# deadline.
SLOW_CPU = ["--draft-deadline-ms", "10000", "--speculative-node-cost", "0.02"]


@pytest.mark.parametrize(
    "serve", [["--speculative-algorithm", "EAGLE3", "--speculative-eagle-ngram", *SLOW_CPU]], indirect=True
)
def test_eagle3_with_ngram_serves_with_the_shipped_head_co_located(
    serve: tuple[subprocess.Popen[str], int],
) -> None:
    """The drafter process maps the verifier's features through shared memory and its merged drafts
    are accepted: the figures in meta_info come from the whole stack, OpenAI SDK to head (EAGLE3
    alone: the dying drafter's test below)."""
    process, port = serve
    wait_for_url(process, port)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    accepted = 0
    for question in ["What is the capital of France?", "Explain what a hash table is."]:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], max_tokens=32, temperature=0
        )
        assert reply.choices[0].message.content
        meta = (reply.model_extra or {})["meta_info"]
        accepted += meta["spec_accepted_tokens"]
    assert accepted > 0
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0


@pytest.mark.parametrize(
    "serve", [["--speculative-algorithm", "EAGLE3", "--drafter-in-process", *SLOW_CPU]], indirect=True
)
def test_eagle3_serves_with_its_drafter_inside_the_verifier(serve: tuple[subprocess.Popen[str], int]) -> None:
    """`--drafter-in-process`: a verifier and a gateway, no drafter process; the head's drafts are
    accepted and a greedy reply is the same twice."""
    process, port = serve
    wait_for_url(process, port)
    assert services_named(process, "verifier") and not services_named(process, "drafter")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    replies = [
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Explain what a hash table is."}],
            max_tokens=32,
            temperature=0,
        )
        for _ in range(2)
    ]
    assert replies[0].choices[0].message.content == replies[1].choices[0].message.content
    assert sum((r.model_extra or {})["meta_info"]["spec_accepted_tokens"] for r in replies) > 0
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0


@pytest.mark.parametrize(
    "serve",
    [SLOW_CPU, ["--speculative-algorithm", "EAGLE3", *SLOW_CPU]],
    ids=["ngram", "eagle3-co-located"],
    indirect=True,
)
def test_a_dying_drafter_is_restarted_and_costs_no_request(serve: tuple[subprocess.Popen[str], int]) -> None:
    """The drafter is not essential: killed, it is restarted while the verifier decodes plainly, and
    drafting resumes once the verifier's Draft stream reaches the new process (over the local socket the
    killed process left behind, which the new one takes over). Ctrl-C then stops every service, the new
    drafter too."""
    process, port = serve
    wait_for_url(process, port)
    assert all(len(services_named(process, name)) == 1 for name in ("gateway", "verifier", "drafter"))
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    repeat = "Repeat exactly: one two three four five six, one two three four five six."

    def speculated() -> tuple[int, int]:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": repeat}], max_tokens=16, temperature=0
        )
        assert reply.choices[0].message.content
        meta = (reply.model_extra or {})["meta_info"]
        return int(meta["spec_drafted_tokens"]), int(meta["spec_accepted_tokens"])

    def drafted() -> int:
        return speculated()[0]

    drafts, accepted = speculated()
    assert drafts > 0 and accepted > 0
    old = services_named(process, "drafter")[0]
    old.kill()
    old.wait(timeout=10)
    drafted()  # served while the drafter is down or coming back
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new = [p for p in services_named(process, "drafter") if p.pid != old.pid]
        if new and drafted() > 0:
            break
        time.sleep(1.0)
    else:
        raise AssertionError("drafting did not resume after the drafter was killed")
    assert process.poll() is None
    services = children(process)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(services, timeout=10)
    assert not alive


def test_serve_over_https(smollm_path: Path, tmp_path: Path) -> None:
    """vLLM's --ssl-* flags through serve: it waits for its gateway's HTTPS port (whose certificate
    names this address and which asks for a client certificate), prints an https URL, and the
    `openai` client with the test CA's certificates is answered."""
    files = write_tls_files(tmp_path)
    port = free_port()
    args = ["serve", "--model-path", str(smollm_path), "--port", str(port), "--speculative-algorithm", "NONE"]
    args += ["--verifier-port", str(free_port()), *files.server_flags()]
    args += ["--ssl-ca-certs", str(files.ca_pem), "--ssl-cert-reqs", "2"]
    command = [sys.executable, "-m", "treespec.shared.cli.main", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as process:
        try:
            assert process.stdout is not None
            url = f"https://127.0.0.1:{port}/v1"
            assert any(url in line for line in process.stdout), f"serve exited with {process.wait()}"
            http_client = openai.DefaultHttpxClient(verify=files.client_context())
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, http_client=http_client)
            reply = client.chat.completions.create(
                model=client.models.list().data[0].id,
                messages=[{"role": "user", "content": "Say hello."}],
                max_tokens=4,
                temperature=0,
            )
            assert reply.choices[0].message.content
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_a_vllm_draft_model_config_serves_with_a_standalone_draft_model(smollm_path: Path) -> None:
    """vLLM's `draft_model` method through `treespec serve`: a drafter process runs the draft model
    (SmolLM2 itself here, the one model on this machine: its drafts are the target's own greedy
    continuations), the verifier accepts them, and the reply is plain decoding's. Then the verifier is
    killed: the launcher stops every other service and exits 1."""
    port = free_port()
    config = {"method": "draft_model", "model": str(smollm_path), "num_speculative_tokens": 3}
    args = ["serve", "--model-path", str(smollm_path), "--port", str(port)]
    args += ["--verifier-port", str(free_port()), "--drafter-port", str(free_port())]
    args += ["--speculative-config", json.dumps(config), "--speculative-draft-kv-tokens", "4096"]
    # A deadline no load on the test machine's cores reaches: this test is about the drafts, not
    # their pace (a CPU busy with other tests once made every 500 ms step late, and none drafted).
    args += ["--draft-deadline-ms", "10000"]
    process = subprocess.Popen(
        [sys.executable, "-m", "treespec.shared.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for_url(process, port)
        drafter = services_named(process, "drafter")[0]
        assert "STANDALONE" in drafter.cmdline()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        question: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "Name three primary colours."}
        ]
        reply = client.chat.completions.create(model=model, messages=question, max_tokens=24, temperature=0)
        meta = (reply.model_extra or {})["meta_info"]
        assert meta["spec_accepted_tokens"] > 0
        plain = client.chat.completions.create(
            model=model,
            messages=question,
            max_tokens=24,
            temperature=0,
            extra_body={"speculation": {"enabled": False}},
        )
        assert reply.choices[0].message.content == plain.choices[0].message.content
        # An essential service that dies stops the others, and serve exits 1.
        services = children(process)
        os.kill(services_named(process, "verifier")[0].pid, signal.SIGKILL)
        assert process.wait(timeout=60) == 1
        _, alive = psutil.wait_procs(services, timeout=10)
        assert not alive
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
