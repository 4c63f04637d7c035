"""A draft model must read token ids as the target does: checked from both tokenizer.json files before
anything loads."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.unit.drafter.eagle.engine_runs import VOCAB
from treespec.drafter.standalone.vocabulary import VocabularyMismatchError, check_same_vocabulary
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.store import models_dir, resolve_model_path


def write_tokenizer(folder: Path, vocab: Any, added: tuple[tuple[int, str], ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "model": {"type": "Unigram" if isinstance(vocab, list) else "BPE", "vocab": vocab},
        "added_tokens": [{"id": i, "content": c, "special": True} for i, c in added],
    }
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def test_the_same_tokenizer_passes(tmp_path: Path) -> None:
    smol = resolve_model_path(None, models_dir())
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(smol / "tokenizer.json", copy / "tokenizer.json")
    check_same_vocabulary(copy, smol)


def test_a_token_read_differently_is_named(tmp_path: Path) -> None:
    smol = resolve_model_path(None, models_dir())
    data = json.loads((smol / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    token = next(t for t, i in vocab.items() if i == 1000)
    vocab["zz-not-a-token"] = vocab.pop(token)
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(VocabularyMismatchError, match=r"token id 1000 as 'zz-not-a-token'"):
        check_same_vocabulary(tmp_path, smol)


@pytest.mark.parametrize(
    ("draft", "target", "ok"),
    [
        ({"a": 0, "b": 1, "c": 2}, {"a": 0, "b": 1}, True),  # a larger vocabulary: shared ids agree
        ({"a": 0, "b": 1}, {"b": 0, "a": 1}, False),
        ([["a", 0.0], ["b", -1.0]], {"a": 0, "b": 1}, True),  # Unigram lists its tokens in id order
        ([["b", 0.0]], {"a": 0}, False),
    ],
)
def test_vocabularies_agree_on_the_ids_both_have(tmp_path: Path, draft: Any, target: Any, ok: bool) -> None:
    d, t = write_tokenizer(tmp_path / "d", draft), write_tokenizer(tmp_path / "t", target)
    if ok:
        check_same_vocabulary(d, t)
    else:
        with pytest.raises(VocabularyMismatchError, match="token id 0"):
            check_same_vocabulary(d, t)


def test_added_tokens_count(tmp_path: Path) -> None:
    d = write_tokenizer(tmp_path / "d", {"a": 0}, ((1, "<|im_start|>"),))
    t = write_tokenizer(tmp_path / "t", {"a": 0}, ((1, "<|endoftext|>"),))
    with pytest.raises(VocabularyMismatchError, match="token id 1"):
        check_same_vocabulary(d, t)


def test_without_both_files_it_warns_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = write_tokenizer(tmp_path / "d", {"a": 0})
    with caplog.at_level(logging.WARNING):
        check_same_vocabulary(d, tmp_path)
    assert "cannot compare the draft model's tokenizer" in caplog.text


def test_the_drafter_refuses_a_draft_model_of_another_tokenizer(tiny_path: Path, tmp_path: Path) -> None:
    draft, target = tmp_path / "draft", tmp_path / "target"
    shutil.copytree(tiny_path, draft)
    shutil.copytree(tiny_path, target)
    write_tokenizer(draft, {"x": 0, "y": 1})
    write_tokenizer(target, {"y": 0, "x": 1})
    with pytest.raises(VocabularyMismatchError, match="must share the target's tokenizer"):
        create_drafter("standalone", DrafterContext(VOCAB, target, {"draft_path": str(draft)}))
