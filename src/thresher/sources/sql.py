"""A PostgreSQL query as input: shards are ranges of an integer key column.

    [source]
    uri = "postgresql://user@db.example:5432/shop"
    query = "SELECT customer_id, f0, f1 FROM customers WHERE active"
    id_column = "customer_id"     # key_column defaults to it
    shard_rows = 1000000

Planning runs `SELECT min(key), max(key), count(*) FROM (<query>) q` and cuts [min, max]
into contiguous ranges `[lo, hi)` of about `shard_rows` rows each, assuming the keys are
spread roughly evenly (the last range ends at max + 1). The schema comes from the query
with `LIMIT 0`. A shard reads `… WHERE key >= lo AND key < hi ORDER BY key` through ADBC
and streams its record batches; keys may repeat, but every row needs one (a null key
would belong to no shard, so planning refuses it). Error records number a row by its place
in its shard's key order, which is stable when keys are unique.

PostgreSQL `numeric` columns arrive as text from the driver and are read as float64 (the
type models take); cast them in the query (`x::text`) to keep exact decimals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.errors import SourceError
from thresher.postgres import PgUrl, quote_ident
from thresher.sources.base import MIN_SPLIT_ROWS, Chunk, Plan, Shard, shard_size
from thresher.spec import SourceSection

QUERY_SHOWN = 120  # characters of the query in a shard's description


@dataclass(frozen=True)
class PostgresSource:
    uri: str
    query: str
    key_column: str
    shard_rows: int
    min_shards: int = 1  # the workers the run will have: smaller ranges to give each one

    def plan(self) -> Plan:
        url = PgUrl.parse(self.uri)
        inner = _subquery(self.query)
        key = quote_ident(self.key_column)
        with closing(url.connect(SourceError, "source.uri")) as conn, closing(conn.cursor()) as cur:
            schema = _run(url, cur, f"SELECT * FROM {inner} LIMIT 0").fetch_arrow_table().schema
            _check_key(schema, self.key_column)
            sql = f"SELECT min({key}), max({key}), count(*), count({key}) FROM {inner}"
            low, high, rows, keyed = _run(url, cur, sql).fetchone()
        if keyed != rows:
            raise SourceError(
                f"source.key_column: {rows - keyed} row(s) have a null {self.key_column!r}; "
                "every row needs a key to belong to a shard (filter or coalesce it)"
            )
        where = describe(url, self.query)
        size = shard_size(rows, self.shard_rows, self.min_shards, MIN_SPLIT_ROWS)
        ranges = split_key_range(low, high, rows, size)
        shards = [Shard(i, where, lo, hi) for i, (lo, hi) in enumerate(ranges)]
        return Plan(shards=shards, schema=plain_schema(schema))

    def reader(self, schema: pa.Schema, columns: list[str]) -> PostgresReader:
        target = pa.schema([schema.field(c) for c in columns])
        return PostgresReader(self.uri, self.query, self.key_column, target)


@dataclass(frozen=True)
class PostgresReader:
    """Reads key ranges of the query; picklable (plain strings and a schema)."""

    uri: str
    query: str
    key_column: str
    schema: pa.Schema

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        url = PgUrl.parse(self.uri)
        key = quote_ident(self.key_column)
        columns = ", ".join(quote_ident(name) for name in self.schema.names) or "1"
        # The bounds are integers from the plan, written inline so the driver can stream
        # the result with COPY rather than a prepared statement.
        sql = (
            f"SELECT {columns} FROM {_subquery(self.query)}"
            f" WHERE {key} >= {int(shard.start)} AND {key} < {int(shard.stop)} ORDER BY {key}"
        )
        position = 0
        with closing(url.connect(SourceError, "source.uri")) as conn, closing(conn.cursor()) as cur:
            for batch in _run(url, cur, sql).fetch_record_batch():
                table = conform(pa.Table.from_batches([batch]), self.schema)
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


def describe(url: PgUrl, query: str) -> str:
    """How error records name this input: `postgresql://host/db (SELECT …)`, no password."""
    text = re.sub(r"\s+", " ", query).strip()
    if len(text) > QUERY_SHOWN:
        text = text[: QUERY_SHOWN - 1] + "…"
    return f"{url.redacted} ({url.hide(text)})"


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """The schema the reader yields: driver extension types as plain ones, `numeric` and
    decimals as float64, no driver metadata."""
    return pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in schema])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` cast to `schema` (from `plain_schema`), column by column."""
    columns = []
    for name, target in zip(schema.names, schema.types, strict=True):
        column = table.column(name)
        if isinstance(column.type, pa.BaseExtensionType):
            storage = [chunk.storage for chunk in column.chunks]
            column = pa.chunked_array(storage, type=column.type.storage_type)
        columns.append(column if column.type == target else column.cast(target))
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


def _subquery(query: str) -> str:
    # The newline ends a trailing `-- comment` before the closing parenthesis.
    return f"({query.strip().rstrip(';')}\n) AS thresher_q"


def _run(url: PgUrl, cur: Any, sql: str) -> Any:
    """Execute `sql`; a database error becomes a SourceError naming the query."""
    try:
        cur.execute(sql)
    except Exception as exc:  # the driver's error classes vary between versions
        message = url.hide(str(exc)).strip().splitlines()[0]
        raise SourceError(f"source.query: PostgreSQL refused it: {message}") from None
    return cur


def postgres_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> PostgresSource:
    """The `postgresql` source plug-in: the query, split into key ranges."""
    key = section.key_column or section.id_column
    assert section.query and key  # the spec requires them
    return PostgresSource(section.uri, section.query, key, section.shard_rows, min_shards)
