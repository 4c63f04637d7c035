"""`--repeats`: each method runs a prompt several times in turn and its median run is tallied, every
repeat under a cache salt of its own (bench/runs.py time_in_turn), on the tiny model."""

from __future__ import annotations

from pathlib import Path

import transformers

from treespec.bench import runs
from treespec.bench.ngram_bench import speculation
from treespec.bench.throughput import Throughput
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import create_drafter
from treespec.shared.model.causal_lm import CausalLM

NEW = 12
PROMPT = [5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 40, 41, 42, 5, 9]


def test_repeats_tally_one_median_run_each_and_share_nothing(tiny_path: Path, tiny_model: CausalLM) -> None:
    drafter = create_drafter("ngram", DrafterContext(tiny_model.config.vocab_size, tiny_path, {}))
    spec = speculation(NgramConfig())
    plain = runs.engine(tiny_model, tiny_path, None, None, [PROMPT], NEW)
    ngram = runs.engine(tiny_model, tiny_path, drafter, spec, [PROMPT], NEW, runs.NodeCost(0.01))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_path).eval()
    engines = {"plain": (plain, None), "ngram": (ngram, spec)}
    try:
        tally = Throughput()
        out = runs.time_in_turn(0, PROMPT, NEW, tally, "c", engines, hf, "hf", repeats=3)
        assert out["ngram"].token_ids == out["plain"].token_ids
        for method in ("plain", "ngram", "hf"):
            assert tally.overall[method].tokens == NEW  # one run counted, not three
        # A later run under a salt of its own drafts as every repeat did: had the repeats shared the
        # drafter's memory, two of the three would have copied the first one's output in fewer steps.
        scratch = Throughput()
        fresh = runs.time_engine(ngram, "fresh", PROMPT, NEW, scratch, "ngram", "c", spec, cache_salt="x")
        assert tally.overall["ngram"].verify_steps == fresh.stats.verify_steps
        again = runs.time_engine(ngram, "again", PROMPT, NEW, scratch, "ngram", "c", spec)
        assert again.stats.verify_steps < fresh.stats.verify_steps  # unsalted: it copies the first run
    finally:
        drafter.shutdown()
