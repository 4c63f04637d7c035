"""Whether a draft model speaks the target's token ids: the one requirement of standalone drafting.

Drafts travel as token ids, so a draft model with another tokenizer would propose ids that mean other
text: lossless still (the target verifies every token) but useless, and silently so. Where both
folders hold a `tokenizer.json`, their vocabularies (ids and strings, added tokens included) must be
the same over the ids both models have; vocabulary sizes may differ (families pad their embedding
differently), and the drafter then proposes only ids below the smaller size.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"


class VocabularyMismatchError(ValueError):
    pass


def check_same_vocabulary(draft: Path, target: Path | None) -> None:
    """Raise VocabularyMismatchError naming the first id the two tokenizers read differently."""
    if target is None or not (draft / TOKENIZER_FILE).is_file() or not (target / TOKENIZER_FILE).is_file():
        log.warning(
            "cannot compare the draft model's tokenizer with the target's (no %s in both folders); "
            "drafts are useless unless they share token ids",
            TOKENIZER_FILE,
        )
        return
    ours, theirs = _vocabulary(draft / TOKENIZER_FILE), _vocabulary(target / TOKENIZER_FILE)
    for token_id in sorted(ours.keys() & theirs.keys()):
        if ours[token_id] != theirs[token_id]:
            raise VocabularyMismatchError(
                f"the draft model {draft} reads token id {token_id} as {ours[token_id]!r}, the target "
                f"as {theirs[token_id]!r}: a draft model must share the target's tokenizer"
            )
    if not ours.keys() & theirs.keys():
        raise VocabularyMismatchError(f"the draft model {draft} shares no token ids with the target")


def _vocabulary(path: Path) -> dict[int, str]:
    """id -> token string of a Hugging Face tokenizer.json (its model's vocabulary and added tokens)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VocabularyMismatchError(f"cannot read {path}: {exc}") from exc
    model = data.get("model") or {}
    vocab = model.get("vocab") or {}
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        ids = {int(i): str(t) for t, i in vocab.items()}
    else:  # Unigram: [[token, score], ...] in id order
        ids = {i: str(entry[0]) for i, entry in enumerate(vocab)}
    for added in data.get("added_tokens") or []:
        ids[int(added["id"])] = str(added["content"])
    return ids
