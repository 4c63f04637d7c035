from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.drafter.standalone.draft_models import perturbed_copy


@pytest.fixture(scope="module")
def other_draft(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny target with noisy weights: a draft model whose proposals are often but not always
    the target's."""
    return perturbed_copy(tiny_path, tmp_path_factory.mktemp("draft") / "model", scale=0.5)
