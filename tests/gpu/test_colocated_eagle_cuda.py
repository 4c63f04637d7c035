"""The co-located EAGLE drafter on a GPU, through the whole launch path: a real `treespec drafter
--colocate` process maps the CUDA target's tensors and feature ring through CUDA IPC and serves the
Draft stream over its local socket; it proposes exactly the in-process drafter's trees, and the output
is plain decoding's (the CPU version: tests/services/test_colocated_eagle.py).

Run on a GPU machine: `make test-gpu` (or `pytest --run-gpu tests/gpu`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.services.test_colocated_eagle import KINDS, compare_colocated_with_in_process
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import LoadOptions, load_model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("kind", "ngram"), KINDS)
def test_colocated_drafter_on_cuda_proposes_the_in_process_trees(
    kind: str, ngram: bool, tiny_path: Path, tmp_path: Path, cuda: torch.device
) -> None:
    def load() -> CausalLM:
        model = load_model(tiny_path, LoadOptions(device=str(cuda), dtype="float32"))
        assert model.device.type == "cuda"
        return model

    compare_colocated_with_in_process(kind, ngram, tiny_path, tmp_path, load)
