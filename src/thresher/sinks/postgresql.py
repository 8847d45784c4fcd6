"""PostgreSQL tables: the PostgreSQL part of the SQL sink (`sql.py` holds the commit path).

    postgresql://user@db.example:5432/analytics?table=scores

The table (and the `_thresher_parts` ledger) lives in the connection's current schema; any
other libpq key in the query string (`sslmode`, `options=-csearch_path%3Dml`) goes to
libpq. There is no database file to sit beside, so the staging parts, `_errors/` and
`_SUCCESS` go to `sink.staging` when set (use shared storage when workers run on other
machines), else to `$XDG_DATA_HOME/thresher/postgresql/<db>.<table>-<hash>/`
(`~/.local/share/…`), named after the table and a hash of the URL without its password.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thresher.errors import SinkError
from thresher.postgres import PgUrl, numbered_placeholders
from thresher.sinks.sql import SqlSink, check_table_name
from thresher.spec import SinkSection


@dataclass(frozen=True)
class PostgresDialect:
    """A PostgreSQL database, reached through `adbc_driver_postgresql`."""

    url: PgUrl

    @property
    def location(self) -> str:
        return self.url.redacted

    def connect(self) -> Any:
        return self.url.connect(SinkError, "sink.uri")

    def sql(self, statement: str) -> str:
        return numbered_placeholders(statement)

    def table_exists(self, cur: Any, table: str) -> bool:
        cur.execute(
            "SELECT 1 FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name = $1",
            (table,),
        )
        return cur.fetchone() is not None


def postgresql_sink(section: SinkSection) -> SqlSink:
    """The SQL sink a `postgresql://…/db?table=name` uri describes."""
    url = PgUrl.parse(section.uri)
    if not url.database or "table" not in url.own:
        raise SinkError(
            f"sink.uri: expected postgresql://user@host:port/db?table=name, got {url.redacted}"
        )
    table = check_table_name(url.own["table"])
    return SqlSink(
        dialect=PostgresDialect(url),
        table=table,
        side_dir=section.staging or default_side_dir(url, table),
        mode=section.mode,
        force=section.force,
    )


def default_side_dir(url: PgUrl, table: str) -> str:
    """`~/.local/share/thresher/postgresql/<db>.<table>-<hash>`, stable for one URL."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    digest = hashlib.sha256(url.hide(url.libpq).encode("utf-8")).hexdigest()[:8]
    return str(data_home / "thresher" / "postgresql" / f"{url.database}.{table}-{digest}")
