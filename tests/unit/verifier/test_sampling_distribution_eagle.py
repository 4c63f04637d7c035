"""Sampling stays lossless with EAGLE's draft probabilities: the engine's distribution test (see
test_sampling_distribution.py), drafted by a real EAGLE-3 drafter through LocalTargetAccess.

The head is a random one in the public format; its draft vocabulary is the target's eight most likely
tokens (d2t / t2d rewritten), so that its children, drawn from a q unrelated to the target's p, are
accepted often enough at both depths for the test to mean something.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.unit.drafter.eagle.public_checkpoints import write_eagle3
from tests.unit.verifier.sampling_reference import (
    HIDDEN,
    NEW,
    PROMPT,
    VOCAB,
    Setting,
    Tiny,
    check_follows_target,
    exact_joint,
    make_tiny,
)
from treespec.drafter.eagle.drafter import Eagle3Drafter
from treespec.drafter.merged import drafter as merged_drafter
from treespec.drafter.merged.drafter import MergedDrafter
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.drafting.tree_merge import merge_trees
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

# The tiny models gain nothing from threads, and on a busy 2-core machine torch's spinning threads
# make every step many times slower.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

SAMPLES = 5_000
LAYERS = 3  # EAGLE-3's default features of a 3-layer target: the embedding and layers 0, 1
DRAFT_VOCAB = 8
SETTING = Setting(1.0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return make_tiny(tmp_path_factory.mktemp("tiny-sampling-eagle"), LAYERS)


def write_head(path: Path, tiny: Tiny) -> Path:
    """A random public-format EAGLE-3 head whose draft vocabulary is the target's likeliest tokens
    (by their marginal probability as the second or third generated token)."""
    write_eagle3(path, HIDDEN, VOCAB, LAYERS, draft_vocab=DRAFT_VOCAB)
    joint = exact_joint(tiny, SETTING)
    hot = (joint.sum((0, 2)) + joint.sum((0, 1))).topk(DRAFT_VOCAB).indices.sort().values
    tensors = load_file(str(path / "model.safetensors"))
    tensors["d2t"] = hot - torch.arange(DRAFT_VOCAB)
    tensors["t2d"] = torch.zeros(VOCAB, dtype=torch.bool).index_fill_(0, hot, True)
    save_file(tensors, str(path / "model.safetensors"))
    return path


@pytest.mark.parametrize("merged", [False, True], ids=["eagle3", "eagle3-with-ngram"])
def test_first_three_tokens_follow_the_target_with_eagle_drafts(
    merged: bool, tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `ngram`, the head's trees are merged with n-gram trees: those holding the head's nodes alone
    keep its renormalised draft probabilities, mixed ones are point masses; both must stay lossless."""
    head = write_head(tmp_path / "head", tiny)
    model = load_model(tiny.path)
    # level_cost 0: every level (a random head's are rarely worth one), so that deep nodes are sampled too
    options: dict[str, Any] = {"draft_path": str(head), "draft_probs": True, "seed": 3, "level_cost": 0.0}
    if merged:
        options["ngram"] = {"min_path_prob": 0.0}
    kinds = Counter[str]()

    def recorded(trees: list[TokenTree], budget: TreeBudget) -> TokenTree | None:
        out = merge_trees(trees, budget)
        kinds["none" if out is None else "mixed" if out.probs is None else "head's"] += 1
        return out

    monkeypatch.setattr(merged_drafter, "merge_trees", recorded)
    drafter = create_drafter("eagle3", DrafterContext(VOCAB, tiny.path, options, LocalTargetAccess(model)))
    lead = drafter.lead if isinstance(drafter, MergedDrafter) else drafter
    assert isinstance(lead, Eagle3Drafter) and lead.head.config.draft_vocab_size == DRAFT_VOCAB
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
        model,
    )
    speculation = SpeculationParams(num_draft_tokens=8, num_steps=3, eagle_topk=3)
    sampling = [
        SamplingParams(temperature=SETTING.temperature, max_new_tokens=NEW, ignore_eos=True)
        for _ in range(SAMPLES)
    ]
    requests = [GenerationRequest(f"r/{i}", PROMPT, s, speculation) for i, s in enumerate(sampling)]
    # Unseeded, so that the draft probabilities are used (seeded requests sample by position, without
    # them: coupled_sampling.py); their generators come from torch's, seeded here so the test replays.
    torch.manual_seed(2026)
    results = engine.generate(requests)
    stats = engine.stats
    assert stats.drafted_tokens > 5 * SAMPLES, "the drafter barely drafted"
    assert stats.accepted_tokens > SAMPLES // 4, "speculation barely happened: the test would prove nothing"
    assert stats.accepted_by_depth[1] > SAMPLES // 100, "no second-level draft was accepted"
    if merged:
        assert kinds["mixed"] > SAMPLES // 10 and kinds["head's"] > SAMPLES // 10, kinds
    outcomes = [tuple(results[f"r/{i}"].token_ids) for i in range(SAMPLES)]
    check_follows_target(tiny, SETTING, outcomes, "eagle3 with n-gram t1.0" if merged else "eagle3 t1.0")
