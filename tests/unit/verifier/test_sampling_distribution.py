"""Speculative sampling through the engine reproduces the target's exact distribution.

A tiny model with a 24-token vocabulary: the exact distribution of the first three sampled tokens
(13,824 outcomes) is enumerated from the model, and 20,000 engine samples per setting, drafted by
trees from a deliberately different distribution q, must pass a chi-square goodness-of-fit test.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from scipy.stats import chisquare

from treespec.kernels.logits_processing import probs_from_logits
from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

VOCAB, PROMPT, SAMPLES, NEW = 24, [5, 17, 3], 20_000, 3


@dataclass(frozen=True)
class Setting:
    temperature: float
    top_k: int = -1
    top_p: float = 1.0


SETTINGS = {
    "t0.7": Setting(0.7),
    "t1.0": Setting(1.0),
    "top_p0.9": Setting(1.0, top_p=0.9),
    "top_k20": Setting(1.0, top_k=20),
}


@dataclass(frozen=True)
class Tiny:
    path: Path
    logits: dict[tuple[int, ...], torch.Tensor]  # generated prefix (len 0..2) -> next-token logits [V]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    path: Path = tmp_path_factory.mktemp("tiny-sampling")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
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


def processed(logits: torch.Tensor, s: Setting) -> torch.Tensor:
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
    p0 = processed(tiny.logits[()][None], s)[0]
    p1 = processed(torch.stack([tiny.logits[(a,)] for a in range(VOCAB)]), s)
    keys = list(itertools.product(range(VOCAB), repeat=2))
    p2 = processed(torch.stack([tiny.logits[k] for k in keys]), s).view(VOCAB, VOCAB, VOCAB)
    return p0[:, None, None] * p1[:, :, None] * p2


class TableDrafter(Drafter):
    """Drafts from q = softmax(logits / 1.6): children are q's top-k. Requests alternate between the
    two kinds of draft: with probabilities (the children's order is a draw without replacement from q
    renormalised over them, as the acceptance rule requires) and deterministic (no probabilities)."""

    def __init__(self, tiny: Tiny, seed: int = 0) -> None:
        self.tiny = tiny
        self.generator = torch.Generator().manual_seed(seed)
        self.generated: dict[str, list[int]] = {}

    def open(
        self, request_id: str, prompt: Sequence[int], trace_context: Mapping[str, str] | None = None
    ) -> None:
        self.generated[request_id] = []

    def commit(self, request_id: str, tokens: Sequence[int], features: FeatureSlots | None = None) -> None:
        self.generated[request_id] += list(tokens)

    def close(self, request_id: str) -> None:
        self.generated.pop(request_id, None)

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        return [
            self._tree(
                self.generated[q.request_id],
                q.budget.num_draft_tokens,
                q.budget.topk,
                _with_probs(q.request_id),
            )
            for q in queries
        ]

    def _tree(self, generated: list[int], budget: int, topk: int, with_probs: bool) -> TokenTree:
        tokens, parents, probs, prefixes = [generated[-1]], [-1], [1.0], [tuple(generated)]
        node = 0
        while node < len(tokens) and len(tokens) < budget:
            prefix = prefixes[node]
            if len(prefix) < NEW:
                q = torch.softmax(self.tiny.logits[prefix] / 1.6, dim=-1)
                for token, prob in self._children(q, min(topk, budget - len(tokens)), with_probs):
                    tokens.append(token)
                    parents.append(node)
                    probs.append(prob)
                    prefixes.append((*prefix, token))
            node += 1
        return TokenTree(
            torch.tensor(tokens), torch.tensor(parents), torch.tensor(probs) if with_probs else None
        )

    def _children(self, q: torch.Tensor, k: int, with_probs: bool) -> list[tuple[int, float]]:
        top = q.topk(k)
        weights = top.values / top.values.sum()
        if not with_probs:
            return [(int(t), float(w)) for t, w in zip(top.indices, weights, strict=True)]
        order = torch.multinomial(weights, k, replacement=False, generator=self.generator)
        return [(int(top.indices[j]), float(weights[j])) for j in order]


def _with_probs(request_id: str) -> bool:
    return int(request_id.rsplit("/", 1)[1]) % 2 == 0


def test_first_three_tokens_follow_the_target(tiny: Tiny) -> None:
    engine = Engine(
        EngineConfig(
            model_path=tiny.path,
            page_size=4,
            max_total_tokens=16_384,
            max_running_requests=1024,
            chunked_prefill_size=4096,
        ),
        TableDrafter(tiny),
        load_model(tiny.path),
    )
    speculation = SpeculationParams(num_draft_tokens=8, num_steps=3, eagle_topk=3)
    requests = [
        GenerationRequest(
            f"{name}/{i}",
            PROMPT,
            SamplingParams(
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                seed=i,
                max_new_tokens=NEW,
                ignore_eos=True,
            ),
            speculation,
        )
        for name, s in SETTINGS.items()
        for i in range(SAMPLES)
    ]
    results = engine.generate(requests)
    assert engine.stats.accepted_tokens > SAMPLES, "speculation barely happened: the test would prove nothing"
    for name, s in SETTINGS.items():
        counts = Counter(tuple(results[f"{name}/{i}"].token_ids) for i in range(SAMPLES))
        expected = exact_joint(tiny, s).flatten().double() * SAMPLES
        observed = torch.zeros(VOCAB**3, dtype=torch.float64)
        for (a, b, c), n in counts.items():
            observed[(a * VOCAB + b) * VOCAB + c] = n
        assert float(observed[expected == 0].sum()) == 0, f"{name}: sampled an outcome of probability 0"
        big = expected >= 5
        assert int(big.sum()) > 100, f"{name}: too few testable outcomes"
        obs = torch.cat([observed[big], observed[~big].sum()[None]])
        exp = torch.cat([expected[big], expected[~big].sum()[None]])
        exp = exp * obs.sum() / exp.sum()
        p_value = chisquare(obs.numpy(), exp.numpy()).pvalue
        assert p_value > 1e-3, f"{name}: chi-square p = {p_value:.2e} over {int(big.sum())} cells"
