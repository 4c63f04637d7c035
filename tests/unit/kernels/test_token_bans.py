"""allowed_token_ids and bad_words on tree rows (kernels/token_bans.py): exact rows banned for crafted
trees, each row judged by its own path over the output (never the prompt)."""

from __future__ import annotations

import math

import torch

from treespec.kernels.token_bans import ban_bad_words, keep_allowed

V = 12


def _banned(rows: torch.Tensor) -> list[list[int]]:
    return [[t for t in range(V) if math.isinf(float(row[t]))] for row in rows]


def test_a_word_is_banned_where_its_other_tokens_end_the_row_s_text() -> None:
    # Output [9, 1]; the root is its last token 1; node 1 = 2 (under the root), node 2 = 7 (under
    # the root), node 3 = 2 (under node 2). Texts: [9,1], [9,1,2], [9,1,7], [9,1,7,2].
    tokens, parents = torch.tensor([1, 2, 7, 2]), torch.tensor([-1, 0, 0, 2])
    words = [(5,), (1, 2, 3), (2, 9), (9, 1, 4)]
    rows = ban_bad_words(torch.zeros(4, V), words, [6, 9, 1], 1, tokens, parents)  # prompt [6]
    assert _banned(rows) == [[4, 5], [3, 5, 9], [5], [5, 9]]


def test_the_prompt_does_not_count_and_a_short_output_is_read_whole() -> None:
    # No output yet: the root (4) is the prompt's last token. Node 1 = 1, node 2 = 2 under it.
    tokens, parents = torch.tensor([4, 1, 2]), torch.tensor([-1, 0, 1])
    words = [(4, 1), (1, 2, 3), (8, 8, 8, 8, 1, 6)]
    rows = ban_bad_words(torch.zeros(3, V), words, [8, 8, 8, 8, 4], 5, tokens, parents)
    assert _banned(rows) == [[], [], [3]]
    # A word longer than the output and path together is never completed; one that fits is.
    longer = ban_bad_words(
        torch.zeros(3, V), [(8, 8, 1, 6), (3, 8, 8, 8, 1, 2, 0)], [4, 3, 8, 8, 8], 1, tokens, parents
    )
    assert _banned(longer) == [[], [6], [0]]


def test_bans_keep_every_other_logit_and_the_input() -> None:
    logits = torch.randn(2, V)
    before = logits.clone()
    rows = ban_bad_words(logits, [(3,)], [1], 0, torch.tensor([1, 2]), torch.tensor([-1, 0]))
    assert torch.equal(logits, before)
    kept = [t for t in range(V) if t != 3]
    assert torch.equal(rows[:, kept], before[:, kept])


def test_only_allowed_tokens_keep_their_logits() -> None:
    logits = torch.randn(3, V)
    rows = keep_allowed(logits, [7, 2, 7])
    assert torch.equal(rows[:, [2, 7]], logits[:, [2, 7]])
    assert _banned(rows) == [[t for t in range(V) if t not in (2, 7)]] * 3
