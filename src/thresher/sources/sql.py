"""A SQL query as input: shards are ranges of an integer key column, for every database.

    [source]
    uri = "postgresql://user@db.example:5432/shop"    # or sqlite:///…, duckdb:///…
    query = "SELECT customer_id, f0, f1 FROM customers WHERE active"
    id_column = "customer_id"     # key_column defaults to it
    shard_rows = 1000000

Planning runs `SELECT min(key), max(key), count(*) FROM (<query>) q` and cuts [min, max]
into contiguous ranges `[lo, hi)` of about `shard_rows` rows each, assuming the keys are
spread roughly evenly (the last range ends at max + 1). A shard reads
`… WHERE key >= lo AND key < hi ORDER BY key` and streams its record batches; keys may
repeat, but every row needs one (a null key would belong to no shard, so planning refuses
it). Error records number a row by its place in its shard's key order, which is stable
when keys are unique.

What differs between databases (connecting, reading a result as Arrow, learning a query's
column types) is a small `Database`; `postgresql.py`, `sqlite.py` and `duckdb.py` hold one
each.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import pyarrow as pa

from thresher.errors import SourceError
from thresher.postgres import quote_ident
from thresher.sources.base import MIN_SPLIT_ROWS, Chunk, Plan, Shard, shard_size

QUERY_SHOWN = 120  # characters of the query in a shard's description


class Database(Protocol):
    """One database's part of a query source; picklable (readers travel to workers)."""

    def describe(self, query: str) -> str:
        """How error records name the input: `<where> (SELECT …)`, never a password."""
        ...

    def schema(self, inner: str) -> pa.Schema:
        """The columns `SELECT * FROM <inner>` returns, typed as `stream` yields them
        after `conform`: plain Arrow types, no driver metadata."""
        ...

    def stream(self, sql: str) -> AbstractContextManager[Iterable[pa.RecordBatch]]:
        """`sql`'s result as record batches (a one-row result in the first), read while
        the context is open; `conform` casts each to the schema. A query the database
        refuses raises a SourceError at `source.query`."""
        ...


@dataclass(frozen=True)
class QuerySource:
    database: Database
    query: str
    key_column: str
    shard_rows: int
    min_shards: int = 1  # the workers the run will have: smaller ranges to give each one

    def plan(self) -> Plan:
        inner = subquery(self.query)
        key = quote_ident(self.key_column)
        schema = self.database.schema(inner)
        _check_key(schema, self.key_column)
        sql = f"SELECT min({key}), max({key}), count(*), count({key}) FROM {inner}"
        with self.database.stream(sql) as result:
            stats = next(iter(result))
        low, high, rows, keyed = (column[0].as_py() for column in stats.columns)
        if keyed != rows:
            raise SourceError(
                f"source.key_column: {rows - keyed} row(s) have a null {self.key_column!r}; "
                "every row needs a key to belong to a shard (filter or coalesce it)"
            )
        where = self.database.describe(self.query)
        size = shard_size(rows, self.shard_rows, self.min_shards, MIN_SPLIT_ROWS)
        ranges = split_key_range(low, high, rows, size)
        shards = [Shard(i, where, lo, hi) for i, (lo, hi) in enumerate(ranges)]
        return Plan(shards=shards, schema=schema)

    def reader(self, schema: pa.Schema, columns: list[str]) -> QueryReader:
        target = pa.schema([schema.field(c) for c in columns])
        return QueryReader(self.database, self.query, self.key_column, target)


@dataclass(frozen=True)
class QueryReader:
    """Reads key ranges of the query; picklable (a Database, strings and a schema)."""

    database: Database
    query: str
    key_column: str
    schema: pa.Schema

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        key = quote_ident(self.key_column)
        columns = ", ".join(quote_ident(name) for name in self.schema.names) or "1"
        # The bounds are integers from the plan, written inline so a driver can stream
        # the result (PostgreSQL's with COPY) rather than prepare a statement.
        sql = (
            f"SELECT {columns} FROM {subquery(self.query)}"
            f" WHERE {key} >= {int(shard.start)} AND {key} < {int(shard.stop)} ORDER BY {key}"
        )
        position = 0
        where = self.database.describe(self.query)  # for a schema changed since the plan
        with self.database.stream(sql) as result:
            for batch in result:
                rows = pa.Table.from_batches([batch])
                table = conform(rows, self.schema, where, "source.query")
                for offset in range(0, table.num_rows, rows_per_chunk):
                    piece = table.slice(offset, rows_per_chunk)
                    positions = np.arange(position, position + piece.num_rows, dtype=np.int64)
                    position += piece.num_rows
                    yield Chunk(table=piece, positions=positions)

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        """The row's 0-based place in the shard's result (ordered by the key)."""
        return "row", position


def split_key_range(low: Any, high: Any, rows: int, shard_rows: int) -> list[tuple[int, int]]:
    """Contiguous `[lo, hi)` ranges covering [low, high], about `shard_rows` rows each if
    the keys are spread evenly. No rows, no ranges.

        >>> split_key_range(1, 100, 100, 30)
        [(1, 26), (26, 51), (51, 76), (76, 101)]
    """
    if rows == 0 or low is None or high is None:
        return []
    low, high = int(low), int(high)
    count = min(max(1, math.ceil(rows / shard_rows)), high - low + 1)
    step = math.ceil((high - low + 1) / count)
    return [(lo, min(lo + step, high + 1)) for lo in range(low, high + 1, step)]


def shown_query(query: str) -> str:
    """The query on one line, cut to `QUERY_SHOWN` characters, for descriptions."""
    text = re.sub(r"\s+", " ", query).strip()
    return text[: QUERY_SHOWN - 1] + "…" if len(text) > QUERY_SHOWN else text


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema the reader yields: driver extension types as plain ones, `numeric` and
    decimals as float64, no driver metadata."""
    return pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in schema])


def conform(
    table: pa.Table, schema: pa.Schema, where: str = "the input", field: str = "source"
) -> pa.Table:
    """`table` cast to `schema` (from `plain_schema`), column by column. A column gone or
    of a type that does not cast (the input's schema changed since the plan read it, as a
    resume may find) is a SourceError naming `field`, `where` and the column, never a row
    made up."""
    columns = []
    for name, target in zip(schema.names, schema.types, strict=True):
        if name not in table.column_names:
            raise SourceError(
                f"{field}: {where} has no column {name!r} now (the job's plan read it as"
                f" {target}): its schema changed since the job was planned; run the job anew"
            )
        column = table.column(name)
        if isinstance(column.type, pa.BaseExtensionType):
            storage = [chunk.storage for chunk in column.chunks]
            column = pa.chunked_array(storage, type=column.type.storage_type)
        try:
            columns.append(column if column.type == target else column.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SourceError(
                f"{field}: column {name!r} of {where} is {column.type} now, not {target} as the"
                f" job's plan read it ({exc}): its schema changed since the job was planned;"
                " run the job anew"
            ) from None
    return pa.Table.from_arrays(columns, schema=schema)


def _plain_type(arrow_type: pa.DataType) -> pa.DataType:
    if isinstance(arrow_type, pa.BaseExtensionType):
        if getattr(arrow_type, "type_name", "") == "numeric":
            return pa.float64()
        return arrow_type.storage_type
    if pa.types.is_decimal(arrow_type):
        return pa.float64()
    return arrow_type


def _check_key(schema: pa.Schema, key_column: str) -> None:
    if key_column not in schema.names:
        raise SourceError(
            f"source.key_column: the query returns no column {key_column!r} "
            f"(it returns {', '.join(schema.names)})"
        )
    key_type = schema.field(key_column).type
    if not pa.types.is_integer(key_type):
        raise SourceError(
            f"source.key_column: {key_column!r} is {key_type}, not an integer; "
            "choose an integer column (or cast one in the query) to split the input by"
        )


def subquery(query: str) -> str:
    """The user's query as a subquery `(…) AS thresher_q`."""
    # The newline ends a trailing `-- comment` before the closing parenthesis.
    return f"({query.strip().rstrip(';')}\n) AS thresher_q"


def refused(database: str, exc: Exception, hide: Any = str) -> SourceError:
    """A database's error running the query, as a SourceError at `source.query`."""
    lines = hide(str(exc)).strip().splitlines() or [type(exc).__name__]
    return SourceError(f"source.query: {database} refused it: {lines[0]}")
