from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.drafter.eagle.engine_runs import HIDDEN, LAYERS, PLAIN, VOCAB, run_requests, tiny_engine
from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from tests.unit.drafter.eagle.smol_tiny import make_smol_tiny
from treespec.shared.model.causal_lm import CausalLM


@pytest.fixture(scope="module")
def smol_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with SmolLM2's vocabulary, tokenizer and chat template."""
    return make_smol_tiny(tmp_path_factory.mktemp("tiny-smol"))


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random heads in each public format, for the tiny target."""
    base = tmp_path_factory.mktemp("heads")
    return {
        "eagle": write_eagle(base / "eagle", HIDDEN, VOCAB),
        "eagle3": write_eagle3(base / "eagle3", HIDDEN, VOCAB, LAYERS, draft_vocab=60),
    }


@pytest.fixture(scope="module")
def reference(tiny_path: Path, tiny_model: CausalLM) -> dict[str, list[int]]:
    """The tiny target's plain greedy outputs for run_prompts()."""
    results = tiny_engine(tiny_path, tiny_model, None).generate(run_requests(PLAIN))
    return {rid: r.token_ids for rid, r in results.items()}
