"""EAGLE training: the training-time test computes what drafting computes, the draft vocabulary's
public encodings, and `treespec train-eagle` end to end on a tiny random Llama with SmolLM2's
tokenizer (public-format output, resume, drafting with the result in the engine)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from tests.unit.drafter.eagle.smol_tiny import SMOL_HIDDEN, SMOL_LAYERS, SMOL_VOCAB
from treespec.drafter.eagle.checkpoint import TargetShape, load_head
from treespec.drafter.eagle.drafter import EagleDrafter
from treespec.drafter.eagle.head import EagleHead, HeadOutput
from treespec.drafter.eagle.head_config import EagleFormat
from treespec.drafter.eagle.training.data_stage import generation_dtype
from treespec.drafter.eagle.training.dataset import Manifest, Sequence, read_all
from treespec.drafter.eagle.training.trainer import split_held_out
from treespec.drafter.eagle.training.unrolled import TrainingTargets, unrolled_loss
from treespec.kernels import cpu_features
from treespec.shared.cli.main import main
from treespec.shared.drafting.drafter import DrafterContext, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.linear import linear
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

# The tiny models gain nothing from threads, and on a busy 2-core machine torch's spinning threads
# make every step many times slower.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB, HIDDEN, LAYERS = 97, 64, 3  # tests/conftest.py's tiny model


# ---- (a) the training-time test is what drafting does ------------------------------------------


@dataclass
class RunSpy:
    """Wraps an EagleDrafter's batched head pass: the token ids and outputs of every call."""

    calls: list[tuple[torch.Tensor, HeadOutput]]

    @classmethod
    def install(cls, drafter: EagleDrafter, monkeypatch: pytest.MonkeyPatch) -> RunSpy:
        spy = cls([])
        real = drafter._run

        def run(ids: torch.Tensor, *args: Any) -> HeadOutput:
            out = real(ids, *args)
            spy.calls.append((ids.clone(), out))
            return out

        monkeypatch.setattr(drafter, "_run", run)
        return spy


def _unrolled_outputs(
    head: EagleHead, seq: Sequence, targets: TrainingTargets, steps: int
) -> list[HeadOutput]:
    """The head's output of every unrolled step (unrolled_loss computes and drops them)."""
    outputs: list[HeadOutput] = []
    real: Callable[[torch.Tensor, torch.Tensor], HeadOutput] = head.finish

    def finish(residual: torch.Tensor, attn_out: torch.Tensor) -> HeadOutput:
        out = real(residual, attn_out)
        outputs.append(out)
        return out

    head.finish = finish  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            unrolled_loss(head, seq, targets, steps, 0.8)
    finally:
        del head.finish
    assert len(outputs) == steps
    return outputs


@pytest.mark.parametrize("name", ["eagle3", "eagle"])
def test_unrolled_steps_compute_what_drafting_computes(
    name: str, tiny_path: Path, tiny_model: CausalLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 0 at row i is the drafter's catch-up at position i; step 1 at row i is the drafter's
    first-level child carrying token i + 2, expanded from a root at position i + 1."""
    if name == "eagle3":
        head_path = write_eagle3(tmp_path / "h", HIDDEN, VOCAB, LAYERS)  # full draft vocabulary
    else:
        head_path = write_eagle(tmp_path / "h", HIDDEN, VOCAB)
    # float32 products: in bfloat16 a CPU with AMX takes another layout above a dozen rows (training's
    # pass over all 14 positions) than below (the catch-up), and the two round differently.
    options = {"draft_path": str(head_path), "draft_probs": False, "matmul_dtype": "float32"}
    drafter = create_drafter(name, DrafterContext(VOCAB, tiny_path, options, LocalTargetAccess(tiny_model)))
    assert isinstance(drafter, EagleDrafter)
    head, target = drafter.head, drafter.target
    n = 14
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, VOCAB, (n,), generator=g)
    features = torch.randn(n, drafter.ring.spec.width, generator=g)
    seq = Sequence(ids, features, torch.randint(0, VOCAB, (n,), generator=g), answer_start=4)
    embed = target.embed.float()
    if head.config.is_eagle3:
        targets = TrainingTargets(embed, None, torch.arange(VOCAB))
    else:
        rows = linear(torch.eye(HIDDEN, dtype=embed.dtype), target.lm_head).t()  # packed or not
        targets = TrainingTargets(embed, rows.float(), None)
    step0, step1 = _unrolled_outputs(head, seq, targets, 2)

    spy = RunSpy.install(drafter, monkeypatch)
    for i in [0, 1, 5, n - 3]:
        rid = f"r{i}"
        drafter.open(rid, ids[: i + 2].tolist())  # the root is token i + 1
        drafter.commit(rid, [], FeatureSlots(0, drafter.ring.write(features[: i + 1])))
        spy.calls.clear()
        # Every first-level child is expanded (topk = the vocabulary), each in a row of one head pass.
        (tree,) = drafter.propose([DraftQuery(rid, TreeBudget(8, 2, VOCAB))])
        assert tree is not None and int(tree.tokens[0]) == int(ids[i + 1])
        (catch_ids, catch_out), (child_ids, child_out) = spy.calls
        assert catch_ids.tolist() == ids[1 : i + 2].tolist()
        torch.testing.assert_close(catch_out.hidden, step0.hidden[: i + 1], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(catch_out.for_logits, step0.for_logits[: i + 1], rtol=1e-4, atol=1e-5)
        assert sorted(child_ids.tolist()) == list(range(VOCAB))
        row = child_ids.tolist().index(int(ids[i + 2]))
        # The catch-up ran in the native pass (its attention sums in another order than training's), and
        # this random head's layers amplify that rounding a few times over by the child's output.
        torch.testing.assert_close(child_out.hidden[row], step1.hidden[i], rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(child_out.for_logits[row], step1.for_logits[i], rtol=1e-3, atol=1e-4)
        drafter.close(rid)


def test_soft_labels_are_the_target_distribution_over_the_draft_vocabulary(tmp_path: Path) -> None:
    """With top-k labels the EAGLE-3 loss is -sum p log q over the draft vocabulary, p renormalised
    over the labels it holds; one-hot labels at the greedy token give the hard-label loss exactly."""
    head = load_head(write_eagle3(tmp_path / "h", HIDDEN, VOCAB, LAYERS), _tiny_shape())
    n, k = 12, 4
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(3, VOCAB, (n,), generator=g)
    features = torch.randn(n, 3 * HIDDEN, generator=g)
    top_ids = torch.stack([torch.randperm(VOCAB, generator=g)[:k] for _ in range(n)])
    top_probs = torch.softmax(torch.randn(n, k, generator=g), -1)
    greedy = top_ids[:, 0]
    draft_index = torch.arange(VOCAB)
    outside = top_ids[:, 1].unique()  # every row's second label leaves the draft vocabulary
    draft_index[outside[~torch.isin(outside, greedy)]] = -1
    targets = TrainingTargets(torch.randn(VOCAB, HIDDEN, generator=g), None, draft_index)

    hard = Sequence(ids, features, greedy, 3)
    one_hot = Sequence(ids, features, greedy, 3, top_ids, torch.eye(k)[0].expand(n, k))
    soft = Sequence(ids, features, greedy, 3, top_ids, top_probs)
    with torch.no_grad():
        hard_loss = unrolled_loss(head, hard, targets, 1, 0.8).loss
        torch.testing.assert_close(unrolled_loss(head, one_hot, targets, 1, 0.8).loss, hard_loss)
        soft_loss = unrolled_loss(head, soft, targets, 1, 0.8).loss
        (step0,) = _unrolled_outputs(head, soft, targets, 1)

    # By hand: step 0 at row i predicts the token after position i + 1.
    rows = [i for i in range(n - 1) if draft_index[greedy[i + 1]] >= 0]
    log_q = head.lm_head(step0.for_logits).log_softmax(-1)
    expected = []
    for i in rows:
        inside = draft_index[top_ids[i + 1]] >= 0
        p = top_probs[i + 1][inside] / top_probs[i + 1][inside].sum()
        expected.append(-(p * log_q[i, draft_index[top_ids[i + 1][inside]]]).sum())
    torch.testing.assert_close(soft_loss, torch.stack(expected).mean())
    assert not torch.allclose(soft_loss, hard_loss)


def test_answer_accuracy_counts_only_rows_that_predict_an_answer_token(tmp_path: Path) -> None:
    """Row i of step j predicts the token at i + 2 + j: it counts for the answer's accuracy when that
    token lies at or after the answer's start; the all-positions counts hold those rows too."""
    head = load_head(write_eagle3(tmp_path / "h", HIDDEN, VOCAB, LAYERS), _tiny_shape())
    n, answer_start, steps = 14, 9, 3
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(3, VOCAB, (n,), generator=g)
    seq = Sequence(
        ids, torch.randn(n, 3 * HIDDEN, generator=g), torch.randint(3, VOCAB, (n,), generator=g), answer_start
    )
    targets = TrainingTargets(torch.randn(VOCAB, HIDDEN, generator=g), None, torch.arange(VOCAB))
    with torch.no_grad():
        result = unrolled_loss(head, seq, targets, steps, 0.8)
        outputs = _unrolled_outputs(head, seq, targets, steps)
    for j, out in enumerate(outputs):
        rows = [i for i in range(n) if i + 1 + j < n]  # label_at = i + 1 + j inside the sequence
        answer_rows = [i for i in rows if i + 2 + j >= answer_start]
        predicted = head.lm_head(out.for_logits).argmax(-1)
        right = {i for i in rows if int(predicted[i]) == int(seq.next_argmax[i + 1 + j])}
        assert result.counted[j] == len(rows) and result.correct[j] == len(right)
        assert result.answer_counted[j] == len(answer_rows) == n - answer_start + 1
        assert result.answer_correct[j] == len(right & set(answer_rows))
        assert result.answer_rows[j] == len(answer_rows)  # the whole vocabulary is the draft's here

    # Tokens outside the draft vocabulary leave the loss and the in-vocabulary counts, not answer_rows.
    outside = seq.next_argmax[answer_start - 1 :: 2].unique()
    partial = TrainingTargets(
        targets.embed, None, torch.where(torch.isin(torch.arange(VOCAB), outside), -1, 0)
    )
    with torch.no_grad():
        result = unrolled_loss(head, seq, partial, steps, 0.8)
    answer_labels = seq.next_argmax[answer_start - 1 : n]  # what the answer rows predict, at every step
    inside = int((~torch.isin(answer_labels, outside)).sum())
    assert 0 < inside < n - answer_start + 1
    assert result.answer_rows == [n - answer_start + 1] * steps and result.answer_counted == [inside] * steps


def _tiny_shape() -> TargetShape:
    return TargetShape(HIDDEN, VOCAB, LAYERS)


# ---- (b) `treespec train-eagle` end to end ----------------------------------------------------

EAGLE3_TENSORS = {
    "fc.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}
EAGLE_TENSORS = {
    "fc.weight",
    "fc.bias",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "layers.0.post_attention_layernorm.weight",
}


def _train(target: Path, output: Path, data: Path, *extra: str) -> dict[str, Any]:
    argv = ["train-eagle", "--target", str(target), "--output", str(output), "--data-dir", str(data)]
    argv += ["--answer-tokens", "16", "--batch-tokens", "256", "--save-every", "2", "--no-progress"]
    argv += list(extra)
    assert main(argv) == 0
    record: dict[str, Any] = json.loads((output / "training.json").read_text())
    return record


def _tensor_names(path: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118


def _greedy_equals_plain(target: Path, model: CausalLM, name: str, head: Path) -> None:
    rng = random.Random(0)
    prompts = [[rng.randrange(3, SMOL_VOCAB) for _ in range(n)] for n in (5, 12, 30)]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True)

    def generate(drafter: EagleDrafter | None, spec: SpeculationParams) -> tuple[Engine, list[list[int]]]:
        # Free verify rows: a barely trained head's nodes would not pay for them on a CPU.
        config = EngineConfig(model_path=target, page_size=4, max_total_tokens=1024, node_cost=0.0)
        engine = Engine(config, drafter, model)
        requests = [GenerationRequest(f"p{i}", p, sampling, spec) for i, p in enumerate(prompts)]
        results = engine.generate(requests)
        return engine, [results[r.request_id].token_ids for r in requests]

    _, plain = generate(None, SpeculationParams(enabled=False))
    context = DrafterContext(SMOL_VOCAB, target, {"draft_path": str(head)}, LocalTargetAccess(model))
    drafter = create_drafter(name, context)
    assert isinstance(drafter, EagleDrafter)
    engine, drafted = generate(drafter, SpeculationParams(num_draft_tokens=6, num_steps=3, eagle_topk=2))
    assert drafted == plain
    assert engine.stats.drafted_tokens > 0


def test_train_eagle_cli_end_to_end(smol_tiny: Path, tmp_path: Path) -> None:
    shape = TargetShape(SMOL_HIDDEN, SMOL_VOCAB, SMOL_LAYERS)
    out, data = tmp_path / "eagle3", tmp_path / "data3"
    stage = ["--data-tokens", "150", "--data-batch", "4", "--draft-vocab", "256"]
    first = _train(smol_tiny, out, data, *stage, "--steps", "4")

    # The public EAGLE-3 format: loads, the config and tensor names of the public checkpoints.
    head = load_head(out, shape)
    assert head.config.format is EagleFormat.EAGLE3 and head.config.draft_vocab_size == 256
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == 256 and config["target_hidden_size"] == SMOL_HIDDEN
    assert config["vocab_size"] == SMOL_VOCAB and config["num_hidden_layers"] == 1
    public = write_eagle3(tmp_path / "public3", SMOL_HIDDEN, SMOL_VOCAB, SMOL_LAYERS, draft_vocab=256)
    names = _tensor_names(out)
    assert set(names) == EAGLE3_TENSORS == set(_tensor_names(public))
    assert names["fc.weight"] == (SMOL_HIDDEN, 3 * SMOL_HIDDEN)
    assert names["lm_head.weight"] == (256, SMOL_HIDDEN)
    assert head.draft_to_target().unique().numel() == 256

    # training.json records the data and the steps.
    manifest = Manifest.load(data)
    assert manifest is not None and manifest.num_answer_tokens >= 150
    assert manifest.top_k == first["data"]["soft_labels"] == 16  # soft labels by default
    (sequence, *_) = read_all(data)
    assert sequence.top_ids is not None and sequence.top_probs is not None
    # The greedy token is among the labels (the first one, but for ties in a random model's logits).
    assert bool((sequence.top_ids == sequence.next_argmax[:, None]).any(-1).all())
    assert bool((sequence.top_probs.sum(-1) <= 1.01).all()) and bool((sequence.top_probs[:, 0] > 0).all())
    assert first["format"] == "eagle3" and first["steps"] == 4 and first["resumed"] is False
    assert first["data"]["sequences"] == manifest.num_sequences > 0
    assert first["data"]["answer_tokens"] == manifest.num_answer_tokens
    assert first["data"]["tokens"] == manifest.num_tokens
    assert first["train"]["steps"] == 4 and first["draft_vocab"] == 256
    for key in ("held_out_accuracy_per_step", "held_out_answer_accuracy_per_step"):
        assert len(first[key]) == 4 and all(0.0 <= a <= 1.0 for a in first[key])  # --ttt-steps default
    assert torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == 4

    # Resume: training goes on from step 4; the data stage finds its data and makes none.
    shards = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in data.iterdir()}
    second = _train(smol_tiny, out, data, *stage, "--steps", "6")
    assert second["resumed"] is True and second["steps"] == 6 and second["train"]["steps"] == 6
    assert second["data"] == {**first["data"], "seconds_this_run": second["data"]["seconds_this_run"]}
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in data.iterdir()} == shards
    assert torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == 6
    assert second["train_tokens_this_run"] < 6 * 256  # 2 steps: a restart would need 6 of >= 256 tokens

    # The head drafts: greedy output through the engine is plain decoding's.
    model = load_model(smol_tiny)
    _greedy_equals_plain(smol_tiny, model, "eagle3", out)

    # --init-head: training starts from a saved head, with its draft vocabulary (not --draft-vocab's).
    warm_out = tmp_path / "warm"
    warm_stage = ["--data-tokens", "150", "--data-batch", "4", "--draft-vocab", "128"]
    warm = _train(smol_tiny, warm_out, data, *warm_stage, "--steps", "0", "--init-head", str(out))
    assert warm["init_head"] == str(out) and warm["draft_vocab"] == 256 and warm["steps"] == 0
    assert warm["held_out_sequences"] == warm["data"]["sequences"]  # no training: measured on all of it
    assert first["held_out_sequences"] == first["data"]["sequences"] // 25
    start, kept = load_head(out, shape).state_dict(), load_head(warm_out, shape).state_dict()
    assert start.keys() == kept.keys() and all(torch.equal(start[k], kept[k]) for k in start)
    trained = _train(
        smol_tiny, tmp_path / "warm2", data, *warm_stage, "--steps", "2", "--init-head", str(out)
    )
    moved = load_head(tmp_path / "warm2", shape).state_dict()
    assert torch.equal(moved["d2t"], start["d2t"]) and trained["draft_vocab"] == 256
    assert not torch.equal(moved["midlayer.mlp.up_proj.weight"], start["midlayer.mlp.up_proj.weight"])
    _check_grown_head(smol_tiny, tmp_path, data, shape)
    wrong = ["train-eagle", "--target", str(smol_tiny), "--output", str(tmp_path / "wrong")]
    wrong += ["--data-dir", str(data), "--format", "eagle", "--init-head", str(out), "--no-progress"]
    assert main(wrong) == 2  # an EAGLE-3 head cannot start an EAGLE run

    # EAGLE(-2): the public EAGLE format (fc with bias, layers.0.*), which loads and drafts too.
    out2 = tmp_path / "eagle"
    stage2 = ["--format", "eagle", "--data-tokens", "40", "--data-batch", "4", "--steps", "2"]
    hard_labels = ["--soft-labels", "0", "--data-dtype", "float32"]
    record = _train(smol_tiny, out2, tmp_path / "data2", *stage2, *hard_labels)
    manifest2 = Manifest.load(tmp_path / "data2")
    assert manifest2 is not None and manifest2.top_k == 0
    assert all(s.top_ids is None for s in read_all(tmp_path / "data2"))
    assert record["format"] == "eagle" and record["steps"] == 2 and record["draft_vocab_coverage"] is None
    head2 = load_head(out2, shape)
    assert head2.config.format is EagleFormat.EAGLE and head2.config.fc_bias
    config2 = json.loads((out2 / "config.json").read_text())
    assert config2["architectures"] == ["LlamaForCausalLMEagle"] and config2["bias"] is True
    public2 = write_eagle(
        tmp_path / "public2", SMOL_HIDDEN, SMOL_VOCAB, stray_embed=False, weights="model.safetensors"
    )
    assert set(_tensor_names(out2)) == EAGLE_TENSORS == set(_tensor_names(public2).keys())
    _greedy_equals_plain(smol_tiny, model, "eagle", out2)


def _check_grown_head(target: Path, tmp_path: Path, data: Path, shape: TargetShape) -> None:
    """--init-head with a larger --draft-vocab: the head's vocabulary grows by the tokens the data
    generated; its tokens keep their lm_head rows, the added ones start at zero, and every other weight
    stays."""
    start_dir = write_eagle3(tmp_path / "small", SMOL_HIDDEN, SMOL_VOCAB, SMOL_LAYERS, draft_vocab=8)
    out, stage = tmp_path / "grown", ["--data-tokens", "150", "--data-batch", "4"]
    record = _train(
        target, out, data, *stage, "--draft-vocab", "300", "--steps", "0", "--init-head", str(start_dir)
    )
    start, grown = load_head(start_dir, shape), load_head(out, shape)
    old_ids, new_ids = start.draft_to_target(), grown.draft_to_target()
    generated = torch.cat([s.next_argmax[max(0, s.answer_start - 1) :] for s in read_all(data)]).unique()
    assert set(new_ids.tolist()) == set(old_ids.tolist()) | set(generated.tolist())
    assert record["draft_vocab"] == grown.config.draft_vocab_size == new_ids.numel() < 300
    assert new_ids.numel() > 8 and record["draft_vocab_coverage"] == 1.0
    assert torch.equal(grown.get_buffer("t2d").nonzero().flatten(), new_ids)
    at = torch.searchsorted(new_ids, old_ids)
    assert torch.equal(_bf16(grown.lm_head.weight[at]), _bf16(start.lm_head.weight))  # saved in bfloat16
    added = ~torch.isin(new_ids, old_ids)
    assert bool(added.any()) and not bool(grown.lm_head.weight[added].any())
    before, after = start.state_dict(), grown.state_dict()
    for name in before.keys() - {"lm_head.weight", "d2t", "t2d"}:
        assert torch.equal(_bf16(before[name]), _bf16(after[name])), name
    # Without --draft-vocab the head keeps its own vocabulary (not the fresh heads' default, 8192).
    kept = _train(target, tmp_path / "kept", data, *stage, "--steps", "0", "--init-head", str(start_dir))
    assert kept["draft_vocab"] == 8


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.bfloat16)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--soft-labels", "-1"),
        ("--data-tokens", "0"),
        ("--data-batch", "0"),
        ("--steps", "-3"),
        ("--ttt-steps", "0"),
        ("--draft-vocab", "0"),
        ("--lr", "0"),
        ("--lr", "nan"),
        ("--threads", "two"),
    ],
)
def test_train_eagle_refuses_bad_numbers_at_the_flag(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range values exit 2 with the flag's name, before any model or data is touched."""
    output, data = tmp_path / "head", tmp_path / "data"
    argv = ["train-eagle", "--target", str(tmp_path / "no-model"), "--output", str(output)]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--data-dir", str(data), flag, value])
    assert info.value.code == 2
    assert flag in capsys.readouterr().err
    assert not output.exists() and not data.exists()


@pytest.mark.parametrize(
    ("device", "reason"),
    [("cuda:99", "CUDA"), ("mps", "only cpu and cuda"), ("not-a-device", "not a torch device")],
)
def test_train_eagle_refuses_a_device_it_cannot_use(
    device: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with the reason before any model or data is touched (cuda:99: no such GPU anywhere)."""
    output, data = tmp_path / "head", tmp_path / "data"
    argv = ["train-eagle", "--target", str(tmp_path / "no-model"), "--output", str(output)]
    assert main([*argv, "--data-dir", str(data), "--device", device]) == 2
    err = capsys.readouterr().err
    assert "--device" in err and reason in err
    assert not output.exists() and not data.exists()


def test_the_held_out_sequences_are_the_last_ones_made() -> None:
    """Passage turns quote earlier answers: only the last answers are quoted by no training turn."""
    made = [Sequence(torch.tensor([i]), torch.zeros(1, 4), torch.tensor([i]), 0) for i in range(53)]
    train, held = split_held_out(made, every=25)
    assert [int(s.input_ids[0]) for s in held] == [51, 52]
    assert [int(s.input_ids[0]) for s in train] == list(range(51))
    assert split_held_out(made[:10], every=25) == (made[:10], [])


def test_the_seed_makes_other_conversations(smol_tiny: Path, tmp_path: Path) -> None:
    def conversations(name: str, seed: str) -> list[list[int]]:
        data = tmp_path / name / "data"
        stage = ["--data-tokens", "40", "--data-batch", "4", "--draft-vocab", "64", "--steps", "0"]
        _train(smol_tiny, tmp_path / name / "head", data, *stage, "--seed", seed)
        return [s.input_ids.tolist() for s in read_all(data)]

    first = conversations("a", "0")
    assert conversations("b", "0") == first  # the same seed: the same data
    other = conversations("c", "5")
    assert not set(map(tuple, other)) & set(map(tuple, first))


def test_the_data_is_generated_in_bfloat16_only_on_a_cpu_with_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_features, "amx", lambda: False)
    assert generation_dtype("auto") == "float32"
    assert generation_dtype("bfloat16") == "bfloat16"
    monkeypatch.setattr(cpu_features, "amx", lambda: True)
    assert generation_dtype("auto") == "bfloat16"
    assert generation_dtype("float32") == "float32"
    # On a GPU the engine's own default (bfloat16 there), whatever the CPU has.
    assert generation_dtype("auto", "cuda") == "auto"
    assert generation_dtype("float32", "cuda:0") == "float32"
