"""The head's pass in one native call (native_pass.py) against the head's torch modules: the same
outputs to float32 rounding, the same keys and values in each request's draft cache, the same trees in
the engine; and where it does not serve."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from tests.unit.drafter.eagle.engine_runs import EAGLE, make_drafter, run_requests, tiny_engine
from treespec.drafter.eagle.draft_state import DraftKV, DraftState
from treespec.drafter.eagle.drafter import EagleDrafter, _Rows
from treespec.drafter.eagle.native_pass import NativePass, PassRows
from treespec.shared.drafting.drafter import DraftQuery
from treespec.shared.drafting.token_tree import TokenTree
from treespec.shared.model.causal_lm import CausalLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _state(drafter: EagleDrafter, cached: int, scratch: int, seed: int) -> DraftState:
    """A request whose draft cache holds `cached` keys and, after them, `scratch` earlier rows."""
    c = drafter.head.config
    kv = DraftKV.empty(c.num_kv_heads, c.head_dim, torch.float32, torch.device("cpu"))
    kv.reserve(cached + scratch)
    g = torch.Generator().manual_seed(seed)
    kv.k[: cached + scratch] = torch.randn(cached + scratch, c.num_kv_heads, c.head_dim, generator=g)
    kv.v[: cached + scratch] = torch.randn(cached + scratch, c.num_kv_heads, c.head_dim, generator=g)
    kv.length = cached
    return DraftState([1, 2, 3], kv)


def _int8_eagle3(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> tuple[EagleDrafter, NativePass]:
    """An EAGLE-3 drafter with int8 products, and its native pass."""
    drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype="int8")
    assert drafter._native is not None
    return drafter, drafter._native


def _copy(state: DraftState) -> DraftState:
    kv = DraftKV(state.kv.k.clone(), state.kv.v.clone(), state.kv.length)
    return DraftState(list(state.tokens), kv)


def _groups(states: list[DraftState], wide: bool) -> list[_Rows]:
    """A catch-up's causal rows (features: `wide`), or a tree level's rows over earlier nodes."""
    if wide:
        return [
            _Rows(states[0], 4, 0, torch.ones(4, 4, dtype=torch.bool).tril()),
            _Rows(states[1], 1, 0, torch.ones(1, 1, dtype=torch.bool)),
        ]
    level = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [1, 1, 0, 0, 1]], dtype=torch.bool)  # 2 earlier
    return [_Rows(states[0], 3, 2, level), _Rows(states[1], 2, 0, torch.eye(2, dtype=torch.bool))]


@pytest.mark.parametrize("matmul_dtype", ["float32", "int8"])
@pytest.mark.parametrize("wide", [True, False], ids=["catch-up", "tree-level"])
@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_the_native_pass_computes_what_the_torch_modules_do(
    name: str, wide: bool, matmul_dtype: str, heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter = make_drafter(name, heads[name], tiny_model, tiny_path, matmul_dtype=matmul_dtype)
    native = drafter._native
    assert native is not None
    c = drafter.head.config
    g = torch.Generator().manual_seed(7)
    rows = 5
    width = c.fc_in_features if wide and c.is_eagle3 else c.hidden_size
    ids = torch.randint(0, 97, (rows,), generator=g)
    hidden = torch.randn(rows, width, generator=g)
    positions = torch.tensor([9, 10, 11, 12, 3]) if wide else torch.tensor([12, 13, 14, 4, 4])
    states = [_state(drafter, 9, 0 if wide else 2, 1), _state(drafter, 3, 0, 2)]
    copies = [_copy(s) for s in states]
    with torch.inference_mode():  # as drafting runs (the torch modules take their packed weights)
        got = drafter._run(ids, hidden, positions, _groups(states, wide))
        drafter._native = None
        want = drafter._run(ids, hidden, positions, _groups(copies, wide))
    torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.for_logits, want.for_logits, rtol=1e-5, atol=1e-5)
    for state, copy, group in zip(states, copies, _groups(copies, wide), strict=True):
        end = copy.kv.length + group.offset + group.count  # the cache, earlier rows and these rows
        torch.testing.assert_close(state.kv.k[:end], copy.kv.k[:end], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(state.kv.v[:end], copy.kv.v[:end], rtol=1e-5, atol=1e-5)


def test_a_draft_cache_grows_to_hold_the_rows(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    """Rows past the cache's capacity: it grows first, keeping what it held."""
    drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype="int8")
    state = _state(drafter, 62, 0, 3)
    held = state.kv.k[:62].clone()
    assert state.kv.k.shape[0] == 64
    c = drafter.head.config
    groups = [_Rows(state, 4, 0, torch.ones(4, 4, dtype=torch.bool).tril())]
    with torch.inference_mode():
        drafter._run(
            torch.tensor([5, 6, 7, 8]), torch.randn(4, c.fc_in_features), torch.arange(62, 66), groups
        )
    assert state.kv.k.shape[0] >= 66 and torch.equal(state.kv.k[:62], held)


def test_the_engine_drafts_the_same_trees_either_way(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    trees: dict[bool, list[list[int]]] = {}
    for use_native in (True, False):
        drafter = make_drafter("eagle3", heads["eagle3"], tiny_model, tiny_path, matmul_dtype="float32")
        assert drafter._native is not None
        if not use_native:
            drafter._native = None
        trees[use_native] = _recorded_trees(drafter, monkeypatch)
        tiny_engine(tiny_path, tiny_model, drafter).generate(run_requests(EAGLE, n=24))
    assert len(trees[True]) > 20 and trees[True] == trees[False]


def _recorded_trees(drafter: EagleDrafter, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Every tree the drafter proposes from now on, as its tokens then its parents."""
    seen: list[list[int]] = []
    propose = drafter.propose

    def recording(queries: Sequence[DraftQuery]) -> list[TokenTree | None]:
        out = propose(queries)
        seen.extend(t.tokens.tolist() + t.parents.tolist() for t in out if t is not None)
        return out

    monkeypatch.setattr(drafter, "propose", recording)
    return seen


def test_it_serves_packed_heads_and_the_row_kernels_reach_only(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter, native = _int8_eagle3(heads, tiny_path, tiny_model)
    assert native.serves([32, 1]) and not native.serves([4, 33])
    unpacked = drafter.head.move_to("cpu")  # weights as training reads them: nothing packed
    for layer in (unpacked.fc, unpacked.layer.self_attn.o_proj, unpacked.layer.mlp.down_proj):
        layer.packed = None
    unpacked.layer.self_attn.packed_qkv = unpacked.layer.mlp.packed_gate_up = None
    assert NativePass.of(unpacked) is None


def test_the_kernel_refuses_rows_its_groups_do_not_cover(
    heads: dict[str, Path], tiny_path: Path, tiny_model: CausalLM
) -> None:
    drafter, native = _int8_eagle3(heads, tiny_path, tiny_model)
    state = _state(drafter, 3, 0, 5)
    c = drafter.head.config
    cos, sin = drafter._rope_rows(torch.arange(3, 6), torch.float32)
    rows = [PassRows(state.kv.k, state.kv.v, 2, 3, 0, torch.ones(2, 2, dtype=torch.bool).tril())]
    with torch.inference_mode(), pytest.raises(RuntimeError, match="not all the rows"):
        native.run(torch.randn(3, c.hidden_size), torch.randn(3, c.hidden_size), cos, sin, rows)
