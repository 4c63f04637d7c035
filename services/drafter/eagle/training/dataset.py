"""The training data on disk: shards of token sequences with the target's features, and a manifest.

A shard (safetensors) holds, for S sequences of N tokens in all: `input_ids` int32 [N], `offsets`
int64 [S+1], `answer_starts` int64 [S] (sequence-relative), `features` bfloat16 [N, W] and
`next_argmax` int32 [N] (the target's greedy next token after each position) and, when the manifest's
`top_k` > 0, `top_ids` int32 [N, top_k] and `top_probs` float16 [N, top_k] (the target's most likely next
tokens, the soft labels). `dataset.json` records the feature spec and the shards, and is rewritten after
every shard, so a build can resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from treespec.drafter.eagle.target_features import SequenceFeatures
from treespec.drafter.eagle.training.conversations import Conversation
from treespec.shared.drafting.features import FeatureSpec

MANIFEST = "dataset.json"


@dataclass
class Manifest:
    hidden_size: int
    aux_layer_ids: list[int]
    vocab_size: int
    top_k: int = 0  # soft labels stored per position (0: hard labels only)
    shards: list[str] = field(default_factory=list)
    num_sequences: int = 0
    num_tokens: int = 0
    num_answer_tokens: int = 0

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec(self.hidden_size, tuple(self.aux_layer_ids))

    def save(self, directory: Path) -> None:
        tmp = directory / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(directory / MANIFEST)

    @classmethod
    def load(cls, directory: Path) -> Manifest | None:
        file = directory / MANIFEST
        return cls(**json.loads(file.read_text())) if file.is_file() else None


@dataclass(frozen=True)
class Sequence:
    """One training sequence, read back from a shard."""

    input_ids: torch.Tensor  # [n] long
    features: torch.Tensor  # [n, W] (bfloat16 on disk)
    next_argmax: torch.Tensor  # [n] long
    answer_start: int
    top_ids: torch.Tensor | None = None  # [n, top_k] long: the target's most likely next tokens
    top_probs: torch.Tensor | None = None  # [n, top_k] float: their probabilities

    def to(self, device: torch.device) -> Sequence:
        """The same sequence with its tensors on `device` (training moves one sequence at a time)."""
        if self.input_ids.device == device:
            return self
        return Sequence(
            self.input_ids.to(device),
            self.features.to(device),
            self.next_argmax.to(device),
            self.answer_start,
            None if self.top_ids is None else self.top_ids.to(device),
            None if self.top_probs is None else self.top_probs.to(device),
        )

    def cut(self, n: int) -> Sequence:
        """The first n positions."""
        if self.input_ids.shape[0] <= n:
            return self
        return Sequence(
            self.input_ids[:n],
            self.features[:n],
            self.next_argmax[:n],
            min(self.answer_start, n),
            None if self.top_ids is None else self.top_ids[:n],
            None if self.top_probs is None else self.top_probs[:n],
        )


@dataclass
class ShardWriter:
    directory: Path
    manifest: Manifest
    _pending: list[tuple[Conversation, SequenceFeatures]] = field(default_factory=list)

    @property
    def pending_tokens(self) -> int:
        return sum(len(c.token_ids) for c, _ in self._pending)

    def add(self, conversation: Conversation, features: SequenceFeatures) -> None:
        self._pending.append((conversation, features))

    def flush(self) -> None:
        if not self._pending:
            return
        convs = [c for c, _ in self._pending]
        feats = [f for _, f in self._pending]
        sizes = torch.tensor([len(c.token_ids) for c in convs])
        tensors = {
            "input_ids": torch.tensor([t for c in convs for t in c.token_ids], dtype=torch.int32),
            "offsets": torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]),
            "answer_starts": torch.tensor([c.answer_start for c in convs], dtype=torch.long),
            "features": torch.cat([f.features for f in feats]).to(torch.bfloat16).contiguous(),
            "next_argmax": torch.cat([f.next_argmax for f in feats]).to(torch.int32),
        }
        if self.manifest.top_k:
            tensors["top_ids"] = torch.cat([_present(f.top_ids) for f in feats]).to(torch.int32)
            tensors["top_probs"] = torch.cat([_present(f.top_probs) for f in feats]).to(torch.float16)
        name = f"shard-{len(self.manifest.shards):05d}.safetensors"
        save_file(tensors, str(self.directory / name))
        m = self.manifest
        m.shards.append(name)
        m.num_sequences += len(convs)
        m.num_tokens += int(sizes.sum())
        m.num_answer_tokens += sum(c.num_answer_tokens for c in convs)
        m.save(self.directory)
        self._pending.clear()


def read_shard(path: Path) -> Iterator[Sequence]:
    t = load_file(str(path))
    offsets = t["offsets"].tolist()
    top_ids, top_probs = t.get("top_ids"), t.get("top_probs")
    for i, start in enumerate(t["answer_starts"].tolist()):
        a, b = offsets[i], offsets[i + 1]
        yield Sequence(
            t["input_ids"][a:b].long(),
            t["features"][a:b],
            t["next_argmax"][a:b].long(),
            int(start),
            None if top_ids is None else top_ids[a:b].long(),
            None if top_probs is None else top_probs[a:b].float(),
        )


def read_all(directory: Path) -> list[Sequence]:
    manifest = Manifest.load(directory)
    if manifest is None:
        raise FileNotFoundError(f"no {MANIFEST} in {directory}")
    return [s for name in manifest.shards for s in read_shard(directory / name)]


def _present(tensor: torch.Tensor | None) -> torch.Tensor:
    if tensor is None:
        raise ValueError("the dataset stores soft labels, but the features came without them")
    return tensor
