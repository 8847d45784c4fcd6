"""OpenAI's list object, for the cursor-paged lists its clients walk (`after`, `has_more`:
the official client's auto-pagination follows `last_id`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cursor_page"]


def cursor_page(items: Sequence[dict[str, Any]], limit: int) -> dict[str, Any]:
    """A page of the first `limit` of `items`, fetched `limit + 1` long so that one more
    says whether another page follows."""
    page = list(items[:limit])
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
