"""DuckDB tables: the DuckDB part of the SQL sink (`sql.py` holds the commit path).

    duckdb:///out/scores.duckdb?table=scores

Written through the ADBC driver that ships inside the `duckdb` package. Beside the
database, `scores.duckdb.scores/` holds the staging parts, `_errors/` and `_SUCCESS`
(`sink.staging` names another folder). Only the coordinator opens the file (workers
stage Parquet parts), and DuckDB lets one process at a time write it: a job cannot read
its input from the database it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

from thresher.errors import SinkError
from thresher.sinks.sql import SqlSink, check_table_name
from thresher.spec import SinkSection


@dataclass(frozen=True)
class DuckdbDialect:
    """A DuckDB database file, reached through `adbc_driver_duckdb`."""

    db_path: str

    @property
    def location(self) -> str:
        return self.db_path

    def connect(self) -> Any:
        try:
            import adbc_driver_duckdb.dbapi as duckdb_adbc
        except ImportError as exc:
            raise SinkError("sink.uri: a duckdb sink needs `pip install thresher[duckdb]`") from exc
        try:
            return duckdb_adbc.connect(self.db_path)
        except Exception as exc:  # the driver manager's errors: a lock held, a bad file
            raise SinkError(f"sink.uri: cannot open {self.db_path}: {exc}") from None

    def sql(self, statement: str) -> str:
        return statement  # the driver takes `?` itself

    def table_exists(self, cur: Any, table: str) -> bool:
        cur.execute(
            "SELECT 1 FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return cur.fetchone() is not None


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
