"""The draft model's prefix cache: a prompt that shares a prefix with an earlier request (the next
turn of a conversation, a common system prompt) starts with that prefix's draft K/V, drafts the trees
a drafter without the cache drafts, never under another cache salt, and gives way when the pool runs
short; --disable-prefix-caching turns it off with the verifier's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.engine_runs import PLAIN, VOCAB, run_prompts, tiny_engine
from tests.unit.drafter.standalone.test_drafter import make_drafter
from treespec.drafter.standalone.drafter import StandaloneDrafter
from treespec.shared.cli.main import build_parser
from treespec.shared.cli.plugin_flags import plugin_options
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree, TreeBudget
from treespec.shared.model.causal_lm import CausalLM
from treespec.verifier.request import GenerationRequest, SamplingParams, SpeculationParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAGE = 4
BUDGET = TreeBudget(num_draft_tokens=8, num_steps=3, topk=3)
PROMPT = run_prompts()["p3"]  # 40 tokens


def _drafter(draft: Path, target: Path, caching: bool, **options: object) -> StandaloneDrafter:
    return make_drafter(draft, target, page_size=PAGE, prefix_caching=caching, **options)


def _hit(drafter: StandaloneDrafter) -> int:
    assert drafter.cache.prefix is not None
    return drafter.cache.prefix.hit_tokens


def _same(a: TokenTree | None, b: TokenTree | None) -> None:
    assert a is not None and b is not None
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
    assert a.probs is not None and b.probs is not None
    assert torch.allclose(a.probs, b.probs, atol=1e-5)


def _steps(drafter: StandaloneDrafter, script: list[tuple[str, str, list[int]]]) -> list[TokenTree | None]:
    """Run ("open", id, prompt), ("close", id, []), ("commit", id, tokens) and ("propose", id, [])
    in order; the trees proposed."""
    trees: list[TokenTree | None] = []
    for op, rid, tokens in script:
        if op == "open":
            drafter.open(rid, tokens)
        elif op == "close":
            drafter.close(rid)
        elif op == "commit":
            drafter.commit(rid, tokens)
        else:
            trees += drafter.propose([DraftQuery(rid, BUDGET)])
    return trees


def test_requests_sharing_a_prefix_draft_the_trees_of_a_drafter_without_the_cache(
    other_draft: Path, tiny_path: Path
) -> None:
    """A reads its prompt and commits; B, sharing A's first 30 tokens, opens while A is still drafting
    (the blocks are shared by both) and C after A closed (they wait idle in the cache). Every tree is
    the one computed from scratch, so no request wrote into a block another one reads."""
    b_prompt = [*PROMPT[:30], 5, 6, 7]
    c_prompt = [*PROMPT, 8, 9, 10, 11, 12, 13]  # A's prompt and what A committed, then more
    script = [
        ("open", "a", PROMPT), ("propose", "a", []), ("commit", "a", [8, 9]), ("propose", "a", []),
        ("open", "b", b_prompt), ("propose", "b", []), ("propose", "a", []), ("commit", "b", [3]),
        ("commit", "a", [10, 11]), ("propose", "b", []), ("propose", "a", []), ("close", "a", []),
        ("open", "c", c_prompt), ("propose", "c", []), ("commit", "c", [4, 4]), ("propose", "c", []),
        ("propose", "b", []),
    ]  # fmt: skip
    cached = _drafter(other_draft, tiny_path, True)
    fresh = _drafter(other_draft, tiny_path, False)
    assert fresh.cache.prefix is None
    for got, want in zip(_steps(cached, script), _steps(fresh, script), strict=True):
        _same(got, want)
    # B found the 7 full blocks of its first 30 tokens; C found all A had read: its prompt and the
    # 4 tokens it committed (44 tokens, 11 full blocks).
    assert _hit(cached) == 28 + 44
    cached.close("b")
    cached.close("c")
    assert cached.cache.allocator.num_free == cached.cache.allocator.num_blocks


def test_a_whole_cached_prompt_still_reads_its_last_token(other_draft: Path, tiny_path: Path) -> None:
    drafter = _drafter(other_draft, tiny_path, True)
    prompt = PROMPT[:32]  # 8 full blocks
    _steps(drafter, [("open", "a", prompt), ("propose", "a", []), ("close", "a", [])])
    drafter.open("b", prompt)
    assert _hit(drafter) == 28  # 7 blocks: the root's children need the last token's logits
    tree = drafter.propose([DraftQuery("b", BUDGET)])[0]
    assert tree is not None and int(tree.tokens[0]) == prompt[-1]


def test_a_cache_salt_shares_only_with_its_own_salt(other_draft: Path, tiny_path: Path) -> None:
    drafter = _drafter(other_draft, tiny_path, True)
    drafter.open("a", PROMPT, cache_salt="tenant-1")
    drafter.propose([DraftQuery("a", BUDGET)])
    drafter.close("a")
    for rid, salt in [("plain", ""), ("other", "tenant-2")]:
        drafter.open(rid, PROMPT, cache_salt=salt)
    assert _hit(drafter) == 0
    drafter.open("same", PROMPT, cache_salt="tenant-1")
    assert _hit(drafter) == 36


def test_cached_blocks_give_way_when_the_pool_runs_short(other_draft: Path, tiny_path: Path) -> None:
    """Room for 64 tokens: A's prompt (40) stays cached after A closes, and B (a different 40-token
    prompt) still gets its blocks, by evicting A's, and drafts."""
    drafter = _drafter(other_draft, tiny_path, True, kv_tokens=64)
    _steps(drafter, [("open", "a", PROMPT), ("propose", "a", []), ("close", "a", [])])
    prefix = drafter.cache.prefix
    assert prefix is not None and prefix.num_cached_blocks == 10
    other = [t % (VOCAB - 3) + 3 for t in PROMPT[::-1]]
    drafter.open("b", other)
    assert drafter.propose([DraftQuery("b", BUDGET)])[0] is not None
    assert prefix.evicted_blocks > 0


def test_a_conversation_s_next_turn_reads_only_its_new_tokens_and_decodes_as_plain(
    other_draft: Path, tiny_path: Path, tiny_model: CausalLM
) -> None:
    """Turn 1, then turn 2 over turn 1's prompt and output and a new question, through the engine:
    the draft model finds turn 1's blocks, and both turns' outputs equal plain decoding's."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=16, ignore_eos=True)
    spec = SpeculationParams(num_draft_tokens=8, num_steps=3, eagle_topk=3)

    def turns(drafter: StandaloneDrafter | None, s: SpeculationParams) -> list[list[int]]:
        engine = tiny_engine(tiny_path, tiny_model, drafter)
        first = engine.generate([GenerationRequest("t1", PROMPT, sampling, s)])["t1"].token_ids
        second_prompt = PROMPT + first + [11, 12, 13]
        second = engine.generate([GenerationRequest("t2", second_prompt, sampling, s)])["t2"].token_ids
        return [first, second]

    drafter = _drafter(other_draft, tiny_path, True)
    assert turns(drafter, spec) == turns(None, PLAIN)
    assert _hit(drafter) >= 48  # turn 1's prompt and most of its output (59 tokens, the last not read)


def test_disable_prefix_caching_turns_off_the_draft_model_s_cache_too() -> None:
    args = ["serve", "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/m"]
    parser = build_parser()
    assert "prefix_caching" not in plugin_options(parser.parse_args(args), "STANDALONE")
    off = plugin_options(parser.parse_args([*args, "--disable-prefix-caching"]), "STANDALONE")
    assert off == {"draft_path": "/m", "prefix_caching": False}
