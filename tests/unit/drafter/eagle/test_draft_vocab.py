"""EAGLE-3's draft vocabulary: its public encodings, and which tokens it holds (chosen, or grown)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.public_checkpoints import write_eagle3
from treespec.drafter.eagle.checkpoint import TargetShape, load_head, save_head
from treespec.drafter.eagle.training.dataset import Sequence
from treespec.drafter.eagle.training.draft_vocab import DraftVocab, choose_draft_vocab, grown_draft_vocab

VOCAB, HIDDEN, LAYERS = 97, 64, 3
SHAPE = TargetShape(HIDDEN, VOCAB, LAYERS)


def test_draft_vocab_encodings_round_trip(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(2)
    hot = torch.randperm(VOCAB, generator=g)[:40].sort().values
    vocab = DraftVocab(hot, 0.9)
    assert torch.equal(torch.arange(40) + vocab.d2t, hot)  # target id = draft id + d2t[draft id]
    t2d = vocab.t2d(VOCAB)
    assert t2d.dtype == torch.bool and torch.equal(t2d.nonzero().flatten(), hot)
    index = vocab.draft_index(VOCAB)
    assert torch.equal(index[hot], torch.arange(40)) and int((index >= 0).sum()) == 40
    assert bool((index[~t2d] == -1).all())

    # In a head, as the public format stores them: written, read back, and read by the drafter's map.
    head = load_head(write_eagle3(tmp_path / "h", HIDDEN, VOCAB, LAYERS, draft_vocab=40), SHAPE)
    head.get_buffer("d2t").copy_(vocab.d2t)
    head.get_buffer("t2d").copy_(t2d)
    save_head(head, tmp_path / "saved")
    again = load_head(tmp_path / "saved", SHAPE)
    assert torch.equal(again.draft_to_target(), hot)
    assert torch.equal(again.get_buffer("t2d"), t2d)


def test_draft_vocab_is_the_most_generated_tokens() -> None:
    def seq(tokens: list[int], answer_start: int) -> Sequence:
        n = len(tokens)
        return Sequence(
            torch.zeros(n, dtype=torch.long), torch.zeros(n, 1), torch.tensor(tokens), answer_start
        )

    # next_argmax[answer_start - 1:] are the generated tokens: 7 x 4, 3 x 3, 9 x 2, 5 x 1; the prompt's
    # predictions (11, 12) do not count.
    data = [seq([11, 12, 7, 7, 3, 9], 3), seq([12, 7, 7, 3, 3, 9, 5], 2)]
    vocab = choose_draft_vocab(data, 20, 3)
    assert vocab.target_ids.tolist() == [3, 7, 9]
    assert vocab.coverage == pytest.approx(9 / 10)
    assert choose_draft_vocab(data, 20, 50).target_ids.shape[0] == 20  # capped at the vocabulary

    # Grown from a head's vocabulary {9, 15}: it keeps both (15 was never generated here) and adds
    # the most generated tokens it lacks, 7 then 3, then 5, and no token the data never generated.
    grown = grown_draft_vocab(torch.tensor([9, 15]), data, 20, 4)
    assert grown.target_ids.tolist() == [3, 7, 9, 15]
    assert grown.coverage == pytest.approx(9 / 10)
    assert grown_draft_vocab(torch.tensor([9, 15]), data, 20, 7).target_ids.tolist() == [3, 5, 7, 9, 15]
    assert grown_draft_vocab(torch.tensor([9, 15]), data, 20, 2).target_ids.tolist() == [9, 15]
