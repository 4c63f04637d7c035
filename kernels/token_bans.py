"""vLLM's `allowed_token_ids` and `bad_words` on a request's tree rows.

`allowed_token_ids` keeps only those tokens, on every row. A bad word is a token sequence that no
output may end with: a row may not predict its last token where its other tokens end the row's text
so far, which is the request's output plus the drafted path down to the row's node (over the output
only, as in vLLM: the prompt may hold the word). Each row follows its own path, so verification sees
exactly what plain decoding would sample from after it (lossless).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

TokenSequence = tuple[int, ...]


def keep_allowed(logits: torch.Tensor, allowed: Sequence[int]) -> torch.Tensor:
    """logits: [n, V]. Every token outside `allowed` goes to -inf (a new tensor)."""
    out = torch.full_like(logits, float("-inf"), dtype=torch.float32)
    ids = torch.tensor(allowed, dtype=torch.long, device=logits.device)  # repeats copy the same logit
    out[:, ids] = logits.float()[:, ids]
    return out


def ban_bad_words(
    logits: torch.Tensor,
    words: Sequence[TokenSequence],
    tokens: Sequence[int],
    num_prompt: int,
    tree_tokens: torch.Tensor,
    parents: torch.Tensor,
) -> torch.Tensor:
    """logits: [n, V], the rows of a tree's n nodes; `tokens`: the request's prompt and output, the
    output from `num_prompt` on (node 0, the root, is the last of `tokens`). Returns the rows with
    each completed word's last token at -inf (a new tensor)."""
    longest = max(len(word) for word in words) - 1
    drafted, links = tree_tokens.tolist(), parents.tolist()
    rows: list[int] = []
    banned: list[int] = []
    for row in range(logits.shape[0]):
        tail = _text_tail(row, drafted, links, tokens, num_prompt, longest)
        for word in words:
            before = list(word[:-1])
            if not before or tail[len(tail) - len(before) :] == before:
                rows.append(row)
                banned.append(word[-1])
    out = logits.float().clone()
    if rows:
        out[torch.tensor(rows, device=out.device), torch.tensor(banned, device=out.device)] = float("-inf")
    return out


def _text_tail(
    row: int, drafted: list[int], parents: list[int], tokens: Sequence[int], num_prompt: int, size: int
) -> list[int]:
    """The last `size` tokens of a row's text so far: the output, then its path's drafted tokens
    (the root excluded: it is the last of `tokens` already). Only the tail is read, never the whole
    output."""
    path: list[int] = []
    node = row
    while node > 0 and len(path) < size:
        path.append(drafted[node])
        node = parents[node]
    path.reverse()
    needed = size - len(path)
    earlier = list(tokens[max(num_prompt, len(tokens) - needed) :]) if needed > 0 else []
    return earlier + path
