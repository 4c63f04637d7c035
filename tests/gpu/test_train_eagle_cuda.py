"""`treespec train-eagle --device cuda`: the training-time test computes on the GPU what it computes on
the CPU, and the command makes its data with the engine on the GPU, trains there, resumes there, and
writes a head that drafts losslessly on the GPU.

Run on a GPU machine: `make test-gpu` (or `pytest --run-gpu tests/gpu`)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from tests.unit.drafter.eagle.smol_tiny import SMOL_HIDDEN, SMOL_LAYERS, SMOL_VOCAB
from treespec.drafter.eagle.checkpoint import TargetShape, load_head
from treespec.drafter.eagle.head import EagleHead
from treespec.drafter.eagle.training.dataset import Manifest, Sequence, read_all
from treespec.drafter.eagle.training.unrolled import TrainingTargets, unrolled_loss
from treespec.shared.cli.main import main
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.model.loader import LoadOptions, load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.gpu

VOCAB, HIDDEN, LAYERS = 97, 64, 3  # tests/conftest.py's tiny model


def _loss_and_grads(head: EagleHead, seq: Sequence, targets: TrainingTargets) -> tuple[float, dict[str, Any]]:
    head.zero_grad(set_to_none=True)
    result = unrolled_loss(head, seq, targets, 3, 0.8)
    result.loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in head.named_parameters() if p.grad is not None}
    return float(result.loss.detach()), grads


@pytest.mark.parametrize("fmt", ["eagle3", "eagle"])
def test_the_training_time_test_is_the_same_on_cuda(fmt: str, tmp_path: Path, cuda: torch.device) -> None:
    """Loss and gradients of the unrolled steps (soft labels) on the GPU and the CPU, in float32."""
    shape = TargetShape(HIDDEN, VOCAB, LAYERS)
    path = (
        write_eagle3(tmp_path / "h", HIDDEN, VOCAB, LAYERS, draft_vocab=64)
        if fmt == "eagle3"
        else write_eagle(tmp_path / "h", HIDDEN, VOCAB, weights="model.safetensors")
    )
    n, k = 40, 4
    g = torch.Generator().manual_seed(3)
    width = 3 * HIDDEN if fmt == "eagle3" else HIDDEN
    ids = torch.randint(3, VOCAB, (n,), generator=g)
    top_ids = torch.stack([torch.randperm(VOCAB, generator=g)[:k] for _ in range(n)])
    top_probs = torch.softmax(torch.randn(n, k, generator=g), -1)
    seq = Sequence(ids, torch.randn(n, width, generator=g), top_ids[:, 0], 10, top_ids, top_probs)
    embed = torch.randn(VOCAB, HIDDEN, generator=g)
    cpu_head = load_head(path, shape).move_to(torch.device("cpu"))
    if fmt == "eagle3":
        draft_index = torch.full((VOCAB,), -1, dtype=torch.long)
        draft_index[cpu_head.draft_to_target()] = torch.arange(64)
        targets = TrainingTargets(embed, None, draft_index)
    else:
        targets = TrainingTargets(embed, torch.randn(VOCAB, HIDDEN, generator=g) * 0.1, None)
    cpu_loss, cpu_grads = _loss_and_grads(cpu_head, seq, targets)
    gpu_head = load_head(path, shape).move_to(cuda)
    gpu_loss, gpu_grads = _loss_and_grads(gpu_head, seq.to(cuda), targets.to(cuda))
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-4)
    assert cpu_grads.keys() == gpu_grads.keys() and cpu_grads
    for name, want in cpu_grads.items():
        err = (gpu_grads[name] - want).norm() / want.norm().clamp(min=1e-12)
        assert float(err) < 1e-3, (name, float(err))


def _train(target: Path, output: Path, data: Path, device: torch.device, *extra: str) -> dict[str, Any]:
    argv = ["train-eagle", "--target", str(target), "--output", str(output), "--data-dir", str(data)]
    argv += ["--answer-tokens", "16", "--batch-tokens", "256", "--save-every", "2", "--no-progress"]
    argv += ["--device", str(device), *extra]
    assert main(argv) == 0
    record: dict[str, Any] = json.loads((output / "training.json").read_text())
    return record


def test_train_eagle_on_cuda_end_to_end(smol_tiny: Path, tmp_path: Path, cuda: torch.device) -> None:
    shape = TargetShape(SMOL_HIDDEN, SMOL_VOCAB, SMOL_LAYERS)
    out, data = tmp_path / "eagle3", tmp_path / "data"
    stage = ["--data-tokens", "150", "--data-batch", "4", "--draft-vocab", "256"]
    first = _train(smol_tiny, out, data, cuda, *stage, "--steps", "4")
    assert first["train"]["device"] == str(cuda) and first["steps"] == 4 and first["resumed"] is False
    manifest = Manifest.load(data)
    assert manifest is not None and manifest.num_answer_tokens >= 150 and manifest.top_k == 16
    (sequence, *_) = read_all(data)
    assert sequence.features.device.type == "cpu" and sequence.features.dtype == torch.bfloat16
    assert sequence.top_ids is not None
    assert bool((sequence.top_ids == sequence.next_argmax[:, None]).any(-1).all())
    head = load_head(out, shape)
    assert head.config.draft_vocab_size == 256 and head.draft_to_target().unique().numel() == 256
    state = torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=False, map_location="cpu")
    assert state["step"] == 4

    # Resume on the GPU: the optimizer's state comes back onto the device, training goes on.
    second = _train(smol_tiny, out, data, cuda, *stage, "--steps", "6")
    assert second["resumed"] is True and second["steps"] == 6
    assert not torch.equal(load_head(out, shape).fc.weight, head.fc.weight)

    # The head drafts on the GPU, losslessly.
    model = load_model(smol_tiny, LoadOptions(device=str(cuda), dtype="float32"))
    rng = random.Random(0)
    prompts = [[rng.randrange(3, SMOL_VOCAB) for _ in range(n)] for n in (5, 12, 30)]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True)

    def generate(spec: SpeculationParams, drafter: Any = None) -> tuple[Engine, list[list[int]]]:
        config = EngineConfig(
            model_path=smol_tiny, device=str(cuda), page_size=4, max_total_tokens=1024, node_cost=0.0
        )
        engine = Engine(config, drafter, model)
        reqs = [GenerationRequest(f"p{i}", p, sampling, spec) for i, p in enumerate(prompts)]
        results = engine.generate(reqs)
        return engine, [results[r.request_id].token_ids for r in reqs]

    _, plain = generate(SpeculationParams(enabled=False))
    context = DrafterContext(SMOL_VOCAB, smol_tiny, {"draft_path": str(out)}, LocalTargetAccess(model))
    drafter = create_drafter("eagle3", context)
    engine, drafted = generate(SpeculationParams(num_draft_tokens=6, num_steps=3, eagle_topk=2), drafter)
    assert drafted == plain
    assert engine.stats.drafted_tokens > 0
