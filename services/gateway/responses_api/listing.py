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
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise APIError(400, f"{owner} has no item with id '{after}'.", param="after")
        start = ids.index(after) + 1
    chosen = ordered[start : start + limit]
    return {
        "object": "list",
        "data": chosen,
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
        "has_more": start + limit < len(ordered),
    }
