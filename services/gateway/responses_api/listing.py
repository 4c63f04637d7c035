"""A page of items as OpenAI pages lists (a response's input items, a conversation's items): `limit`
of them after the item `after`, in `order` (desc: newest first)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from treespec.gateway.errors import APIError

MAX_PAGE = 100


def page(
    items: Sequence[dict[str, Any]], owner: str, limit: int, order: Literal["asc", "desc"], after: str | None
) -> dict[str, Any]:
    """`owner`: what holds the items, as an error about `after` names it."""
    ordered = list(reversed(items)) if order == "desc" else list(items)
    start = start_after([item["id"] for item in ordered], after, owner)
    return list_object(ordered[start : start + limit], start + limit < len(ordered))


def start_after(ids: Sequence[str], after: str | None, owner: str) -> int:
    """Where a page starts among the ordered ids: just after `after` (a 400 when it is not there)."""
    if after is None:
        return 0
    if after not in ids:
        raise APIError(400, f"{owner} has no item with id '{after}'.", param="after")
    return ids.index(after) + 1


def list_object(chosen: Sequence[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A page as OpenAI answers one: its items, the first and last ids, whether more follow."""
    return {
        "object": "list",
        "data": list(chosen),
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
        "has_more": has_more,
    }
