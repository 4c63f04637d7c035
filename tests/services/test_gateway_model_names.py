"""vLLM's several --served-model-name: the gateway answers to each name, lists a card per name (the
first first, the one it reports itself by) and no longer to the folder's name; through the official
`openai` client against the real gateway and verifier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.services.gateway_stack import HI, KEY, MODEL, start_gateway
from treespec.shared.launcher.ports import free_port

pytestmark = pytest.mark.slow

NAMES = ("smol", "org/gpt-alias")


@pytest.fixture(scope="module")
def aliased(model_path: Path, verifier: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    folder = tmp_path_factory.mktemp("names")
    service = start_gateway(model_path, verifier, port, folder, (KEY,), ("--served-model-name", *NAMES))
    yield f"http://127.0.0.1:{port}"
    service.stop()


def test_every_name_serves_and_only_those(aliased: str) -> None:
    client = openai.OpenAI(base_url=f"{aliased}/v1", api_key=KEY, max_retries=0, timeout=120)
    assert [card.id for card in client.models.list().data] == list(NAMES)
    assert client.models.retrieve(NAMES[1]).id == NAMES[1]
    for name in NAMES:
        reply = client.chat.completions.create(model=name, messages=HI, max_tokens=2, temperature=0)
        assert reply.model == name and reply.choices[0].message.content
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(MODEL)
    info = httpx.get(f"{aliased}/get_server_info", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert info["served_model_name"] == NAMES[0]
