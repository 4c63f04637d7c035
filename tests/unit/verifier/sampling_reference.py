"""The exact-distribution machinery of the engine's sampling tests: a tiny model with a 24-token
vocabulary whose first three sampled tokens (13,824 outcomes) have an enumerable joint distribution,
and a chi-square goodness-of-fit test of engine samples against it."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from scipy.stats import chisquare

from treespec.kernels.logits_processing import probs_from_logits

VOCAB, PROMPT, NEW = 24, [5, 17, 3], 3
HIDDEN, LAYERS = 32, 2


@dataclass(frozen=True)
class Setting:
    temperature: float
    top_k: int = -1
    top_p: float = 1.0
    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0
    bad_words: tuple[tuple[int, ...], ...] = ()
    allowed: tuple[int, ...] = ()  # empty: any token


@dataclass(frozen=True)
class Tiny:
    path: Path
    logits: dict[tuple[int, ...], torch.Tensor]  # generated prefix (len 0..2) -> next-token logits [V]


def make_tiny(path: Path, layers: int = LAYERS) -> Tiny:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # peaked but not degenerate: hundreds of outcomes with expected count >= 5
        model.model.norm.weight.mul_(15.0)
    model.save_pretrained(path)
    pairs = torch.tensor(list(itertools.product(range(VOCAB), repeat=2)))
    with torch.no_grad():
        out = model(torch.cat([torch.tensor(PROMPT).expand(len(pairs), -1), pairs], dim=1)).logits
    logits: dict[tuple[int, ...], torch.Tensor] = {(): out[0, len(PROMPT) - 1]}
    for (a, b), row in zip(pairs.tolist(), out, strict=True):
        logits[(a,)] = row[len(PROMPT)]
        logits[(a, b)] = row[len(PROMPT) + 1]
    return Tiny(path, logits)


def penalized(logits: torch.Tensor, output: tuple[int, ...], s: Setting) -> torch.Tensor:
    """vLLM's rules, token by token: the allowed tokens, then the bad words over the output, then
    repetition over prompt and output, then frequency and presence over the output."""
    row = logits.clone()
    for token in range(row.shape[0]):
        if s.allowed and token not in s.allowed:
            row[token] = float("-inf")
    for word in s.bad_words:
        if len(word) - 1 <= len(output) and output[len(output) - (len(word) - 1) :] == word[:-1]:
            row[word[-1]] = float("-inf")
    for token in range(row.shape[0]):
        if token in PROMPT or token in output:
            value = float(row[token])
            row[token] = value / s.repetition if value > 0 else value * s.repetition
        count = output.count(token)
        row[token] -= s.frequency * count + s.presence * (count > 0)
    return row


def processed(
    logits: torch.Tensor, s: Setting, outputs: Sequence[tuple[int, ...]] | None = None
) -> torch.Tensor:
    """The sampling distribution of each row; `outputs`: the tokens generated before each row."""
    if outputs is not None:
        logits = torch.stack([penalized(row, out, s) for row, out in zip(logits, outputs, strict=True)])
    one = lambda v, dt: torch.full((logits.shape[0],), v, dtype=dt)  # noqa: E731
    return probs_from_logits(
        logits,
        one(s.temperature, torch.float32),
        one(s.top_k, torch.long),
        one(s.top_p, torch.float32),
        one(0.0, torch.float32),
    )


def exact_joint(tiny: Tiny, s: Setting) -> torch.Tensor:
    """P(a, b, c) as a [V, V, V] tensor, from the model's own distributions."""
    p0 = processed(tiny.logits[()][None], s, [()])[0]
    firsts = [(a,) for a in range(VOCAB)]
    p1 = processed(torch.stack([tiny.logits[k] for k in firsts]), s, firsts)
    keys = list(itertools.product(range(VOCAB), repeat=2))
    p2 = processed(torch.stack([tiny.logits[k] for k in keys]), s, keys).view(VOCAB, VOCAB, VOCAB)
    return p0[:, None, None] * p1[:, :, None] * p2


def check_follows_target(tiny: Tiny, s: Setting, samples: Sequence[tuple[int, ...]], name: str) -> None:
    """Chi-square goodness of fit of sampled first-three-token outcomes against the exact joint
    (cells of expected count < 5 pooled); an outcome of probability 0 fails outright."""
    counts = Counter(samples)
    n = len(samples)
    expected = exact_joint(tiny, s).flatten().double() * n
    observed = torch.zeros(VOCAB**3, dtype=torch.float64)
    for (a, b, c), k in counts.items():
        observed[(a * VOCAB + b) * VOCAB + c] = k
    assert float(observed[expected == 0].sum()) == 0, f"{name}: sampled an outcome of probability 0"
    big = expected >= 5
    assert int(big.sum()) > 100, f"{name}: too few testable outcomes"
    obs = torch.cat([observed[big], observed[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    exp = exp * obs.sum() / exp.sum()
    p_value = chisquare(obs.numpy(), exp.numpy()).pvalue
    assert p_value > 1e-3, f"{name}: chi-square p = {p_value:.2e} over {int(big.sum())} cells"
