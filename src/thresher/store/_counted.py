"""A tenant's rows counted and added in one step, for the limits on what a tenant makes
(`[tenant_defaults]` in the server config): the count is read under the table's write
lock, so two requests at once — on one server or on two sharing the store — cannot both
find room for the last one.

A table's `create` or `add` calls `make_room` inside its own transaction, before its
INSERT; `AtLimit` rolls the transaction back.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from thresher.store._db import Cursor, StoreError

__all__ = ["AtLimit", "make_room"]


class AtLimit(StoreError):
    """The tenant has `used` already, and one more (or `adding` more) would pass `limit`."""

    def __init__(self, used: int, limit: int) -> None:
        self.used, self.limit = used, limit
        super().__init__(f"{used:,} in use, the limit is {limit:,}")


def make_room(
    cur: Cursor,
    dialect: str,
    table: str,
    *,
    where: tuple[str, Sequence[Any]],
    limit: int,
    adding: int = 1,
    measure: str = "COUNT(*)",
) -> None:
    """Take `table`'s write lock, then raise AtLimit unless `measure` (a count, or a sum
    such as `COALESCE(SUM(bytes), 0)`) over the rows `where` selects, plus `adding`,
    stays within `limit`."""
    if dialect == "postgresql":
        # Any number, the same in every thresher: the table's name, as a lock key.
        cur.execute("SELECT pg_advisory_xact_lock(?)", (zlib.crc32(table.encode()),))
    else:
        cur.execute(f"DELETE FROM {table} WHERE 1 = 0")  # SQLite's write lock, taken now
    condition, params = where
    row = cur.execute(f"SELECT {measure} FROM {table} WHERE {condition}", params).fetchone()
    used = int(row[0]) if row and row[0] is not None else 0
    if used + adding > limit:
        raise AtLimit(used, limit)
