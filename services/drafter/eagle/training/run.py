"""`treespec train-eagle`: make the data with the target itself, then train a head in a public format."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from treespec.drafter.eagle.checkpoint import TargetShape, feature_spec, load_head, save_head
from treespec.drafter.eagle.head import EagleHead
from treespec.drafter.eagle.head_config import EagleFormat, EagleHeadConfig, HeadConfigError
from treespec.drafter.eagle.target_features import default_aux_layer_ids
from treespec.drafter.eagle.training.conversations import ConversationSettings
from treespec.drafter.eagle.training.data_stage import DataSettings, build_dataset
from treespec.drafter.eagle.training.dataset import Sequence, read_all
from treespec.drafter.eagle.training.draft_vocab import (
    DraftVocab,
    choose_draft_vocab,
    given_draft_vocab,
    grown_draft_vocab,
)
from treespec.drafter.eagle.training.trainer import Trainer, TrainSettings, split_held_out
from treespec.drafter.eagle.training.unrolled import TrainingTargets
from treespec.shared.drafting.features import FeatureSpec
from treespec.shared.model.config import ModelConfig
from treespec.shared.model.loader import LoadOptions, load_model

log = logging.getLogger(__name__)
RECORD_FILE = "training.json"
DEFAULT_DRAFT_VOCAB = 8192  # a fresh EAGLE-3 head's draft vocabulary


@dataclass(frozen=True)
class TrainEagleConfig:
    target: Path
    output: Path
    format: EagleFormat
    data_dir: Path
    data_tokens: int
    train: TrainSettings
    draft_vocab: int | None = None  # EAGLE-3: a fresh head's size (None: 8192); --init-head's grows to it
    data_batch: int = 32
    answer_tokens: int = 256
    top_k: int = 16  # soft labels stored per position (0: train on the greedy token only)
    data_dtype: str = "auto"
    init_head: Path | None = None  # start from this head (its weights and draft vocabulary)


def run(config: TrainEagleConfig) -> dict[str, object]:
    started = time.monotonic()
    target_config = ModelConfig.from_dir(config.target)
    shape = TargetShape(target_config.hidden_size, target_config.vocab_size, target_config.num_layers)
    init = _warm_start(config.init_head, shape, config.format) if config.init_head is not None else None
    head_config = init.config if init is not None else _head_config(target_config, config)
    spec: FeatureSpec = feature_spec(head_config, shape)
    manifest = build_dataset(
        DataSettings(
            config.target,
            config.data_dir,
            spec,
            config.data_tokens,
            batch_size=config.data_batch,
            top_k=config.top_k,
            dtype=config.data_dtype,
            # --seed makes other conversations (each resumed part adds its own offset to it).
            conversations=ConversationSettings(answer_tokens=config.answer_tokens, seed=config.train.seed),
            progress=config.train.progress,
            device=config.train.device,
        )
    )
    data_seconds = time.monotonic() - started
    sequences, held_out = split_held_out(read_all(config.data_dir))
    if config.train.steps == 0:  # nothing is trained: the head is measured on every sequence
        held_out = sequences + held_out
    model = load_model(config.target, LoadOptions(pack_weights=False))
    w = model.weights
    assert isinstance(w.lm_head, torch.Tensor)  # dense: loaded unpacked
    embed = (w.embed if w.embed is not None else w.lm_head.t()).float()
    lm_head = w.lm_head.t().float()  # [V, H] rows
    head, vocab = _starting_head(config, init, head_config, sequences, lm_head, w.norm.float())
    if vocab is None:  # EAGLE: logits through the target's lm_head
        targets = TrainingTargets(embed, lm_head, None)
    else:  # EAGLE-3: its own lm_head over the draft vocabulary
        targets = TrainingTargets(embed, None, vocab.draft_index(target_config.vocab_size))
    coverage = None if vocab is None else vocab.coverage
    del model
    trainer = Trainer(head, targets, sequences, config.train)
    resumed = trainer.resume(shape)
    report = trainer.train()
    save_head(head, config.output, dtype=torch.bfloat16)
    held = trainer.evaluate(held_out)
    record: dict[str, object] = {
        "format": config.format.value,
        "target": str(config.target),
        "data": {
            "sequences": manifest.num_sequences,
            "tokens": manifest.num_tokens,
            "answer_tokens": manifest.num_answer_tokens,
            "soft_labels": manifest.top_k,
            "seconds_this_run": round(data_seconds, 1),
        },
        "draft_vocab": head.config.draft_vocab_size,
        "draft_vocab_coverage": coverage,
        "train": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config.train).items()},
        "init_head": None if config.init_head is None else str(config.init_head),
        "resumed": resumed,
        "steps": report.steps,
        "train_seconds_this_run": round(report.seconds, 1),
        "train_tokens_this_run": report.tokens,
        "train_accuracy_per_step": [round(a, 4) for a in report.accuracy],
        "held_out_sequences": len(held_out),
        "held_out_accuracy_per_step": [round(a, 4) for a in held.all_positions],
        "held_out_answer_accuracy_per_step": [round(a, 4) for a in held.answers],
        "held_out_answer_accuracy_all_tokens_per_step": [round(a, 4) for a in held.answers_all_tokens],
        "size_bytes": (config.output / "model.safetensors").stat().st_size,
    }
    (config.output / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _head_config(target: ModelConfig, config: TrainEagleConfig) -> EagleHeadConfig:
    eagle3 = config.format is EagleFormat.EAGLE3
    raw = {
        "rope_theta": float(target.raw.get("rope_theta", 10000.0)),
        "max_position_embeddings": target.max_position_embeddings,
    }
    for key in ("rope_scaling", "rope_parameters"):
        if target.raw.get(key):
            raw[key] = target.raw[key]
    return EagleHeadConfig(
        format=config.format,
        hidden_size=target.hidden_size,
        intermediate_size=target.intermediate_size,
        num_heads=target.num_heads,
        num_kv_heads=target.num_kv_heads,
        head_dim=target.head_dim,
        rms_norm_eps=target.rms_norm_eps,
        vocab_size=target.vocab_size,
        draft_vocab_size=target.vocab_size,
        target_hidden_size=target.hidden_size,
        aux_layer_ids=default_aux_layer_ids(target.num_layers) if eagle3 else (),
        fc_bias=not eagle3,
        attention_bias=target.attention_bias,
        raw=raw,
    )


def _with_draft_vocab(config: EagleHeadConfig, size: int) -> EagleHeadConfig:
    return replace(config, draft_vocab_size=size)


def _starting_head(
    config: TrainEagleConfig,
    init: EagleHead | None,
    head_config: EagleHeadConfig,
    sequences: list[Sequence],
    lm_head: torch.Tensor,
    norm: torch.Tensor,
) -> tuple[EagleHead, DraftVocab | None]:
    """The head training starts from, with its draft vocabulary (EAGLE-3): --init-head's (grown to
    --draft-vocab when that is larger), or a fresh head over the data's most generated tokens."""
    if init is not None:
        if not init.config.is_eagle3:
            return init, None
        held = init.draft_to_target()
        if config.draft_vocab is None or config.draft_vocab <= held.shape[0]:
            return init, given_draft_vocab(held, sequences, head_config.vocab_size)
        vocab = grown_draft_vocab(held, sequences, head_config.vocab_size, config.draft_vocab)
        return _grown_head(init, vocab), vocab
    if not head_config.is_eagle3:
        return EagleHead(head_config), None
    size = config.draft_vocab if config.draft_vocab is not None else DEFAULT_DRAFT_VOCAB
    vocab = choose_draft_vocab(sequences, head_config.vocab_size, size)
    config3 = _with_draft_vocab(head_config, int(vocab.target_ids.shape[0]))
    head = _init_eagle3_head(config3, lm_head[vocab.target_ids], norm)
    head.get_buffer("d2t").copy_(vocab.d2t)
    head.get_buffer("t2d").copy_(vocab.t2d(head_config.vocab_size))
    return head, vocab


def _grown_head(head: EagleHead, vocab: DraftVocab) -> EagleHead:
    """`head` over the larger draft vocabulary `vocab` (which holds all of its tokens): its own lm_head
    rows for the tokens it had, zero rows for the added ones, every other weight as is. A zero row
    scores 0, below the tokens the head drafts, so the grown head drafts as before until training
    raises the new rows. The target's rows would not do: a trained head's output is not the target's
    hidden state, and the shipped head given the target's rows for 795 more tokens agreed with the
    target on 0.11 of answer tokens instead of 0.49 (on 40 of those conversations: 0.34 with the rows
    scaled by 0.3, 0.43 with zero rows)."""
    grown = EagleHead(_with_draft_vocab(head.config, int(vocab.target_ids.shape[0])))
    resized = {"lm_head.weight", "d2t", "t2d"}
    kept = {k: v for k, v in head.state_dict().items() if k not in resized}
    missing, unexpected = grown.load_state_dict(kept, strict=False)
    assert set(missing) == resized and not unexpected, (missing, unexpected)
    rows = torch.zeros_like(grown.lm_head.weight)
    rows[torch.searchsorted(vocab.target_ids, head.draft_to_target())] = head.lm_head.weight.detach()
    with torch.no_grad():
        grown.lm_head.weight.copy_(rows)
    grown.get_buffer("d2t").copy_(vocab.d2t)
    grown.get_buffer("t2d").copy_(vocab.t2d(head.config.vocab_size))
    return grown


def _warm_start(path: Path, shape: TargetShape, fmt: EagleFormat) -> EagleHead:
    """A saved head (public format) to train on from: the same format as asked for, in float32."""
    head = load_head(path, shape)
    if head.config.format is not fmt:
        raise HeadConfigError(f"--init-head {path} is an {head.config.format.value} head, not {fmt.value}")
    return head.to(torch.float32)


def _init_eagle3_head(config: EagleHeadConfig, lm_head_rows: torch.Tensor, norm: torch.Tensor) -> EagleHead:
    """An EAGLE-3 head whose norm and lm_head start as the target's (its rows of the draft vocabulary):
    the head starts out reading its output the way the target reads its last hidden state, which
    leaves less to learn from a small dataset."""
    head = EagleHead(config)
    with torch.no_grad():
        head.norm.weight.copy_(norm)
        head.lm_head.weight.copy_(lm_head_rows)
    return head
