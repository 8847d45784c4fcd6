"""SQLite tables: the SQLite part of the SQL sink (`sql.py` holds the commit path).

    sqlite:///out/scores.db?table=scores

Beside the database, `scores.db.scores/` holds the staging parts, `_errors/` and
`_SUCCESS` (`sink.staging` names another folder).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlparse

from thresher.errors import SinkError
from thresher.sinks.sql import SqlSink, check_table_name
from thresher.spec import SinkSection


@dataclass(frozen=True)
class SqliteDialect:
    """A SQLite database file, reached through `adbc_driver_sqlite`."""

    db_path: str

    @property
    def location(self) -> str:
        return self.db_path

    def connect(self) -> Any:
        try:
            import adbc_driver_sqlite.dbapi as sqlite_adbc
        except ImportError as exc:
            raise SinkError("sink.uri: a sqlite sink needs `pip install thresher[sqlite]`") from exc
        return sqlite_adbc.connect(self.db_path)

    def sql(self, statement: str) -> str:
        return statement  # the driver takes `?` itself

    def table_exists(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cur.fetchone() is not None


def sqlite_sink(section: SinkSection) -> SqlSink:
    """The SQL sink a `sqlite:///path/file.db?table=name` uri describes."""
    parsed = urlparse(section.uri)
    tables = parse_qs(parsed.query).get("table", [])
    if parsed.scheme != "sqlite" or not parsed.path or len(tables) != 1:
        raise SinkError(f"sink.uri: expected sqlite:///path/file.db?table=name, got {section.uri}")
    table = check_table_name(tables[0])
    return SqlSink(
        dialect=SqliteDialect(parsed.path),
        table=table,
        side_dir=section.staging or f"{parsed.path}.{table}",
        mode=section.mode,
        force=section.force,
        database_files=(parsed.path,),
    )
