"""The benches' methods take turns at each place in the order, run after run (bench/runs.py rotated)."""

from __future__ import annotations

from treespec.bench import runs


def test_each_method_takes_each_place_in_turn() -> None:
    names = ("plain", "ngram", "hf_pld")
    orders = [runs.rotated(names, k) for k in range(4)]
    assert orders[:3] == [
        ["plain", "ngram", "hf_pld"],
        ["ngram", "hf_pld", "plain"],
        ["hf_pld", "plain", "ngram"],
    ]
    assert orders[3] == orders[0]
    for place in range(len(names)):
        assert sorted(o[place] for o in orders[:3]) == sorted(names)


def test_a_single_method_keeps_its_place() -> None:
    assert runs.rotated(["plain"], 5) == ["plain"]
