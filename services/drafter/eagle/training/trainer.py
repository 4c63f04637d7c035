"""Stage 2 of training: fit a head on the stored data, with checkpoints in the public format.

Every `save_every` optimizer steps the head is written as a public checkpoint (`checkpoint/`) with
the trainer's state beside it (`trainer_state.pt`: step, optimizer, data order), so an interrupted run
resumes where it stopped; the final head goes to the output folder itself.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from treespec.drafter.eagle.checkpoint import TargetShape, load_head, save_head
from treespec.drafter.eagle.head import EagleHead
from treespec.drafter.eagle.training.dataset import Sequence
from treespec.drafter.eagle.training.unrolled import TrainingTargets, unrolled_loss

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "trainer_state.pt"
ACCURACY_WINDOW = 10  # steps the reported training accuracy covers
HELD_OUT_EVERY = 25  # one sequence in this many is kept out of training


@dataclass(frozen=True)
class TrainSettings:
    output: Path
    steps: int  # optimizer steps
    batch_tokens: int = 4096  # tokens per optimizer step (whole sequences)
    lr: float = 5e-4
    warmup: int = 20
    ttt_steps: int = 4  # drafting steps unrolled per position
    ttt_decay: float = 0.8
    max_sequence: int = 1024  # longer sequences are cut
    grad_clip: float = 0.5
    save_every: int = 50
    seed: int = 0
    progress: bool = True
    device: str = "cpu"  # where the head trains (the data stays in host memory, a sequence moved at a time)


@dataclass
class TrainReport:
    steps: int
    seconds: float
    tokens: int
    accuracy: list[float]  # top-1 per unrolled step, over the last ACCURACY_WINDOW steps' rows


@dataclass(frozen=True)
class HeldOutAccuracy:
    """Top-1 agreement with the target per unrolled step: over every position, and over the rows
    predicting an answer's tokens (what drafting meets when serving)."""

    all_positions: list[float]
    answers: list[float]
    answers_all_tokens: list[float]  # EAGLE-3: answer tokens outside the draft vocabulary count as misses


class Trainer:
    def __init__(
        self, head: EagleHead, targets: TrainingTargets, data: list[Sequence], settings: TrainSettings
    ):
        self.device = torch.device(settings.device)
        self.head = head.move_to(self.device)
        self.targets = targets.to(self.device)
        self.data = [s.cut(settings.max_sequence) for s in data if s.input_ids.shape[0] >= 3]
        self.settings = settings
        params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.step = 0
        self.order: list[int] = []
        self.cursor = 0

    # ---- resume ------------------------------------------------------------------------------

    def resume(self, target: TargetShape) -> bool:
        """Load the last checkpoint's weights and state, if the output folder holds one."""
        state_file = self.settings.output / CHECKPOINT_DIR / STATE_FILE
        if not state_file.is_file():
            return False
        saved = load_head(self.settings.output / CHECKPOINT_DIR, target)
        self.head.load_state_dict(
            {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in saved.state_dict().items()}
        )
        state = torch.load(state_file, weights_only=False, map_location=self.device)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.order, self.cursor = state["step"], state["order"], state["cursor"]
        if any(i >= len(self.data) for i in self.order):  # the data changed since: start a new epoch
            self.order, self.cursor = [], 0
        return True

    def save_checkpoint(self) -> None:
        folder = self.settings.output / CHECKPOINT_DIR
        save_head(self.head, folder, dtype=torch.float32)
        state = {
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "order": self.order,
            "cursor": self.cursor,
        }
        tmp = folder / (STATE_FILE + ".tmp")
        torch.save(state, tmp)
        tmp.replace(folder / STATE_FILE)

    # ---- training ----------------------------------------------------------------------------

    def train(self) -> TrainReport:
        s = self.settings
        start, tokens = time.monotonic(), 0
        hits = [0] * s.ttt_steps
        counts = [0] * s.ttt_steps
        last_window = [0.0] * s.ttt_steps
        bar = tqdm(total=s.steps, initial=self.step, desc="train (steps)", disable=not s.progress)
        self.head.train()
        while self.step < s.steps:
            self._set_lr()
            batch = self._next_batch()
            self.optimizer.zero_grad(set_to_none=True)
            size = sum(int(x.input_ids.shape[0]) for x in batch)
            for seq in batch:
                result = unrolled_loss(self.head, seq.to(self.device), self.targets, s.ttt_steps, s.ttt_decay)
                (result.loss * (seq.input_ids.shape[0] / size)).backward()
                _tally(result.correct, result.counted, hits, counts)
            torch.nn.utils.clip_grad_norm_(self.head.parameters(), s.grad_clip)
            self.optimizer.step()
            self.step += 1
            tokens += size
            accuracy = _ratios(hits, counts)
            bar.set_postfix(acc=" ".join(f"{a:.2f}" for a in accuracy))
            bar.update(1)
            if self.step % ACCURACY_WINDOW == 0:
                last_window = accuracy
                hits, counts = [0] * s.ttt_steps, [0] * s.ttt_steps
            if self.step % s.save_every == 0 or self.step == s.steps:
                self.save_checkpoint()
        bar.close()
        self.head.eval()
        accuracy = _ratios(hits, counts) if any(counts) else last_window
        return TrainReport(self.step, time.monotonic() - start, tokens, accuracy)

    @torch.no_grad()
    def evaluate(self, sequences: list[Sequence]) -> HeldOutAccuracy:
        """Top-1 accuracy per unrolled step on sequences the head did not train on."""
        s = self.settings
        hits, counts = [0] * s.ttt_steps, [0] * s.ttt_steps
        answer_hits, answer_counts = [0] * s.ttt_steps, [0] * s.ttt_steps
        all_rows = [0] * s.ttt_steps
        self.head.eval()
        for seq in sequences:
            seq = seq.cut(s.max_sequence).to(self.device)
            result = unrolled_loss(self.head, seq, self.targets, s.ttt_steps, s.ttt_decay)
            _tally(result.correct, result.counted, hits, counts)
            _tally(result.answer_correct, result.answer_counted, answer_hits, answer_counts)
            all_rows = [a + b for a, b in zip(all_rows, result.answer_rows, strict=True)]
        return HeldOutAccuracy(
            _ratios(hits, counts), _ratios(answer_hits, answer_counts), _ratios(answer_hits, all_rows)
        )

    def _set_lr(self) -> None:
        s = self.settings
        if self.step < s.warmup:
            scale = (self.step + 1) / s.warmup
        else:
            progress = (self.step - s.warmup) / max(1, s.steps - s.warmup)
            scale = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        for group in self.optimizer.param_groups:
            group["lr"] = s.lr * scale

    def _next_batch(self) -> list[Sequence]:
        batch: list[Sequence] = []
        size = 0
        while size < self.settings.batch_tokens:
            if self.cursor >= len(self.order):
                rng = random.Random(self.settings.seed + self.step)
                self.order = list(range(len(self.data)))
                rng.shuffle(self.order)
                self.cursor = 0
            seq = self.data[self.order[self.cursor]]
            self.cursor += 1
            batch.append(seq)
            size += int(seq.input_ids.shape[0])
        return batch


def split_held_out(
    sequences: list[Sequence], every: int = HELD_OUT_EVERY
) -> tuple[list[Sequence], list[Sequence]]:
    """One sequence in `every` is held out of training, to measure how the head generalises: the last
    ones made. Passage turns quote earlier answers, so an answer held out from the middle of the data
    could be trained on as a later prompt's passage; the last answers are quoted, if at all, only by
    the held-out turns after them."""
    count = len(sequences) // every
    cut = len(sequences) - count
    return sequences[:cut], sequences[cut:]


def _tally(correct: list[int], counted: list[int], hits: list[int], counts: list[int]) -> None:
    """Add one sequence's per-step correct and counted rows."""
    for j, (hit, count) in enumerate(zip(correct, counted, strict=True)):
        hits[j] += hit
        counts[j] += count


def _ratios(hits: list[int], counts: list[int]) -> list[float]:
    return [h / c if c else 0.0 for h, c in zip(hits, counts, strict=True)]
