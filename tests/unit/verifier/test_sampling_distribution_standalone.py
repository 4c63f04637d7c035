"""Sampling stays lossless with a standalone draft model's draft probabilities: the engine's
distribution test (see test_sampling_distribution.py), drafted by the standalone drafter.

The draft model is the tiny target with noisy weights: its q is close to the target's p but not
equal, so drafts are often accepted and often rejected, at every depth."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.standalone.draft_models import perturbed_copy
from tests.unit.verifier.sampling_reference import (
    NEW,
    PROMPT,
    VOCAB,
    Setting,
    Tiny,
    check_follows_target,
    make_tiny,
)
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SAMPLES = 5_000
SETTING = Setting(1.0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return make_tiny(tmp_path_factory.mktemp("tiny-sampling-standalone"))


def test_first_three_tokens_follow_the_target_with_a_draft_models_drafts(tiny: Tiny, tmp_path: Path) -> None:
    draft = perturbed_copy(tiny.path, tmp_path / "draft", scale=0.3)
    # level_cost 0: every level, so that deep nodes are sampled too
    options = {"draft_path": str(draft), "seed": 3, "level_cost": 0.0}
    drafter = create_drafter("standalone", DrafterContext(VOCAB, tiny.path, options))
    engine = Engine(
        EngineConfig(
            model_path=tiny.path,
            page_size=4,
            max_total_tokens=16_384,
            max_running_requests=1024,
            chunked_prefill_size=4096,
            node_cost=0.0,  # every drafted node verified: a measured cost would prune by machine load
        ),
        drafter,
        load_model(tiny.path),
    )
    speculation = SpeculationParams(num_draft_tokens=8, num_steps=3, eagle_topk=3)
    sampling = SamplingParams(temperature=SETTING.temperature, max_new_tokens=NEW, ignore_eos=True)
    requests = [GenerationRequest(f"r/{i}", PROMPT, sampling, speculation) for i in range(SAMPLES)]
    # Unseeded, so that the draft probabilities are used (seeded requests sample by position, without
    # them: coupled_sampling.py); their generators come from torch's, seeded here so the test replays.
    torch.manual_seed(2026)
    results = engine.generate(requests)
    stats = engine.stats
    assert stats.drafted_tokens > 5 * SAMPLES, "the drafter barely drafted"
    assert SAMPLES // 4 < stats.accepted_tokens < stats.drafted_tokens // 2, "acceptance says nothing"
    assert stats.accepted_by_depth[1] > SAMPLES // 100, "no second-level draft was accepted"
    outcomes = [tuple(results[f"r/{i}"].token_ids) for i in range(SAMPLES)]
    check_follows_target(tiny, SETTING, outcomes, "standalone t1.0")
