"""Keeping the cyclic garbage collector's full passes short in a long-running process.

Python's collector now and then scans every tracked object (a full collection), and a serving process
holds many: modules, the tokenizer, transformers' classes, a drafter's tables. On a 2-core AMD EPYC
one such pass stalled the engine loop for 170 ms in the middle of a tree's construction (an n-gram
drafter's trie of 8 candidates), against a 5.5 ms decoding step, and a category of `treespec bench
ngram` then measured its drafting at 1.5 instead of 0.3 ms a step. As vLLM does after it starts, each
process collects once when it is ready and freezes what is alive then (`gc.freeze`: the objects move
to a permanent generation that the collector no longer scans); what serving allocates afterwards is
collected as before. Only a process's own entry point freezes (`treespec verifier`, `treespec
drafter`, and a benchmark for its run): objects frozen stay out of cyclic collection, so a library
call that froze would keep a test process's garbage cycles forever.
"""

from __future__ import annotations

import gc


def freeze_heap() -> int:
    """Collect, then exempt every object alive now from later collections; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze_heap() -> None:
    """Return the frozen objects to the collector (a benchmark run that ends in a longer process)."""
    gc.unfreeze()
