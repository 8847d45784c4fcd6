"""A DuckDB query as input, read as Arrow (`sql.py` holds the key-range shards).

    [source]
    uri = "duckdb:///data/shop.duckdb"      # `duckdb://` alone: an empty in-memory database
    query = "SELECT customer_id, f0, f1 FROM customers WHERE active"
    # or over files: "SELECT * FROM read_parquet('data/*.parquet')"
    id_column = "customer_id"

Each planning step and each shard opens the file read-only, so many workers read it at
once; DuckDB lets no other process write a file while it is open, so a job cannot write
its output into the database it reads (use another file). The schema comes from the
query with `LIMIT 0`; decimals are read as float64.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import duckdb
import pyarrow as pa

from thresher.errors import SourceError
from thresher.sources.sql import QuerySource, plain_schema, refused, shown_query
from thresher.spec import SourceSection

BATCH_ROWS = 65_536
IN_MEMORY = ":memory:"


@dataclass(frozen=True)
class DuckdbDatabase:
    """A DuckDB database file (or `:memory:`), opened read-only."""

    path: str

    def describe(self, query: str) -> str:
        return f"duckdb://{'' if self.path == IN_MEMORY else self.path} ({shown_query(query)})"

    def schema(self, inner: str) -> pa.Schema:
        with self.stream(f"SELECT * FROM {inner} LIMIT 0") as result:
            return plain_schema(result.schema)

    @contextmanager
    def stream(self, sql: str) -> Iterator[pa.RecordBatchReader]:
        with closing(self._connect()) as conn:
            try:  # binding fails at `sql`, running while the batches are read
                yield arrow_reader(conn.sql(sql))
            except duckdb.Error as exc:
                raise refused("DuckDB", exc) from None

    def _connect(self) -> Any:
        try:
            if self.path == IN_MEMORY:
                return duckdb.connect(IN_MEMORY)
            return duckdb.connect(self.path, read_only=True)
        except duckdb.Error as exc:
            raise SourceError(f"source.uri: cannot open {self.path}: {exc}") from None


def arrow_reader(relation: Any) -> pa.RecordBatchReader:
    """A DuckDB relation's rows as a RecordBatchReader: `to_arrow_reader` in duckdb 2,
    which deprecates the `fetch_record_batch` of the 1.x the extra allows."""
    method = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    return method(BATCH_ROWS)


def duckdb_path(uri: str, field: str, error: type[Exception] = SourceError) -> str:
    """The file a `duckdb:///path/file.duckdb` uri names; `duckdb://` alone: in memory."""
    parsed = urlparse(uri)
    if parsed.scheme != "duckdb" or parsed.netloc:
        raise error(f"{field}: expected duckdb:///path/file.duckdb, got {uri}")
    return "/" + parsed.path.lstrip("/") if parsed.path else IN_MEMORY


def duckdb_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> QuerySource:
    """The `duckdb` source plug-in: the query, split into key ranges."""
    key = section.key_column or section.id_column
    assert section.query and key  # the spec requires them
    database = DuckdbDatabase(duckdb_path(section.uri, "source.uri"))
    return QuerySource(database, section.query, key, section.shard_rows, min_shards)
