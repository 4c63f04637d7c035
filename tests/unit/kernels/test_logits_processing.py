"""probs_from_logits against a per-row reference and transformers' logits warpers."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from treespec.kernels.logits_processing import NUCLEUS_WIDTHS, greedy_tokens, probs_from_logits


def reference_row(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float
) -> torch.Tensor:
    """One row, the obvious way, in float64: the filters as written in the module docstring."""
    vocab = logits.shape[0]
    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(), vocab).double()
    x = logits.double() / temperature
    if 0 < top_k < vocab:
        kth = x.sort(descending=True).values[top_k - 1]
        x = torch.where(x < kth, float("-inf"), x)
    probs = torch.softmax(x, dim=0)
    if top_p < 1:
        mass, kept = 0.0, list[int]()
        for token in probs.argsort(descending=True).tolist():
            if kept and mass >= top_p:
                break
            kept.append(token)
            mass += float(probs[token])
        probs = torch.where(probs >= probs[kept].min(), probs, 0.0)
    probs = torch.where(probs >= min_p * probs.max(), probs, 0.0)
    return probs / probs.sum()


def hf_row(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """The same row through transformers' warpers, applied in vLLM's order."""
    scores = logits.double()[None]
    warpers: list[LogitsProcessor] = [TemperatureLogitsWarper(temperature)]
    if 0 < top_k < logits.shape[0]:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    if min_p > 0:
        warpers.append(MinPLogitsWarper(min_p))
    ids = torch.zeros(1, 1, dtype=torch.long)
    for warper in warpers:
        scores = warper(ids, scores)
    return torch.softmax(scores[0], dim=0)


def mixed_batch(seed: int, rows: int = 24, vocab: int = 50) -> tuple[torch.Tensor, ...]:
    """Random logits with a mix of per-row settings, each filter on or off, extremes included."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 3
    temperature = torch.rand(rows, generator=g) * 1.5 + 0.2
    top_k = torch.randint(-1, vocab + 3, (rows,), generator=g)
    top_p = torch.where(torch.rand(rows, generator=g) < 0.3, 1.0, torch.rand(rows, generator=g))
    min_p = torch.where(torch.rand(rows, generator=g) < 0.4, 0.0, torch.rand(rows, generator=g) * 0.5)
    top_k[0], top_p[1], min_p[2] = 1, 1e-6, 1.0
    return logits, temperature, top_k, top_p, min_p


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_per_row_reference_and_transformers(seed: int) -> None:
    logits, temperature, top_k, top_p, min_p = mixed_batch(seed)
    probs = probs_from_logits(logits, temperature, top_k, top_p, min_p)
    assert probs.dtype == torch.float32
    for r in range(logits.shape[0]):
        args = (logits[r], float(temperature[r]), int(top_k[r]), float(top_p[r]), float(min_p[r]))
        torch.testing.assert_close(probs[r].double(), reference_row(*args), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(probs[r].double(), hf_row(*args), atol=1e-6, rtol=1e-5)


def test_top_p_finds_wide_nuclei_beyond_the_first_widths_looked_at() -> None:
    """Rows whose nucleus closes within the first width, within the second, and only in the whole row,
    with every filter, against the reference."""
    vocab = 6000
    g = torch.Generator().manual_seed(7)
    spread = torch.tensor([8.0, 2.0, 0.05, 2.0, 2.0, 8.0])[:, None]  # peaked, medium, nearly flat
    logits = torch.randn(6, vocab, generator=g) * spread
    temperature = torch.tensor([1.0, 1.0, 1.0, 1.3, 0.8, 0.0])
    top_k = torch.tensor([0, 0, 0, 5000, 0, 0])
    top_p = torch.tensor([0.95, 0.95, 0.99, 0.9, 0.95, 0.5])
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.2, 0.0])
    nuclei = [int((reference_row(logits[r], 1.0, 0, float(top_p[r]), 0.0) > 0).sum()) for r in range(3)]
    assert nuclei[0] <= NUCLEUS_WIDTHS[0] < nuclei[1] <= NUCLEUS_WIDTHS[1] < nuclei[2]
    probs = probs_from_logits(logits, temperature, top_k, top_p, min_p)
    for r in range(6):
        args = (logits[r], float(temperature[r]), int(top_k[r]), float(top_p[r]), float(min_p[r]))
        torch.testing.assert_close(probs[r].double(), reference_row(*args), atol=1e-6, rtol=1e-5)


def test_rows_are_distributions_with_at_least_one_token() -> None:
    logits, temperature, top_k, top_p, min_p = mixed_batch(3, rows=64, vocab=300)
    probs = probs_from_logits(logits.bfloat16(), temperature, top_k, top_p, min_p)
    torch.testing.assert_close(probs.sum(dim=-1), torch.ones(64))
    assert bool(((probs > 0).sum(dim=-1) >= 1).all())
    assert bool((probs >= 0).all())
    # The most probable token always survives every filter.
    assert torch.equal(probs.argmax(dim=-1), logits.bfloat16().argmax(dim=-1))


def test_all_filters_off_is_softmax() -> None:
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(4))
    ones, zeros = torch.ones(3), torch.zeros(3)
    probs = probs_from_logits(logits, ones * 0.7, torch.tensor([0, -1, 20]), ones, zeros)
    torch.testing.assert_close(probs, torch.softmax(logits / 0.7, dim=-1))


def one_row(logits: list[float], *, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    return probs_from_logits(
        torch.tensor([logits]),
        torch.ones(1),
        torch.tensor([top_k]),
        torch.tensor([top_p]),
        torch.tensor([min_p]),
    )[0]


def test_top_k_keeps_ties_at_the_boundary() -> None:
    probs = one_row([3.0, 2.0, 1.0, 2.0, 2.0], top_k=2)
    assert (probs > 0).tolist() == [True, True, False, True, True]


def test_top_p_keeps_smallest_prefix_reaching_top_p_and_its_ties() -> None:
    # probs 0.5, 0.25, 0.125, 0.125: 0.5 + 0.25 reaches 0.74, so the two 0.125s are cut...
    logs = torch.tensor([0.5, 0.25, 0.125, 0.125]).log().tolist()
    assert (one_row(logs, top_p=0.74) > 0).tolist() == [True, True, False, False]
    # ... but just above 0.75 the prefix needs one 0.125, and its tie comes with it.
    assert (one_row(logs, top_p=0.76) > 0).tolist() == [True, True, True, True]
    assert (one_row(logs, top_p=0.3) > 0).tolist() == [True, False, False, False]


def test_top_p_applies_to_the_renormalised_top_k_distribution() -> None:
    # After top-k=2 the kept probs are 2/3, 1/3; top-p 0.6 is reached by the first token alone.
    logs = torch.tensor([0.4, 0.2, 0.2 - 1e-3, 0.2 - 2e-3]).log().tolist()
    torch.testing.assert_close(one_row(logs, top_k=2, top_p=0.6), torch.tensor([1.0, 0, 0, 0]))


def test_min_p_is_relative_to_the_largest_probability() -> None:
    logs = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().tolist()
    assert (one_row(logs, min_p=0.3) > 0).tolist() == [True, True, True, False]
    assert (one_row(logs, min_p=1.0) > 0).tolist() == [True, False, False, False]


def test_result_does_not_depend_on_vocabulary_order() -> None:
    logits, temperature, top_k, top_p, min_p = mixed_batch(5)
    logits = logits.round()  # plenty of ties
    perm = torch.randperm(logits.shape[1], generator=torch.Generator().manual_seed(6))
    probs = probs_from_logits(logits, temperature, top_k, top_p, min_p)
    permuted = probs_from_logits(logits[:, perm], temperature, top_k, top_p, min_p)
    torch.testing.assert_close(permuted, probs[:, perm])


def test_zero_temperature_is_one_hot_argmax() -> None:
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0], [3.0, 0.0, 0.0, 0.0]])
    probs = probs_from_logits(
        logits, torch.tensor([0.0, 1.0]), torch.zeros(2, dtype=torch.long), torch.ones(2), torch.zeros(2)
    )
    assert probs[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    torch.testing.assert_close(probs[1], torch.softmax(logits[1], dim=0))


def test_greedy_tokens_is_argmax_with_lowest_id_on_ties() -> None:
    logits = torch.tensor([[0.0, 5.0, 5.0], [1.0, 0.0, -1.0]])
    assert greedy_tokens(logits).tolist() == [1, 0]
