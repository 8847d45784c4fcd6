"""DuckDB tables: the DuckDB part of the SQL sink (`sql.py` holds the commit path).

    duckdb:///out/scores.duckdb?table=scores

Written through DuckDB's own client, in the shape of the ADBC connection the SQL sink
drives (`DuckdbConnection`): ADBC's driver manager imports pandas and polars, 0.4 s of a
job's start that DuckDB's client does without (0.08 s). Beside the database,
`scores.duckdb.scores/` holds the staging parts, `_errors/` and `_SUCCESS`
(`sink.staging` names another folder). Only the coordinator opens the file (workers
stage Parquet parts), and DuckDB lets one process at a time write it: a job cannot read
its input from the database it writes.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlparse

from thresher.errors import SinkError
from thresher.sinks.sql import SqlSink, check_table_name
from thresher.spec import SinkSection


@dataclass(frozen=True)
class DuckdbDialect:
    """A DuckDB database file, reached through the `duckdb` package."""

    db_path: str

    @property
    def location(self) -> str:
        return self.db_path

    def connect(self) -> DuckdbConnection:
        try:
            import duckdb
        except ImportError as exc:
            raise SinkError("sink.uri: a duckdb sink needs `pip install thresher[duckdb]`") from exc
        try:
            return DuckdbConnection(duckdb.connect(self.db_path))
        except duckdb.Error as exc:  # a lock another process holds, a file not DuckDB's
            raise SinkError(f"sink.uri: cannot open {self.db_path}: {exc}") from None

    def sql(self, statement: str) -> str:
        return statement  # the driver takes `?` itself

    def table_exists(self, cur: Any, table: str) -> bool:
        return table_exists(cur, table)


def table_exists(cur: Any, table: str) -> bool:
    """Whether the database (the cursor's, or a DuckDB connection) has `table`."""
    cur.execute(
        "SELECT 1 FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_name = ?",
        (table,),
    )
    return bool(cur.fetchall())


class DuckdbConnection:
    """A DuckDB connection as an ADBC DB-API one with autocommit off: every statement in
    a transaction that `commit` ends (and the next begins), and its cursors all in that
    one transaction — DuckDB's own `cursor()` would open a connection of its own."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._closed = False
        self._begin()

    def _begin(self) -> None:
        try:
            self._conn.begin()
        except Exception:
            self.close()  # a connection the sink never gets back would hold the file
            raise

    def cursor(self) -> DuckdbCursor:
        return DuckdbCursor(self._conn)

    def commit(self) -> None:
        try:
            self._conn.commit()
        except Exception:
            self.close()  # rolled back: the sink's retry opens a fresh connection
            raise
        self._begin()  # (failing, the commit stands: the sink's next use reconnects)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._conn.close()  # an open transaction is rolled back


class DuckdbCursor:
    """The DB-API calls the SQL sink makes, on the connection's one transaction."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, statement: str, parameters: tuple[Any, ...] = ()) -> None:
        self._conn.execute(statement, parameters)

    @property
    def description(self) -> Any:
        return self._conn.description

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._conn.fetchall()  # the whole result: DuckDB drops an unread rest
        return rows[0] if rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._conn.fetchall()  # type: ignore[no-any-return]

    def fetch_arrow_table(self) -> Any:
        # DuckDB 2 warns that a DB-API result's Arrow table is a copy (its `sql()` relation
        # is not); only `read_output`, not a job's commits, reads a table back. DuckDB 1
        # named the call `fetch_arrow_table`.
        fetch = getattr(self._conn, "to_arrow_table", None) or self._conn.fetch_arrow_table
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fetch()

    def adbc_ingest(self, table: str, data: Any, mode: Literal["create_append"]) -> None:
        """Append an Arrow reader's rows to `table` (creating it), by column name."""
        import duckdb

        exists = table_exists(self._conn, table)
        self._conn.register("_thresher_ingest", data)
        try:
            if exists:
                self._conn.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _thresher_ingest')
            else:
                self._conn.execute(f'CREATE TABLE "{table}" AS SELECT * FROM _thresher_ingest')
        finally:
            # after a failed statement the transaction is aborted and `unregister` fails
            # too: its error would hide the one that says which column did not fit
            with contextlib.suppress(duckdb.Error):
                self._conn.unregister("_thresher_ingest")

    def close(self) -> None:
        pass  # the connection's: it outlives its cursors


def duckdb_sink(section: SinkSection) -> SqlSink:
    """The SQL sink a `duckdb:///path/file.duckdb?table=name` uri describes."""
    parsed = urlparse(section.uri)
    tables = parse_qs(parsed.query).get("table", [])
    if parsed.scheme != "duckdb" or not parsed.path or len(tables) != 1:
        raise SinkError(
            f"sink.uri: expected duckdb:///path/file.duckdb?table=name, got {section.uri}"
        )
    table = check_table_name(tables[0])
    return SqlSink(
        dialect=DuckdbDialect(parsed.path),
        table=table,
        side_dir=section.staging or f"{parsed.path}.{table}",
        mode=section.mode,
        force=section.force,
        database_files=(parsed.path,),
    )
