"""Drafting from a predicted output: the alignment, re-joining after edits, trust, and the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import Drafter
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.config import EngineConfig
from treespec.verifier.engine import Engine, GenerationResult
from treespec.verifier.prediction import PredictedOutput
from treespec.verifier.request import (
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
    SpeculationParams,
)

PROMPT = [90, 91, 92]
ROWS = 6  # a chain's rows: the root and 5 drafted tokens
BUDGET = TreeBudget()  # only its costs count for chains: none here


def chain_of(tree: TokenTree | None) -> list[int]:
    assert tree is not None
    assert tree.parents.tolist() == list(range(-1, tree.num_nodes - 1))
    return tree.tokens.tolist()[1:]


def drafted(
    p: PredictedOutput, output: list[int], budget: TreeBudget = BUDGET, room: int | None = None
) -> TokenTree | None:
    history = PROMPT + output
    p.follow(history, len(PROMPT))
    return p.chain(history, len(PROMPT), budget, room)


def test_an_output_that_follows_the_prediction_drafts_what_comes_next() -> None:
    p = PredictedOutput(list(range(10, 30)), ROWS)
    assert chain_of(drafted(p, [10])) == [11, 12, 13, 14, 15]
    assert chain_of(drafted(p, [10, 11, 12, 13, 14, 15, 16])) == [17, 18, 19, 20, 21]
    assert chain_of(drafted(p, list(range(10, 27)))) == [27, 28, 29]  # the prediction's end
    assert drafted(p, list(range(10, 30))) is None


def test_a_chain_stops_where_the_request_must() -> None:
    p = PredictedOutput(list(range(10, 30)), ROWS)
    assert chain_of(drafted(p, [10], room=3)) == [11, 12]  # 3 more tokens: 2 drafted and the bonus
    assert drafted(p, [10, 11], room=1) is None


def test_a_first_token_that_differs_rejoins_near_the_start() -> None:
    p = PredictedOutput([5, 6, 7, 8, 9, 10], ROWS)
    assert drafted(p, [40]) is None  # no occurrence of 40
    assert chain_of(drafted(p, [40, 5])) == [6, 7, 8, 9, 10]  # one token, just after where it left


def test_a_replaced_token_rejoins_after_it() -> None:
    p = PredictedOutput([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], ROWS)
    assert chain_of(drafted(p, [1, 2, 3])) == [4, 5, 6, 7, 8]
    assert drafted(p, [1, 2, 3, 4, 50]) is None  # 50 replaces 5: nowhere in the prediction
    assert chain_of(drafted(p, [1, 2, 3, 4, 50, 6])) == [7, 8, 9, 10, 11]


def test_inserted_text_rejoins_by_the_longest_match() -> None:
    # 3 4 occurs twice; after an insertion, the output's "2 3 4" picks the later occurrence.
    p = PredictedOutput([3, 4, 60, 61, 1, 2, 3, 4, 70, 71, 72], ROWS)
    out = [3, 4, 60, 61, 1, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 2, 3, 4]
    assert chain_of(drafted(p, out)) == [70, 71, 72]


def test_a_one_token_match_far_from_where_it_left_does_not_rejoin() -> None:
    p = PredictedOutput([1, 2, 3] + [50 + i for i in range(30)] + [7, 8, 9], ROWS)
    assert drafted(p, [1, 2, 3, 99, 7]) is None  # 7 lies 30 tokens on: too far for one token
    assert chain_of(drafted(p, [1, 2, 3, 99, 7, 8, 9, 50])) == [51, 52, 53, 54, 55]  # two tokens: anywhere


def test_chains_shrink_when_their_tokens_keep_being_rejected() -> None:
    costly = TreeBudget(node_cost=0.1)
    p = PredictedOutput(list(range(100, 200)), ROWS)
    out = [100]
    lengths = []
    for step in range(6):
        chain = chain_of(drafted(p, out, costly))
        lengths.append(len(chain))
        # the target keeps the first token only and writes another, then the output re-joins
        out += [chain[0], 7 + step, chain[2]]
    assert lengths[0] == 5 and lengths[-1] < lengths[0]


def test_a_prediction_the_output_never_follows_stops_drafting() -> None:
    p = PredictedOutput([1, 2] * 20, ROWS)
    out = [1]
    for _ in range(12):
        tree = drafted(p, out)
        out += [7, 1] if tree is not None else [1]
    assert drafted(p, out) is None  # its chains committed less than the drafter's trees are worth


# ---- the engine ------------------------------------------------------------------------------

VOCAB = 97
PROMPTS = [[(5 * i + 7 * j) % VOCAB for j in range(6 + 2 * i)] for i in range(4)]


def engine(path: Path, model: CausalLM, drafter: Drafter | None = None, **kw: Any) -> Engine:
    config = EngineConfig(model_path=path, page_size=4, max_total_tokens=2048, **kw)
    return Engine(config, drafter, model)


def request(i: int, prediction: list[int], temperature: float = 0.0, spec: bool = True) -> GenerationRequest:
    sampling = SamplingParams(temperature=temperature, max_new_tokens=32, ignore_eos=True, seed=i)
    return GenerationRequest(
        f"r{i}", PROMPTS[i], sampling, SpeculationParams(enabled=spec), prediction=prediction
    )


def outputs(results: dict[str, GenerationResult]) -> dict[str, list[int]]:
    return {k: v.token_ids for k, v in results.items()}


@pytest.mark.parametrize("with_drafter", [False, True])
def test_greedy_output_with_a_prediction_is_plain_decoding_s(
    tiny_path: Path, tiny_model: CausalLM, with_drafter: bool
) -> None:
    want = outputs(engine(tiny_path, tiny_model).generate(request(i, [], spec=False) for i in range(4)))
    edited = {i: _edited(want[f"r{i}"]) for i in range(4)}
    drafter = RandomTreeDrafter(VOCAB, seed=2) if with_drafter else None
    # A given node cost: the start-up probe's, timed on a busy machine (a CI run), once cut the chains
    # short enough to leave acceptance 2.14; the chains' length is not what this test is about.
    e = engine(tiny_path, tiny_model, drafter, node_cost=0.05)
    got = e.generate(request(i, edited[i], spec=with_drafter) for i in range(4))
    assert outputs(got) == want
    # the predictions hold most of the output: far fewer verify steps than tokens
    assert e.stats.acceptance_length > 2.5


def test_a_prediction_keeps_sampling_seeded_outputs(tiny_path: Path, tiny_model: CausalLM) -> None:
    """A seeded sample draws each position's token from its own stream: what a chain drafts cannot
    change it, so the outputs with and without a prediction are the same."""
    want = outputs(engine(tiny_path, tiny_model).generate(request(i, [], 0.8, spec=False) for i in range(4)))
    e = engine(tiny_path, tiny_model, node_cost=0.05)  # a given cost, as in the greedy test above
    got = e.generate(request(i, want[f"r{i}"], 0.8, spec=False) for i in range(4))
    assert outputs(got) == want
    assert e.stats.acceptance_length > 2.5


def test_chains_reach_prediction_draft_tokens_or_are_off(tiny_path: Path, tiny_model: CausalLM) -> None:
    want = outputs(engine(tiny_path, tiny_model).generate(request(i, [], spec=False) for i in range(4)))
    # A fixed node cost: the one measured from step timings rises on a busy CPU (a CI run once cut the
    # chains to 4 steps a request), and how far chains reach is this test's point.
    long = engine(tiny_path, tiny_model, prediction_draft_tokens=12, node_cost=0.02)
    assert outputs(long.generate(request(i, want[f"r{i}"], spec=False) for i in range(4))) == want
    # 32 tokens in 3 steps: the first token, then two chains of 11 and the bonus (the last one cut
    # short at the token limit); the default tree budget would allow 6 tokens a step
    assert long.stats.acceptance_length > 10.0
    off = engine(tiny_path, tiny_model, prediction_draft_tokens=1)
    assert outputs(off.generate(request(i, want[f"r{i}"], spec=False) for i in range(4))) == want
    assert off.stats.drafted_tokens == 0


def test_prediction_token_ids_are_checked(tiny_path: Path, tiny_model: CausalLM) -> None:
    with pytest.raises(InvalidRequestError, match="prediction token ids"):
        engine(tiny_path, tiny_model).add_request(request(0, [1, VOCAB]))


def _edited(tokens: list[int]) -> list[int]:
    """The output with a token replaced, one removed and two inserted: an edited file's prediction."""
    out = list(tokens)
    out[5] = (out[5] + 1) % VOCAB
    del out[12]
    return [*out[:20], 3, 4, *out[20:]]
