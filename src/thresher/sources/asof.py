"""Reading a shard of the `features` source (`features.py`): one DuckDB `ASOF JOIN` per
feature table, of the shard's entities against the table's files.

The shard's entity rows are read with the Parquet reader and only their keys, as-of
times and row numbers go to DuckDB (registered as an Arrow table), so entity columns come
back exactly as they were. DuckDB reads the feature files itself, filtered before the
join to the shard's key range, the keys the shard has (a semi-join) and the times that
can match (≤ the latest as-of, ≥ the earliest as-of less the ttl): zone maps skip row
groups outside them, and no feature table is ever held whole. Each result comes back in
entity order and is put beside the entity columns.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import SourceError, SpecError
from thresher.postgres import quote_ident
from thresher.sources.asof_order import (
    HUGE,
    MISFIT,
    Clock,
    OrderKey,
    guessed_key,
    order_key,
    probe_span,
)
from thresher.sources.base import Chunk, Shard
from thresher.sources.parquet import ParquetReader
from thresher.sources.sql import conform

METADATA_KEY = b"thresher.features"
PROBE = "thresher_entities"


@dataclass(frozen=True)
class TableRead:
    """One feature table as planned: its files frozen, its columns checked."""

    name: str
    uri: str
    kind: Literal["parquet", "csv", "duckdb", "delta"] | str
    files: tuple[str, ...]  # a duckdb table's: its database file
    table: str | None
    key: tuple[str, ...]
    entity_key: tuple[str, ...]
    timestamp: str
    columns: tuple[str, ...]
    outputs: tuple[str, ...]  # the joined names of `columns`
    ttl_us: int | None
    tie_break: str | None
    nanoseconds: bool = False  # its timestamp is timestamp[ns]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableRead:
        tuples = ("files", "key", "entity_key", "columns", "outputs")
        fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in data.items()}
        return cls(**fields)


def _relation(read: TableRead, filename: bool = True) -> str:
    """`read`'s rows, with each row's file name (`filename`) and, from Parquet, its
    place in the file (`file_row_number`)."""
    files = "[" + ", ".join(_literal(f) for f in read.files) + "]"
    if read.kind == "duckdb":
        assert read.table is not None
        return ".".join(["thresher_db", *map(quote_ident, read.table.split("."))])
    if read.kind == "csv":
        return f"read_csv({files}, filename = true)"
    # a Delta table's partition values live in its files' paths (col=value/), not in them
    hive = ", hive_partitioning = true" if read.kind == "delta" else ""
    named = ", filename = true" if filename else ""
    return f"read_parquet({files}{named}, file_row_number = true{hive})"


def _connect(read: TableRead) -> Any:
    conn = duckdb.connect()
    conn.execute("SET TimeZone = 'UTC'")
    if read.kind == "duckdb":
        conn.execute(f"ATTACH {_literal(read.files[0])} AS thresher_db (READ_ONLY)")
    return conn


def describe(read: TableRead, field: str) -> pa.Schema:
    """The table's columns as DuckDB reads them; SourceError naming `field` and the uri."""
    try:
        with closing(_connect(read)) as conn:
            sql = f"SELECT * EXCLUDE (filename) FROM {_relation(read)} LIMIT 0"
            if read.kind == "duckdb":
                sql = f"SELECT * FROM {_relation(read)} LIMIT 0"
            schema: pa.Schema = conn.sql(sql).to_arrow_table().schema
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise SpecError([f"{field}.uri: cannot read {read.uri}: {first}"]) from None
    return pa.schema([f for f in schema if f.name != "file_row_number"])


def _tie_order(read: TableRead) -> str:
    """Which row of a (key, timestamp) tie wins: first in this order."""
    order = [f"{quote_ident(read.tie_break)} DESC NULLS LAST"] if read.tie_break else []
    if read.kind == "duckdb":
        return ", ".join([*order, "rowid DESC"])
    files = "[" + ", ".join(_literal(f) for f in read.files) + "]"
    order.append(f"list_position({files}, filename) DESC")  # the plan's file order
    if read.kind == "csv":
        order += [f"{quote_ident(c)} DESC NULLS LAST" for c in read.columns]
    else:
        order.append("file_row_number DESC")
    return ", ".join(order)


def bounds_sql(read: TableRead, probe: pa.Table) -> list[str]:
    """The filters on the feature rows that can match `probe`'s entities: the times
    (up to the latest as-of, back to the earliest less the ttl) and the keys' range."""
    ts = quote_ident(read.timestamp)
    bounds = [f"{ts} <= {_bound(probe['__ts'], 'max')}"]
    earliest = _bound(probe["__ts"], "min")
    if read.ttl_us is not None and earliest != "NULL":
        bounds.append(f"{ts} >= {earliest} - to_microseconds({read.ttl_us})")
    for i, key in enumerate(quote_ident(k) for k in read.key):
        low, high = _bound(probe[f"__k{i}"], "min"), _bound(probe[f"__k{i}"], "max")
        if "NULL" not in (low, high):
            bounds.append(f"{key} BETWEEN {low} AND {high}")
    return bounds


def by_file_order(read: TableRead) -> bool:
    """Whether a tie goes to the last row in file order, found by the join itself."""
    return read.kind in ("parquet", "delta") and not read.tie_break


def join_sql(read: TableRead, probe: pa.Table, order: OrderKey = HUGE) -> str:
    """The query giving `read`'s columns for each row of `probe` (`__row`, `__k0`…,
    `__ts`), ordered by `__row`; `order` says how a Parquet table's rows are ordered."""
    keys = [quote_ident(k) for k in read.key]
    ts = quote_ident(read.timestamp)
    bounds = bounds_sql(read, probe)
    if _sparse(probe, len(keys)):
        same = " AND ".join(f"p.__k{i} = src.{k}" for i, k in enumerate(keys))
        bounds.append(f"EXISTS (SELECT 1 FROM {PROBE} p WHERE {same})")
    picked = ", ".join(f"{k} AS __k{i}" for i, k in enumerate(keys))
    values = ", ".join(f"{quote_ident(c)} AS __c{j}" for j, c in enumerate(read.columns))
    on = " AND ".join(f"p.__k{i} = f.__k{i}" for i in range(len(keys)))
    if by_file_order(read):
        # Ties by file order fall out of the ASOF JOIN itself: it matches on one number,
        # the time and then the row's place among the files (`asof_order.py`; a window
        # function over the feature rows to break ties cost 5x the join). The ttl is
        # checked on that number too: the feature rows sorted for the join are a column
        # narrower without their time (5% of the join).
        files = "[" + ", ".join(_literal(f) for f in read.files) + "]"
        several = len(read.files) > 1
        place = order.feature(ts, f"list_position({files}, filename)" if several else None)
        probed = ", ".join(["__row", *(f"__k{i}" for i in range(len(keys)))])
        probed += f", {order.probe('__ts')} AS __ord"
        if read.ttl_us is not None:
            probed += f", {order.oldest('__ts', read.ttl_us)} AS __old"
        return (
            f"WITH f AS (SELECT {picked}, {values}, {place} AS __ord"
            f" FROM {_relation(read, several)} AS src WHERE {' AND '.join(bounds)})"
            f" SELECT p.__row, {_outputs(read, 'f.__ord >= p.__old')}"
            f" FROM (SELECT {probed} FROM {PROBE}) p"
            f" ASOF LEFT JOIN f ON {on} AND p.__ord >= f.__ord ORDER BY p.__row"
        )
    fresh = f"f.__fts >= p.__ts - to_microseconds({read.ttl_us})"
    return (
        f"WITH f AS (SELECT {picked}, {ts} AS __fts, {values}"
        f" FROM {_relation(read)} AS src WHERE {' AND '.join(bounds)}"
        f" QUALIFY row_number() OVER (PARTITION BY {', '.join(keys)}, {ts}"
        f" ORDER BY {_tie_order(read)}) = 1)"
        f" SELECT p.__row, {_outputs(read, fresh)} FROM {PROBE} p ASOF LEFT JOIN f"
        f" ON {on} AND p.__ts >= f.__fts ORDER BY p.__row"
    )


def _outputs(read: TableRead, fresh: str) -> str:
    """The joined feature columns, null where the ttl is passed (`fresh` false)."""
    if read.ttl_us is None:
        return ", ".join(f"f.__c{j}" for j in range(len(read.columns)))
    return ", ".join(f"CASE WHEN {fresh} THEN f.__c{j} END" for j in range(len(read.columns)))


def _by_file_order(conn: Any, read: TableRead, probe: pa.Table) -> pa.Table:
    """The join whose ties go to the last row in file order: on the key guessed from the
    entities if every feature row fits it, else on the one a scan of the rows finds."""
    clock = Clock(read.nanoseconds, nanoseconds(probe["__ts"].type))
    span = probe_span(conn, PROBE, clock)
    guess = guessed_key(span, len(read.files), read.ttl_us, clock=clock)
    if guess is not None:
        try:
            return conn.sql(join_sql(read, probe, guess)).to_arrow_table()
        except duckdb.Error as exc:
            if MISFIT not in str(exc):
                raise
    matching = f"{_relation(read)} AS src WHERE {' AND '.join(bounds_sql(read, probe))}"
    timestamp, files = quote_ident(read.timestamp), len(read.files)
    order = order_key(conn, matching, timestamp, files, span, clock=clock)
    return conn.sql(join_sql(read, probe, order)).to_arrow_table()


def nanoseconds(kind: pa.DataType) -> bool:
    """Whether `kind` is a timestamp of ns (the join key then counts in ns)."""
    return bool(pa.types.is_timestamp(kind) and kind.unit == "ns")


def _sparse(probe: pa.Table, keys: int) -> bool:
    """Whether the shard's keys leave gaps in their range worth a semi-join: a filter of
    the feature rows to the shard's keys costs a hash probe a row (a fifth of the join
    for a shard holding most keys), and repays it only where it drops rows. An integer
    key whose distinct values fill at least half their range drops few: none then."""
    column = probe["__k0"]
    if keys != 1 or not pa.types.is_integer(column.type):
        return True
    low, high = (v.as_py() for v in pc.min_max(column).values())
    if low is None:
        return True
    span = high - low + 1
    if span > 2 * len(column):
        return True  # fewer keys than half the range, whatever they are
    # which keys are there, as a bitmap over the range: Arrow's count_distinct hashed
    # 1M keys in 50 ms, this takes 2
    seen = np.zeros(span, dtype=bool)
    seen[_integers(column) - low] = True
    return bool(int(seen.sum()) * 2 < span)


def _integers(column: pa.ChunkedArray) -> np.ndarray:
    """An integer column's values but its nulls, read from its buffer: Arrow's `to_numpy`
    imports pandas (0.2 s, a fresh process's first call) in pyarrow 26."""
    flat = column.drop_null().combine_chunks()
    width = flat.type.bit_width // 8
    kind = "i" if pa.types.is_signed_integer(flat.type) else "u"
    data = flat.buffers()[1]
    return np.frombuffer(data, f"{kind}{width}", count=len(flat), offset=flat.offset * width)


def _bound(column: pa.ChunkedArray, which: str) -> str:
    """The column's min or max as a SQL literal (a timestamp widened to whole µs), or
    NULL when it has no value or no literal form (then no bound is pushed down)."""
    scalar = pc.min_max(column)[which]
    if pa.types.is_timestamp(column.type):
        micro = pc.cast(scalar, pa.int64()).as_py()
        if micro is None:
            return "NULL"
        per = {"s": 10**-6, "ms": 10**-3, "us": 1, "ns": 10**3}[column.type.unit]
        micro = micro // per if which == "min" else -(-micro // per)
        text = f"make_timestamp({int(micro)})"
        return f"{text}::TIMESTAMPTZ" if column.type.tz else text
    return _literal(scalar.as_py())


def _literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "NULL"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    return "NULL"


@dataclass(frozen=True)
class FeaturesReader:
    """Reads a shard of entities joined with its feature tables; picklable."""

    entity_columns: tuple[str, ...]  # what is read from the entity files
    timestamp: str
    tables: tuple[TableRead, ...]  # those with a requested column
    schema: pa.Schema  # the requested columns, in order

    @classmethod
    def for_plan(cls, schema: pa.Schema, columns: list[str]) -> FeaturesReader:
        frozen = json.loads((schema.metadata or {})[METADATA_KEY])
        tables = tuple(TableRead.from_json(t) for t in frozen["tables"])
        outputs = {name for t in tables for name in t.outputs}
        wanted = [t for t in tables if set(t.outputs) & set(columns)]
        need = [c for c in columns if c not in outputs]
        for table in wanted:
            need += [*table.entity_key, frozen["timestamp"]]
        target = pa.schema([schema.field(c) for c in columns])
        return cls(tuple(dict.fromkeys(need)), frozen["timestamp"], tuple(wanted), target)

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        entities, first = self._entities(shard)
        columns = {name: entities.column(name) for name in entities.column_names}
        for table in self.tables:
            columns |= self._joined(table, entities, shard)
        joined = pa.table(
            [columns[n] for n in self.schema.names], schema=self.schema.remove_metadata()
        )
        for offset in range(0, joined.num_rows, rows_per_chunk):
            piece = joined.slice(offset, rows_per_chunk)
            start = first + offset
            yield Chunk(piece, np.arange(start, start + piece.num_rows, dtype=np.int64))

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "row", position

    def _entities(self, shard: Shard) -> tuple[pa.Table, int]:
        reader = ParquetReader(columns=self.entity_columns)
        return reader.read_whole(shard), shard.first_row

    def _joined(self, read: TableRead, entities: pa.Table, shard: Shard) -> dict[str, Any]:
        rows = entities.num_rows
        # from the buffer: `pa.array` of an ndarray imports pandas (0.2 s) in pyarrow 26
        numbers = pa.py_buffer(np.arange(rows, dtype=np.int64))
        probe = {"__row": pa.Array.from_buffers(pa.int64(), rows, [None, numbers])}
        probe |= {f"__k{i}": entities.column(k) for i, k in enumerate(read.entity_key)}
        probe["__ts"] = entities.column(self.timestamp)
        probe_table = pa.table(probe)
        types = pa.schema([self.schema.field(o) for o in read.outputs if o in self.schema.names])
        try:
            with closing(_connect(read)) as conn:
                conn.register(PROBE, probe_table)
                if by_file_order(read):
                    result = _by_file_order(conn, read, probe_table)
                else:
                    result = conn.sql(join_sql(read, probe_table)).to_arrow_table()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise SourceError(
                f"feature table {read.name} ({read.uri}): DuckDB refused the join: {first}",
                shard=shard.index,
            ) from None
        assert result.num_rows == rows  # an ASOF LEFT JOIN keeps each entity row once
        named = result.rename_columns(["__row", *read.outputs])
        where = f"feature table {read.name} ({read.uri})"
        conformed = conform(named, types, where, "source.options.tables")
        return dict(zip(types.names, conformed.columns, strict=True))
