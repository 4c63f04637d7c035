"""Drafter plugins by name, imported lazily so that a service loads only what it runs."""

from __future__ import annotations

import importlib

from treespec.shared.drafting.drafter import Drafter, DrafterContext

# Name (as given to --speculative-algorithm, case-insensitive) -> "module:Class".
BUILTIN_DRAFTERS: dict[str, str] = {
    "random": "treespec.drafter.random_tree.drafter:RandomTreeDrafter",
    "oracle": "treespec.drafter.oracle.drafter:OracleDrafter",
    "ngram": "treespec.drafter.ngram.drafter:NgramDrafter",
    "eagle": "treespec.drafter.eagle.drafter:Eagle2Drafter",
    "eagle3": "treespec.drafter.eagle.drafter:Eagle3Drafter",
    "standalone": "treespec.drafter.standalone.drafter:StandaloneDrafter",
}


class UnknownDrafterError(ValueError):
    pass


def drafter_names() -> list[str]:
    return sorted(BUILTIN_DRAFTERS)


def drafter_class(name: str) -> type[Drafter]:
    """A builtin name, or `package.module:Class` for an out-of-tree plugin."""
    target = BUILTIN_DRAFTERS.get(name.lower(), name)
    if ":" not in target:
        raise UnknownDrafterError(f"unknown drafter {name!r}; known: {', '.join(drafter_names())}")
    module_name, class_name = target.split(":", 1)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownDrafterError(f"cannot load drafter {name!r} from {target}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise UnknownDrafterError(f"{target} is not a Drafter")
    return cls


def create_drafter(name: str, context: DrafterContext) -> Drafter:
    return drafter_class(name).create(context)
