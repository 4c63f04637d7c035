"""The out-of-process co-located EAGLE drafter proposes the same trees as the in-process one.

The same random public-format head (EAGLE-3, EAGLE-2, and EAGLE-3 merged with n-gram matches) drafts
for the same greedy requests twice: inside the engine's process on LocalTargetAccess, and in a real
`treespec drafter --colocate` process reading the target's tensors and features through shared
memory, behind the gRPC stream. Every tree either proposes (tokens, parents, draft probabilities), the
engine's output and its speculation counts must agree, with a deadline generous enough that no round
is dropped.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.passthrough_drafter import PassThroughDrafter
from tests.services.colocated import TEST_ENV
from tests.unit.drafter.eagle.public_checkpoints import write_eagle, write_eagle3
from treespec.shared.drafting.drafter import Drafter, DrafterContext, DraftQuery
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.drafting.target_access import LocalTargetAccess
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.launcher.colocated import colocated_drafter
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams
from treespec.verifier.stats import SpecStats

# The tiny models gain nothing from threads, and on a busy 2-core machine torch's spinning threads
# make every step many times slower.
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB, HIDDEN, LAYERS = 97, 64, 3
NEW_TOKENS = 24
HOT = 5  # the drafts' vocabulary: the target's most frequent greedy tokens
DEADLINE_S = 120.0  # a loaded machine must not drop a round: the comparison would be meaningless
SPECS = [
    SpeculationParams(num_draft_tokens=8, num_steps=4, eagle_topk=3),
    SpeculationParams(num_draft_tokens=4, num_steps=2, eagle_topk=2),
    SpeculationParams(num_draft_tokens=12, num_steps=5, eagle_topk=4),
]


@dataclass(frozen=True)
class Proposal:
    request_id: str
    tokens: list[int]
    parents: list[int]
    probs: list[float] | None


class ProposalRecorder(PassThroughDrafter):
    """Passes everything through to `inner`, keeping every proposal in order, round by round."""

    def __init__(self, inner: Drafter) -> None:
        super().__init__(inner)
        self.rounds: list[list[Proposal | str]] = []  # a request id alone: no tree for it

    def propose(self, queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        trees = self.inner.propose(queries)
        self.rounds.append([_proposal(q.request_id, t) for q, t in zip(queries, trees, strict=True)])
        return trees


def _proposal(request_id: str, tree: TokenTree | None) -> Proposal | str:
    if tree is None:
        return request_id
    probs = None if tree.probs is None else [float(p) for p in tree.probs]
    return Proposal(request_id, tree.tokens.tolist(), tree.parents.tolist(), probs)


@dataclass(frozen=True)
class Run:
    outputs: dict[str, list[int]]
    stats: SpecStats
    rounds: list[list[Proposal | str]]


def _requests(speculate: bool = True) -> list[GenerationRequest]:
    rng = random.Random(7)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS, ignore_eos=True)
    return [
        GenerationRequest(
            f"r{i}",
            [rng.randrange(3, VOCAB) for _ in range(n)],
            sampling,
            SPECS[i % len(SPECS)] if speculate else SpeculationParams(enabled=False),
        )
        for i, n in enumerate([1, 6, 19, 33])
    ]


NODE_COST = 0.05


def _run(path: Path, model: CausalLM, drafter: Drafter) -> Run:
    recorder = ProposalRecorder(drafter)
    # A small prefill chunk: prompts reach the drafter over several steps. One node cost for both runs
    # (each engine would measure its own, a little differently): it must reach the drafter over the
    # wire as in process (it may prune some nodes of the random heads' trees).
    # No speculation gate: its verdicts follow the step times, which differ from run to run.
    config = EngineConfig(
        model_path=path,
        page_size=4,
        max_total_tokens=2048,
        chunked_prefill_size=16,
        node_cost=NODE_COST,
        adaptive_speculation=False,
    )
    engine = Engine(config, recorder, model)
    outputs = {rid: r.token_ids for rid, r in engine.generate(_requests()).items()}
    return Run(outputs, engine.stats, recorder.rounds)


def _plain(path: Path, model: CausalLM) -> dict[str, list[int]]:
    engine = Engine(EngineConfig(model_path=path, page_size=4, max_total_tokens=2048), None, model)
    return {rid: r.token_ids for rid, r in engine.generate(_requests(speculate=False)).items()}


def _hot_tokens(plain: dict[str, list[int]]) -> torch.Tensor:
    """The tokens plain greedy decoding generates most often, ascending."""
    counts = Counter(t for tokens in plain.values() for t in tokens)
    return torch.tensor(sorted(t for t, _ in counts.most_common(HOT)))


def _write_head(kind: str, path: Path, hot: torch.Tensor) -> dict[str, Any]:
    """A random head whose drafts come from the hot tokens, so that some are accepted: an EAGLE-3
    head with them as its draft vocabulary (d2t / t2d rewritten), an EAGLE-2 head with them as its
    FR-Spec token map."""
    if kind == "eagle":
        torch.save(hot.tolist(), path.with_suffix(".pt"))
        head = write_eagle(path, HIDDEN, VOCAB, seed=4)
        return {"draft_path": str(head), "token_map": str(path.with_suffix(".pt"))}
    n = int(hot.shape[0])
    write_eagle3(path, HIDDEN, VOCAB, LAYERS, draft_vocab=n, seed=4)
    tensors = load_file(str(path / "model.safetensors"))
    tensors["d2t"] = hot - torch.arange(n)
    tensors["t2d"] = torch.zeros(VOCAB, dtype=torch.bool).index_fill_(0, hot, True)
    save_file(tensors, str(path / "model.safetensors"))
    return {"draft_path": str(path)}


KINDS = [("eagle3", False), ("eagle", False), ("eagle3", True)]


@pytest.mark.parametrize(("kind", "ngram"), KINDS)
def test_colocated_drafter_proposes_the_in_process_trees(
    kind: str, ngram: bool, tiny_path: Path, tmp_path: Path
) -> None:
    """With `ngram`, the head's trees merged with n-gram trees (--speculative-eagle-ngram): the option
    reaches the drafter process, and trees mixing both drafters' nodes carry no probabilities."""
    compare_colocated_with_in_process(kind, ngram, tiny_path, tmp_path, lambda: load_model(tiny_path))


def compare_colocated_with_in_process(
    kind: str, ngram: bool, tiny_path: Path, tmp_path: Path, load: Callable[[], CausalLM]
) -> None:
    """The comparison, on the device `load` puts the target on (tests/gpu runs it on CUDA)."""
    local_model = load()
    plain = _plain(tiny_path, local_model)
    # level_cost 0: every level, so that the trees compared are deep (a random head's are rarely worth it)
    head = _write_head(kind, tmp_path / "head", _hot_tokens(plain))
    options = {**head, "draft_probs": True, "seed": 11, "level_cost": 0.0}
    if ngram:
        options["ngram"] = {"min_path_prob": 0.0}

    local = create_drafter(kind, DrafterContext(VOCAB, tiny_path, options, LocalTargetAccess(local_model)))
    want = _run(tiny_path, local_model, local)

    # Its own model: co-location shares the target's embedding and lm_head (on CPU moved into shared
    # memory, on CUDA exported in place).
    model = load()
    work = tmp_path / "colocated"
    work.mkdir()
    with colocated_drafter(model, kind, options, VOCAB, work, deadline_s=DEADLINE_S, env=TEST_ENV) as co:
        got = _run(tiny_path, model, co.remote)
        assert co.process.poll() is None, "the drafter process died"

    drafted = [p for r in want.rounds for p in r if isinstance(p, Proposal)]
    assert len(drafted) > 20
    if ngram:  # both kinds of merged tree
        assert any(p.probs is None for p in drafted) and any(p.probs is not None for p in drafted)
    else:
        assert all(p.probs is not None for p in drafted)
    assert want.stats.accepted_tokens > 10, "too few drafts accepted to exercise multi-token commits"
    missing = [p for r in got.rounds for p in r if isinstance(p, str)]
    assert len(missing) == sum(isinstance(p, str) for r in want.rounds for p in r), "a round was dropped"
    assert len(got.rounds) == len(want.rounds)
    for number, (a, b) in enumerate(zip(got.rounds, want.rounds, strict=True)):
        assert [_key(p) for p in a] == [_key(p) for p in b], f"round {number}"
        for pa, pb in zip(a, b, strict=True):
            if isinstance(pa, Proposal) and isinstance(pb, Proposal):
                assert (pa.probs is None) == (pb.probs is None), f"round {number}, {pa.request_id}"
                if pa.probs is not None and pb.probs is not None:
                    assert pa.probs == pytest.approx(pb.probs, abs=1e-5), f"round {number}, {pa.request_id}"
    assert got.outputs == want.outputs == plain
    assert got.stats == want.stats


def _key(p: Proposal | str) -> tuple[str, list[int], list[int]] | str:
    return p if isinstance(p, str) else (p.request_id, p.tokens, p.parents)
