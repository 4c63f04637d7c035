"""Stage 1 of training: generate conversations with the engine and store the target's features."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from treespec.drafter.eagle.target_features import TargetFeatureReader
from treespec.drafter.eagle.training.conversations import (
    Conversation,
    ConversationMaker,
    ConversationSettings,
)
from treespec.drafter.eagle.training.dataset import Manifest, ShardWriter
from treespec.kernels import cpu_features
from treespec.shared.drafting.features import FeatureSpec
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSettings:
    target: Path
    directory: Path
    spec: FeatureSpec
    num_tokens: int  # stop once the dataset holds this many answer tokens
    batch_size: int = 32
    top_k: int = 16  # soft labels kept per position
    dtype: str = "auto"  # the target's dtype while generating: see generation_dtype
    shard_tokens: int = 16384
    reader_tokens: int = 2048  # tokens per feature-reading forward
    conversations: ConversationSettings = field(default_factory=ConversationSettings)
    progress: bool = True
    device: str = "cpu"  # where the target runs while it makes the data


def build_dataset(settings: DataSettings) -> Manifest:
    """Generate until `num_tokens` answer tokens are stored; resumes an existing dataset."""
    settings.directory.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(settings)
    if manifest.num_answer_tokens >= settings.num_tokens:
        return manifest
    engine = Engine(
        EngineConfig(
            settings.target,
            max_running_requests=settings.batch_size,
            max_total_tokens=settings.batch_size * 1024,
            device=settings.device,
            dtype=generation_dtype(settings.dtype, settings.device),
        )
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(settings.target)
    base = settings.conversations
    # A resumed build continues with other seeds than the shards it already holds.
    conv_settings = ConversationSettings(**{**base.__dict__, "seed": base.seed + 1000 * len(manifest.shards)})
    maker = ConversationMaker(engine, tokenizer, conv_settings)
    reader = TargetFeatureReader(engine.model, settings.spec, max_tokens=settings.reader_tokens + 2048)
    writer = ShardWriter(settings.directory, manifest)
    bar = tqdm(
        total=settings.num_tokens,
        initial=manifest.num_answer_tokens,
        desc="data (answer tokens)",
        disable=not settings.progress,
    )
    stored = manifest.num_answer_tokens
    for batch in maker.stream(in_flight=settings.batch_size, every=max(1, settings.batch_size // 4)):
        _store(batch, reader, writer, settings.reader_tokens)
        added = sum(c.num_answer_tokens for c in batch)
        stored += added
        bar.update(added)
        if writer.pending_tokens >= settings.shard_tokens:
            writer.flush()
        if stored >= settings.num_tokens:
            break
    writer.flush()
    bar.close()
    return manifest


def _manifest(settings: DataSettings) -> Manifest:
    existing = Manifest.load(settings.directory)
    spec = settings.spec
    if existing is None:
        config = transformers.AutoConfig.from_pretrained(settings.target)
        return Manifest(spec.hidden_size, list(spec.aux_layer_ids), int(config.vocab_size), settings.top_k)
    if existing.spec != spec or existing.top_k != settings.top_k:
        raise ValueError(
            f"{settings.directory} holds features {existing.spec} with top-{existing.top_k} labels, "
            f"not {spec} with top-{settings.top_k}: use another --data-dir"
        )
    return existing


def generation_dtype(requested: str, device: str = "cpu") -> str:
    """ "auto": on a GPU the engine's own default there (bfloat16, the dtype a GPU serves the target
    in). On a CPU bfloat16 where it has AMX, which makes the data several times faster to generate;
    float32 elsewhere: without AMX the engine's float32 panel kernel decodes a batch faster than
    bfloat16 (on a 2-core AMD EPYC with AVX512-BF16, 64 requests: 490 against 333 tokens/s), and the
    features are then exactly the served target's. The head reads these features in the dtype the target
    serves with, which a bfloat16 dataset approximates to its own precision."""
    if requested != "auto" or torch.device(device).type != "cpu":
        return requested
    return "bfloat16" if cpu_features.amx() else "float32"


def _store(batch: list[Conversation], reader: TargetFeatureReader, writer: ShardWriter, budget: int) -> None:
    """Read features for the batch in forwards of at most `budget` tokens (one sequence may exceed it)."""
    group: list[Conversation] = []
    for conv in batch:
        if group and sum(len(c.token_ids) for c in group) + len(conv.token_ids) > budget:
            _read_group(group, reader, writer)
            group = []
        group.append(conv)
    if group:
        _read_group(group, reader, writer)


def _read_group(group: list[Conversation], reader: TargetFeatureReader, writer: ShardWriter) -> None:
    features = reader.read([c.token_ids for c in group], top_k=writer.manifest.top_k)
    for conv, feats in zip(group, features, strict=True):
        writer.add(conv, feats.cpu())
