"""A SQLite query as input, read with the standard library (`sql.py` holds the key-range
shards).

    [source]
    uri = "sqlite:///data/shop.db"
    query = "SELECT customer_id, f0, f1 FROM customers WHERE active"
    id_column = "customer_id"

The file is opened read-only. SQLite columns have no fixed type, so the schema is the
Arrow types of the query's first `SCHEMA_SAMPLE_ROWS` rows: integers int64, reals (or
integers and reals mixed) float64, text string, blobs binary, and a column with no value
there float64. A later value that does not fit its column's type fails the shard, naming
the column; cast it in the query (`CAST(x AS REAL)`) to fix the type. The standard
library's reader, unlike ADBC's, takes each batch's types from all of its values rather
than from its first rows, and the batches are cast to the plan's schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa

from thresher.errors import SourceError
from thresher.sources.sql import QuerySource, refused, shown_query
from thresher.spec import SourceSection

SCHEMA_SAMPLE_ROWS = 10_000
BATCH_ROWS = 65_536


@dataclass(frozen=True)
class SqliteDatabase:
    """A SQLite database file, opened read-only."""

    path: str

    def describe(self, query: str) -> str:
        return f"sqlite://{self.path} ({shown_query(query)})"

    def schema(self, inner: str) -> pa.Schema:
        sql = f"SELECT * FROM {inner} LIMIT {SCHEMA_SAMPLE_ROWS}"
        with self.stream(sql) as result:
            sample = next(iter(result), None)
        assert sample is not None  # stream yields a batch, empty or not, first
        fields = []
        for field in sample.schema:
            kind = pa.float64() if pa.types.is_null(field.type) else field.type
            fields.append(pa.field(field.name, kind))
        return pa.schema(fields)

    @contextmanager
    def stream(self, sql: str) -> Iterator[Iterator[pa.RecordBatch]]:
        """The result in batches of `BATCH_ROWS`, each typed by its own values (the
        first one, empty or not, always there); `conform` casts them to the plan's."""
        try:
            conn = sqlite3.connect(f"{Path(self.path).absolute().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise SourceError(f"source.uri: cannot open {self.path}: {exc}") from None
        with closing(conn), closing(conn.cursor()) as cur:
            try:
                cur.execute(sql)
            except sqlite3.Error as exc:
                raise refused("SQLite", exc) from None
            yield _batches(cur)


def _batches(cur: sqlite3.Cursor) -> Iterator[pa.RecordBatch]:
    names = [d[0] for d in cur.description]
    rows = cur.fetchmany(BATCH_ROWS)
    yield _batch(names, rows)
    while rows := cur.fetchmany(BATCH_ROWS):
        yield _batch(names, rows)


def _batch(names: list[str], rows: list[tuple[object, ...]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = []
    for name, values in zip(names, columns, strict=True):
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SourceError(
                f"source.query: column {name!r} mixes types SQLite holds apart ({exc}); "
                "cast it in the query (CAST(x AS REAL), CAST(x AS TEXT))"
            ) from None
    return pa.RecordBatch.from_arrays(arrays, names=names)


def sqlite_path(uri: str, field: str) -> str:
    """The file a `sqlite:///path/file.db` uri names (no query string)."""
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite" or not parsed.path or parsed.netloc:
        raise SourceError(f"{field}: expected sqlite:///path/file.db, got {uri}")
    return "/" + parsed.path.lstrip("/")  # `sqlite:////abs/x.db` too


def sqlite_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> QuerySource:
    """The `sqlite` source plug-in: the query, split into key ranges."""
    key = section.key_column or section.id_column
    assert section.query and key  # the spec requires them
    database = SqliteDatabase(sqlite_path(section.uri, "source.uri"))
    return QuerySource(database, section.query, key, section.shard_rows, min_shards)
