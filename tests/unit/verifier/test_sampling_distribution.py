"""Speculative sampling through the engine reproduces the target's exact distribution.

A tiny model with a 24-token vocabulary: the exact distribution of the first three sampled tokens
(13,824 outcomes) is enumerated from the model, and 4,000 engine samples per setting, drafted by
trees from a deliberately different distribution q, must pass a chi-square goodness-of-fit test
(a rejection that lowers only the tried child's residual weight, not its untried siblings', fails
it at p = 9e-56 with 6,000);
unseeded requests go through recursive rejection sampling, seeded ones through sampling by position,
whose outputs must also equal plain decoding's for the same seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import torch

from tests.unit.verifier.sampling_reference import (
    NEW,
    PROMPT,
    Setting,
    Tiny,
    check_follows_target,
    make_tiny,
)
from treespec.shared.drafting.drafter import Drafter, DraftQuery
from treespec.shared.drafting.features import FeatureSlots
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

SAMPLES = 4_000

SETTINGS = {
    "t0.7": Setting(0.7),
    "t1.0": Setting(1.0),
    "top_p0.9": Setting(1.0, top_p=0.9),
    "top_k20": Setting(1.0, top_k=20),
    # Penalties depend on each tree row's own path (kernels/penalties.py).
    "penalties": Setting(0.9, presence=0.6, frequency=0.8, repetition=1.5),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    path: Path = tmp_path_factory.mktemp("tiny-sampling")
    return make_tiny(path)


class TableDrafter(Drafter):
    """Drafts from q = softmax(logits / 1.6): children are q's top-k. Requests alternate between the
    two kinds of draft: with probabilities (the children's order is a draw without replacement from q
    renormalised over them, as the acceptance rule requires) and deterministic (no probabilities)."""

    def __init__(self, tiny: Tiny, seed: int = 0) -> None:
        self.tiny = tiny
        self.generator = torch.Generator().manual_seed(seed)
        self.generated: dict[str, list[int]] = {}

    def open(
        self,
        request_id: str,
        prompt: Sequence[int],
        trace_context: Mapping[str, str] | None = None,
        cache_salt: str = "",
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


def _engine(tiny: Tiny, drafter: Drafter | None) -> Engine:
    config = EngineConfig(
        model_path=tiny.path,
        page_size=4,
        max_total_tokens=16_384,
        max_running_requests=1024,
        chunked_prefill_size=4096,
    )
    return Engine(config, drafter, load_model(tiny.path))


def _requests(
    settings: Mapping[str, Setting], seeded: bool, speculation: SpeculationParams
) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            f"{name}/{i}",
            PROMPT,
            SamplingParams(
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                presence_penalty=s.presence,
                frequency_penalty=s.frequency,
                repetition_penalty=s.repetition,
                bad_words=s.bad_words,
                allowed_token_ids=s.allowed,
                seed=i if seeded else None,
                max_new_tokens=NEW,
                ignore_eos=True,
            ),
            speculation,
        )
        for name, s in settings.items()
        for i in range(SAMPLES)
    ]


SPECULATION = SpeculationParams(num_draft_tokens=8, num_steps=3, eagle_topk=3)


def test_first_three_tokens_follow_the_target(tiny: Tiny) -> None:
    """Unseeded requests: recursive rejection sampling, with and without draft probabilities. Their
    generators are seeded from torch's global generator, seeded here so that the test replays."""
    engine = _engine(tiny, TableDrafter(tiny))
    torch.manual_seed(2026)
    results = engine.generate(_requests(SETTINGS, seeded=False, speculation=SPECULATION))
    assert engine.stats.accepted_tokens > SAMPLES, "speculation barely happened: the test would prove nothing"
    for name, s in SETTINGS.items():
        outcomes = [tuple(results[f"{name}/{i}"].token_ids) for i in range(SAMPLES)]
        check_follows_target(tiny, s, outcomes, name)


SEEDED = {"seeded top_p0.9": Setting(1.0, top_p=0.9)}


def test_seeded_requests_follow_the_target_whatever_the_draft(tiny: Tiny) -> None:
    """Seeded requests sample by position (kernels/coupled_sampling.py): their outputs follow the
    target's distribution, and each equals its output without speculation, token for token."""
    engine = _engine(tiny, TableDrafter(tiny))
    results = engine.generate(_requests(SEEDED, seeded=True, speculation=SPECULATION))
    assert engine.stats.accepted_tokens > SAMPLES // 2, "speculation barely happened"
    unspeculated = _requests(SEEDED, seeded=True, speculation=SpeculationParams(enabled=False))
    plain = _engine(tiny, None).generate(unspeculated)
    for name, s in SEEDED.items():
        outcomes = [tuple(results[f"{name}/{i}"].token_ids) for i in range(SAMPLES)]
        assert outcomes == [tuple(plain[f"{name}/{i}"].token_ids) for i in range(SAMPLES)], name
        check_follows_target(tiny, s, outcomes, name)


def test_bans_follow_the_target(tiny: Tiny) -> None:
    """bad_words and allowed_token_ids hold on every tree row's own path: the likeliest second and
    third tokens make a bad word (the third's row lies inside a tree, below the second's node), the
    runner-up first token is a banned single one, and the runner-up second token is not allowed
    (kernels/token_bans.py)."""
    first, runner_up = tiny.logits[()].topk(2).indices.tolist()
    after_first = tiny.logits[(first,)].topk(6).indices.tolist()
    second, barred = [t for t in after_first if t not in (first, runner_up)][:2]
    after_second = tiny.logits[(first, second)].topk(6).indices.tolist()
    third = next(t for t in after_second if t not in (runner_up, barred))
    banned = {"bans": Setting(1.0, bad_words=((second, third), (runner_up,)), allowed=tuple(
        t for t in range(len(tiny.logits[()])) if t != barred
    ))}  # fmt: skip
    engine = _engine(tiny, TableDrafter(tiny))
    torch.manual_seed(2027)
    results = engine.generate(_requests(banned, seeded=False, speculation=SPECULATION))
    # The drafts come from the unbanned q, so their banned branches are rejected; the rest accepted.
    assert engine.stats.accepted_tokens > SAMPLES // 2, "speculation barely happened"
    outcomes = [tuple(results[f"bans/{i}"].token_ids) for i in range(SAMPLES)]
    assert all(o[1:] != (second, third) and runner_up not in o and barred not in o for o in outcomes)
    assert sum(o[:2] == (first, second) for o in outcomes) > SAMPLES // 20  # the word's first token comes
    check_follows_target(tiny, banned["bans"], outcomes, "bans")
