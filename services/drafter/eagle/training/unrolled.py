"""The training-time test: several drafting steps unrolled over every position of a sequence.

Step 0 at row i reads the target's features of position i and the embedding of token i + 1, and
predicts token i + 2, attending causally over rows <= i. Step j > 0 at row i reads the head's own
output of step j - 1 at row i and token i + 1 + j, at position i + j; it attends to step 0's keys of
rows <= i and to its own row's keys of steps 1..j, which is what a drafted node sees when drafting
(the committed context and its own ancestors). Later steps weigh `decay ** j` in the loss.

Every position is trained on, the prompts' too: the label is the target's own next-token distribution
there when the data holds it (its top-k tokens and probabilities: soft labels, as EAGLE-3 trains),
else its greedy token. Losses: EAGLE-3: cross-entropy over the draft vocabulary (the soft labels
renormalised over the tokens it holds; positions whose greedy token is outside it are left out).
EAGLE(-2): smooth-L1 between the output and the target's feature of the next position, plus
0.1 x cross-entropy through the target's lm_head. Accuracy always counts agreement with the greedy token,
over every position and, apart, over the answers' (where the head drafts when serving: the template
and the user turn are easier or harder to predict than answers, so they would blur the figure); the
rows left out of an EAGLE-3 loss are counted apart, as misses drafting would meet.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from treespec.drafter.eagle.head import EagleHead, attend
from treespec.drafter.eagle.training.dataset import Sequence

TOKEN_LOSS_WEIGHT_EAGLE = 0.1


@dataclass(frozen=True)
class TrainingTargets:
    embed: torch.Tensor  # [V, H] the target's embedding (frozen)
    lm_head: torch.Tensor | None  # [V, H] the target's output rows (EAGLE format; frozen)
    draft_index: torch.Tensor | None  # [V] long: target id -> draft id or -1 (EAGLE-3)

    def to(self, device: torch.device) -> TrainingTargets:
        return TrainingTargets(
            self.embed.to(device),
            None if self.lm_head is None else self.lm_head.to(device),
            None if self.draft_index is None else self.draft_index.to(device),
        )


@dataclass(frozen=True)
class StepResult:
    loss: torch.Tensor  # weighted sum over steps (a scalar with grad)
    correct: list[int]  # per step: rows whose top-1 prediction was the target's token
    counted: list[int]  # per step: rows in the loss
    answer_correct: list[int]  # per step: the same, for rows predicting a token of the answer
    answer_counted: list[int]
    # per step: rows predicting a token of the answer, those outside the draft vocabulary too (which
    # a drafted path can never hold); answer_correct over this is the agreement drafting meets
    answer_rows: list[int]


@dataclass(frozen=True)
class _Hits:
    correct: int
    counted: int
    answer_correct: int
    answer_counted: int
    answer_rows: int

    @classmethod
    def of(cls, hit: torch.Tensor, answer: torch.Tensor, answer_rows: int) -> _Hits:
        """hit, answer: [rows] bool: top-1 right; the row predicts a token of the answer. answer_rows:
        the answer rows before any was left out of the loss."""
        return cls(
            int(hit.sum()), int(hit.numel()), int((hit & answer).sum()), int(answer.sum()), answer_rows
        )

    @classmethod
    def none(cls, answer_rows: int) -> _Hits:
        """No row in the loss; `answer_rows` answer rows all left out of it."""
        return cls(0, 0, 0, 0, answer_rows)


def unrolled_loss(
    head: EagleHead, seq: Sequence, targets: TrainingTargets, steps: int, decay: float
) -> StepResult:
    n = int(seq.input_ids.shape[0])
    ids = seq.input_ids
    device = ids.device
    rows = torch.arange(n, device=device)
    hidden = seq.features.float()
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    total = torch.zeros((), device=device)
    hits: list[_Hits] = []
    for j in range(steps):
        token_at = (rows + 1 + j).clamp(max=n - 1)
        embeds = targets.embed[ids[token_at]]
        li = head.layer_input(embeds, hidden)
        qkv = head.qkv(li.attn_in, rows + j)
        keys.append(qkv.k)
        values.append(qkv.v)
        out = head.finish(li.residual, attend(qkv.q, torch.cat(keys), torch.cat(values), _mask(n, j, device)))
        label_at = rows + 1 + j  # the target's greedy token after position i + 1 + j
        valid = label_at < n
        loss, step_hits = _step_loss(
            head, out.for_logits, out.hidden, seq, label_at.clamp(max=n - 1), valid, targets
        )
        total = total + (decay**j) * loss
        hits.append(step_hits)
        hidden = out.hidden
    return StepResult(
        total,
        [h.correct for h in hits],
        [h.counted for h in hits],
        [h.answer_correct for h in hits],
        [h.answer_counted for h in hits],
        [h.answer_rows for h in hits],
    )


def _mask(n: int, j: int, device: torch.device) -> torch.Tensor:
    """[n, n * (j + 1)]: causal over step 0's keys, then the diagonal of every later step."""
    eye = torch.eye(n, dtype=torch.bool, device=device)
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return torch.cat([causal, *([eye] * j)], dim=1)


def _step_loss(
    head: EagleHead,
    for_logits: torch.Tensor,
    out_hidden: torch.Tensor,
    seq: Sequence,
    label_at: torch.Tensor,
    valid: torch.Tensor,
    targets: TrainingTargets,
) -> tuple[torch.Tensor, _Hits]:
    labels = seq.next_argmax[label_at]
    answer = label_at + 1 >= seq.answer_start  # the predicted token (after position label_at) is the answer's
    answer_rows = int((answer & valid).sum())
    if head.config.is_eagle3:
        assert targets.draft_index is not None
        draft_labels = targets.draft_index[labels]
        keep = valid & (draft_labels >= 0)
        if not bool(keep.any()):
            return for_logits.new_zeros(()), _Hits.none(answer_rows)
        logits = head.lm_head(for_logits[keep])
        loss = _token_loss(logits, seq, label_at[keep], draft_labels[keep], targets.draft_index)
        return loss, _Hits.of(logits.argmax(-1) == draft_labels[keep], answer[keep], answer_rows)
    assert targets.lm_head is not None
    if not bool(valid.any()):
        return for_logits.new_zeros(()), _Hits.none(answer_rows)
    feature_next = seq.features[label_at].float()
    regression = F.smooth_l1_loss(out_hidden[valid], feature_next[valid])
    logits = for_logits[valid] @ targets.lm_head.t()
    token = _token_loss(logits, seq, label_at[valid], labels[valid])
    hits = _Hits.of(logits.argmax(-1) == labels[valid], answer[valid], answer_rows)
    return regression + TOKEN_LOSS_WEIGHT_EAGLE * token, hits


def _token_loss(
    logits: torch.Tensor,
    seq: Sequence,
    rows: torch.Tensor,
    hard_labels: torch.Tensor,
    column_of: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy against the soft labels of positions `rows` when the data holds them, else against
    `hard_labels` (columns). `column_of` maps target ids to logit columns (-1: none; the soft labels
    outside are dropped); None: the columns are target ids."""
    if seq.top_ids is None or seq.top_probs is None:
        return F.cross_entropy(logits, hard_labels)
    ids, probs = seq.top_ids[rows], seq.top_probs[rows]
    if column_of is not None:
        ids = column_of[ids]
        probs = probs * (ids >= 0)
    return _soft_cross_entropy(logits, ids.clamp(min=0), probs)


def _soft_cross_entropy(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -sum_k p_k log softmax(logits)[ids_k], the p renormalised per row."""
    weights = probs / probs.sum(-1, keepdim=True).clamp(min=1e-6)
    return -(weights * logits.log_softmax(-1).gather(1, ids)).sum(-1).mean()
