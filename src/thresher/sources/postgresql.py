"""A PostgreSQL query as input, read through ADBC (`sql.py` holds the key-range shards).

    [source]
    uri = "postgresql://user@db.example:5432/shop"
    query = "SELECT customer_id, f0, f1 FROM customers WHERE active"
    id_column = "customer_id"

The schema comes from the query with `LIMIT 0`. PostgreSQL `numeric` columns arrive as
text from the driver and are read as float64 (the type models take); cast them in the
query (`x::text`) to keep exact decimals.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass

import pyarrow as pa

from thresher.errors import SourceError
from thresher.postgres import PgUrl
from thresher.sources.sql import QuerySource, plain_schema, refused, shown_query
from thresher.spec import SourceSection


@dataclass(frozen=True)
class PostgresDatabase:
    """A PostgreSQL database, by its uri (a plain string, so it pickles)."""

    uri: str

    def describe(self, query: str) -> str:
        url = PgUrl.parse(self.uri)
        return f"{url.redacted} ({url.hide(shown_query(query))})"

    def schema(self, inner: str) -> pa.Schema:
        with self.stream(f"SELECT * FROM {inner} LIMIT 0") as result:
            return plain_schema(result.schema)

    @contextmanager
    def stream(self, sql: str) -> Iterator[pa.RecordBatchReader]:
        url = PgUrl.parse(self.uri)
        with closing(url.connect(SourceError, "source.uri")) as conn, closing(conn.cursor()) as cur:
            try:
                cur.execute(sql)
            except Exception as exc:  # the driver's error classes vary between versions
                raise refused("PostgreSQL", exc, url.hide) from None
            yield cur.fetch_record_batch()


def postgres_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> QuerySource:
    """The `postgresql` source plug-in: the query, split into key ranges."""
    key = section.key_column or section.id_column
    assert section.query and key  # the spec requires them
    database = PostgresDatabase(section.uri)
    return QuerySource(database, section.query, key, section.shard_rows, min_shards)
