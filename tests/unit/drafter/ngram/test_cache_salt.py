"""vLLM's cache_salt in the n-gram drafter (cache_salt.py): what requests of one salt taught the shared
memory drafts for requests of that salt only, never for another salt or for unsalted requests, and
theirs never for it; on the in-process memory and on Redis alike."""

from __future__ import annotations

from tests.unit.drafter.ngram.backends import Backend, config
from treespec.drafter.ngram.cache_salt import MARKER_BASE, MARKER_WORDS, salt_marker
from treespec.drafter.ngram.config import NgramConfig
from treespec.drafter.ngram.drafter import NgramDrafter
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TreeBudget

BUDGET = TreeBudget(num_draft_tokens=12, num_steps=11, topk=10)
OUTPUT = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]  # what an earlier request generated
PROMPT = [50, 51, 10]  # ends where OUTPUT's continuations start; nothing to match within itself


def _teach(drafter: NgramDrafter, salt: str) -> None:
    drafter.open(f"teacher-{salt}", [60, 61], cache_salt=salt)
    drafter.commit(f"teacher-{salt}", OUTPUT)
    drafter.close(f"teacher-{salt}")
    assert drafter.memory.flush()


def _drafted(drafter: NgramDrafter, salt: str) -> list[int]:
    """The tokens a new request with `salt` is drafted right after PROMPT ([] for no tree)."""
    rid = f"student-{salt}-{len(drafter._requests)}"
    drafter.open(rid, PROMPT, cache_salt=salt)
    tree = drafter.propose([DraftQuery(rid, BUDGET)])[0]
    drafter.close(rid)
    return [] if tree is None else tree.tokens.tolist()[1:]


def test_a_salt_shares_the_memory_with_its_own_requests_only(backend: Backend) -> None:
    drafter = NgramDrafter(NgramConfig(), backend.open(config()))
    _teach(drafter, "tenant-a")
    assert _drafted(drafter, "tenant-a")[:1] == [11]  # what tenant-a's earlier request generated
    assert _drafted(drafter, "tenant-b") == []
    assert _drafted(drafter, "") == []
    _teach(drafter, "")  # unsalted traffic stays out of salted requests' drafts too
    assert _drafted(drafter, "tenant-b") == []
    assert _drafted(drafter, "")[:1] == [11]


def test_salt_markers_lie_above_every_token_id_and_differ_by_salt() -> None:
    assert salt_marker("") == ()
    a, b = salt_marker("tenant-a"), salt_marker("tenant-b")
    assert len(a) == MARKER_WORDS and a != b and a == salt_marker("tenant-a")
    assert all(MARKER_BASE <= word < 2**32 for word in a + b)
