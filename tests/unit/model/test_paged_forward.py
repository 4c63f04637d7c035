"""Chunked prefill, ragged batches and token trees give the same logits as the plain forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.unit.model.paged import PagedDriver, Seq
from tests.unit.model.test_forward_vs_hf import TINY, make_checkpoint, rel_err
from treespec.shared.model.attention.layout import BatchLayout
from treespec.shared.model.attention.torch_backend import TorchAttentionBackend
from treespec.shared.model.causal_lm import CausalLM
from treespec.shared.model.loader import load_model


# mixtral: sparse expert blocks; smollm3: a layer without rotary embeddings; gemma3: sliding-window
# layers (6 tokens) beside a global one
@pytest.fixture(scope="module", params=["qwen2", "mixtral", "smollm3", "gemma3"])
def model(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> CausalLM:
    path: Path = tmp_path_factory.mktemp(request.param)
    make_checkpoint(path, request.param)
    return load_model(path)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> CausalLM:
    """For the tests that look into the torch backend's plan (one backend, one window)."""
    path: Path = tmp_path_factory.mktemp("qwen2-plans")
    make_checkpoint(path, "qwen2")
    return load_model(path)


def ids(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "chunks",
    [
        [5, 1, 13, 7, 11],  # each within the row kernel's rows
        [33, 4],  # a first chunk past them (the prefill kernel), then one after a cached prefix
        [1, 36],  # a chunk past them after a cached prefix (the prefill kernel too)
    ],
)
def test_chunked_prefill_equals_one_shot(model: CausalLM, chunks: list[int]) -> None:
    prompt = ids(37, 0)
    want = PagedDriver(model).forward([(Seq(), prompt, None)])[0]
    driver, seq = PagedDriver(model), Seq()
    got = torch.cat([driver.forward([(seq, chunk, None)])[0] for chunk in prompt.split(chunks)])
    assert rel_err(got, want) < 1e-5


def test_a_long_chunk_attended_by_sdpa_equals_the_prefill_kernels(qwen2: CausalLM) -> None:
    """The prefill kernel and SDPA (what serves where the kernel does not) give the same logits."""
    prompt = ids(37, 1)
    with_kernel = PagedDriver(qwen2)
    plan = with_kernel.backend.plan(BatchLayout([with_kernel.layout(Seq(), 37, None)]), qwen2.device)
    assert all(group.prefill is not None for group in plan.groups)
    sdpa = PagedDriver(qwen2)
    assert isinstance(sdpa.backend, TorchAttentionBackend)
    sdpa.backend.prefill_kernel = False
    got = with_kernel.forward([(Seq(), prompt, None)])[0]
    assert rel_err(got, sdpa.forward([(Seq(), prompt, None)])[0]) < 1e-5


def test_ragged_batch_equals_one_at_a_time(model: CausalLM) -> None:
    prompts = [ids(n, s) for s, n in enumerate((9, 23, 4, 16))]
    tree = ids(6, 9)
    parents = torch.tensor([-1, 0, 0, 1, 1, 2])
    # Alone: each request prefilled, then one step each (prefill chunk, decode token, tree, decode token).
    alone = []
    for i, p in enumerate(prompts):
        driver, seq = PagedDriver(model), Seq()
        driver.forward([(seq, p[:-2], None)])
        step = [(seq, p[-2:], None), (seq, p[-1:], None), (seq, tree, parents), (seq, p[-1:], None)][i]
        alone.append(driver.forward([step])[0])
    # Together: the same steps in one ragged forward over a shared pool.
    driver = PagedDriver(model)
    seqs = [Seq() for _ in prompts]
    for seq, p in zip(seqs, prompts, strict=True):
        driver.forward([(seq, p[:-2], None)])
    items: list[tuple[Seq, torch.Tensor, torch.Tensor | None]] = [
        (seqs[0], prompts[0][-2:], None),
        (seqs[1], prompts[1][-1:], None),
    ]
    items += [(seqs[2], tree, parents), (seqs[3], prompts[3][-1:], None)]
    together = driver.forward(items)
    for a, b in zip(together, alone, strict=True):
        assert rel_err(a, b) < 1e-5


def test_tree_node_logits_equal_its_path_as_a_chain(model: CausalLM) -> None:
    prompt = ids(11, 3)
    tree = ids(7, 4)
    parents = torch.tensor([-1, 0, 0, 1, 3, 2, 0])
    driver, seq = PagedDriver(model), Seq()
    driver.forward([(seq, prompt, None)])
    tree_logits = driver.forward([(seq, tree, parents)])[0]
    for node in range(len(tree)):
        path, i = [], node
        while i >= 0:
            path.append(i)
            i = int(parents[i])
        chain = tree[torch.tensor(path[::-1])]
        solo = PagedDriver(model).forward([(Seq(), torch.cat([prompt, chain]), None)])[0]
        assert rel_err(tree_logits[node], solo[-1]) < 1e-5


def test_decodes_beside_long_prefills_are_grouped_and_equal_one_at_a_time(qwen2: CausalLM) -> None:
    """The torch backend attends sequences in groups of similar lengths (one padded SDPA call each):
    decodes next to long prefill chunks and a tree give what each gives alone."""
    history = [ids(n, 20 + s) for s, n in enumerate((9, 10, 30, 5, 12, 7))]
    new = [ids(n, 40 + s) for s, n in enumerate((1, 1, 1, 20, 3, 6))]
    parents = [None, None, None, None, None, torch.tensor([-1, 0, 0, 1, 1, 2])]
    alone = []
    for h, x, p in zip(history, new, parents, strict=True):
        driver, seq = PagedDriver(qwen2), Seq()
        driver.forward([(seq, h, None)])
        alone.append(driver.forward([(seq, x, p)])[0])
    driver = PagedDriver(qwen2)
    seqs = [Seq() for _ in history]
    for seq, h in zip(seqs, history, strict=True):
        driver.forward([(seq, h, None)])
    items = list(zip(seqs, new, parents, strict=True))
    layouts = [driver.layout(Seq(list(s.blocks), s.cached), len(x), p) for s, x, p in items]
    groups = driver.backend.plan(BatchLayout(layouts), qwen2.device).groups
    assert len(groups) > 1 and any(g.q_rows is not None for g in groups)  # several groups, one shared
    together = driver.forward(items)
    for a, b in zip(together, alone, strict=True):
        assert rel_err(a, b) < 1e-5
