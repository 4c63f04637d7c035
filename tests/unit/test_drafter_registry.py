"""Drafters are found by name (lazily imported) or by `module:Class`."""

from __future__ import annotations

import pytest

from treespec.drafter.random_tree.drafter import RandomTreeDrafter
from treespec.shared.drafting.drafter import DrafterContext
from treespec.shared.drafting.registry import (
    UnknownDrafterError,
    create_drafter,
    drafter_class,
    drafter_names,
)


def test_builtin_names_resolve() -> None:
    assert {"random", "oracle"} <= set(drafter_names())
    drafter = create_drafter("RANDOM", DrafterContext(vocab_size=50, options={"seed": 3}))
    assert isinstance(drafter, RandomTreeDrafter) and drafter.vocab_size == 50


def test_module_path_resolves() -> None:
    assert drafter_class("treespec.drafter.random_tree.drafter:RandomTreeDrafter") is RandomTreeDrafter


@pytest.mark.parametrize("name", ["nope", "treespec.nope:X", "treespec.shared.drafting.token_tree:TokenTree"])
def test_unknown_or_wrong_drafters_fail_clearly(name: str) -> None:
    with pytest.raises(UnknownDrafterError):
        drafter_class(name)


def test_oracle_needs_its_continuations() -> None:
    with pytest.raises(ValueError, match="continuations"):
        create_drafter("oracle", DrafterContext(vocab_size=50))
