"""The model's default sampling parameters through a real gateway and verifier, with the official
`openai` client: a gateway whose --generation-config folder sets top_k 1 (greedy at any temperature)
and a default token limit, with --override-generation-config on top."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.services.gateway_stack import COUNTING, KEY, MODEL, start, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

CONFIG = {"do_sample": True, "temperature": 1.5, "top_k": 1, "max_new_tokens": 5, "eos_token_id": 2}
OVERRIDES = '{"temperature": 1.2}'


@pytest.fixture(scope="module")
def defaulted(model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("generation-config")
    (folder / "generation_config.json").write_text(json.dumps(CONFIG))
    port = free_port()
    flags = ("--generation-config", str(folder), "--override-generation-config", OVERRIDES)
    service = start_gateway(model_path, verifier, port, folder, (KEY,), flags)
    yield f"http://127.0.0.1:{port}"
    service.stop()


def test_a_request_leaving_fields_out_samples_with_the_model_s_defaults(
    defaulted: str, client: openai.OpenAI
) -> None:
    """No max_tokens: the default limit (5, under completions' own 16); no top_k: 1, so sampling at
    the default temperature gives the greedy text; a request's own fields win."""
    other = openai.OpenAI(base_url=f"{defaulted}/v1", api_key=KEY, max_retries=0, timeout=120)
    greedy = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=5, temperature=0)
    reply = other.completions.create(model=MODEL, prompt=COUNTING, seed=3)
    assert reply.usage is not None and reply.usage.completion_tokens == 5
    assert reply.choices[0].text == greedy.choices[0].text
    chat = other.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to 30."}])
    assert chat.usage is not None and chat.usage.completion_tokens == 5
    longer = other.completions.create(model=MODEL, prompt=COUNTING, max_tokens=7, seed=3)
    assert longer.usage is not None and longer.usage.completion_tokens == 7
    wild = other.completions.create(
        model=MODEL, prompt=COUNTING, max_tokens=8, n=4, seed=1, temperature=2.0, extra_body={"top_k": -1}
    )
    exact = client.completions.create(model=MODEL, prompt=COUNTING, max_tokens=8, temperature=0)
    assert any(c.text != exact.choices[0].text for c in wild.choices)
    # A Responses API response tells what it sampled with: the defaults here, OpenAI's 1 and 1 there.
    told = other.responses.create(model=MODEL, input="Say hi.", max_output_tokens=2)
    assert (told.temperature, told.top_p) == (1.2, 1.0)
    assert told.usage is not None and told.usage.output_tokens <= 2
    plain = client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=2)
    assert (plain.temperature, plain.top_p) == (1.0, 1.0)
    own = client.responses.create(model=MODEL, input="Say hi.", max_output_tokens=2, temperature=0)
    assert own.temperature == 0.0


def test_the_defaults_are_told_as_sglang_s_preferred_sampling_params(
    defaulted: str, http: httpx.Client
) -> None:
    info = httpx.get(f"{defaulted}/get_model_info", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert info["preferred_sampling_params"] == {"temperature": 1.2, "top_k": 1, "max_tokens": 5}
    # The bundled model's generation_config.json sets none: OpenAI's defaults.
    assert http.get("/get_model_info").json()["preferred_sampling_params"] is None


def test_defaults_that_cannot_be_read_stop_the_gateway(model_path: Path, tmp_path: Path) -> None:
    args = ["gateway", "--model-path", str(model_path), "--verifier-address", "127.0.0.1:1"]
    service = start("gateway", [*args, "--override-generation-config", '{"top_k": "many"}'], tmp_path / "log")
    assert service.process.wait(timeout=60) == 2
    assert "--override-generation-config: top_k: Input should be a valid integer" in service.log_tail()
