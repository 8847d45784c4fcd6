"""SQLite tables through ADBC (Arrow-native ingest, no row-by-row INSERTs).

Workers stage each shard as a Parquet file; the coordinator ingests it in one transaction
that also records `(job, table, shard)` in `_thresher_parts`. A commit that finds its shard
already recorded does nothing, so a crash between commit and bookkeeping never doubles rows.

    sqlite:///out/scores.db?table=scores

Beside the database, `scores.db.scores/` holds the staging parts, `_errors/` and `_SUCCESS`.
"""

from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import pyarrow.parquet as pq

from thresher.errors import SinkError
from thresher.sinks.files import ERRORS, SUCCESS, FilePartTarget, _remove_staging, _write_json
from thresher.sinks.parts import PartLayout, StagedPart
from thresher.sources.files import filesystem

PARTS_TABLE = "_thresher_parts"


@dataclass
class SqliteSink:
    uri: str
    mode: str = "overwrite"
    force: bool = False
    db_path: str = field(init=False)
    table: str = field(init=False)
    job_id: str = field(default="", init=False)
    layout: PartLayout | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        parsed = urlparse(self.uri)
        tables = parse_qs(parsed.query).get("table", [])
        if parsed.scheme != "sqlite" or not parsed.path or len(tables) != 1:
            raise SinkError(f"sink.uri: expected sqlite:///path/file.db?table=name, got {self.uri}")
        self.db_path, self.table = parsed.path, tables[0]
        if not self.table.replace("_", "").isalnum():
            raise SinkError(f"sink.uri: table name {self.table!r} must be letters, digits and _")

    @property
    def side_dir(self) -> str:
        return f"{self.db_path}.{self.table}"

    def start(self, job_id: str, shard_count: int, resume: bool) -> None:
        self.job_id = job_id
        width = max(5, len(str(max(shard_count - 1, 0))))
        self.layout = PartLayout(self.side_dir, f"part-{job_id}-", ".parquet", width)
        fs, side = filesystem(self.side_dir)
        fs.makedirs(side, exist_ok=True)
        if fs.exists(f"{side}/{SUCCESS}"):
            fs.rm(f"{side}/{SUCCESS}")
        if resume:
            _remove_staging(fs, side)  # the ledger table knows what was committed
            return
        self._prepare_table(fs, side)

    def _prepare_table(self, fs: Any, side: str) -> None:
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {PARTS_TABLE} "
                "(job_id TEXT, table_name TEXT, shard INTEGER, rows INTEGER, "
                "PRIMARY KEY (job_id, table_name, shard))"
            )
            exists = _table_exists(cur, self.table)
            cur.execute(f"SELECT COUNT(*) FROM {PARTS_TABLE} WHERE table_name = ?", (self.table,))
            ours = cur.fetchone()[0] > 0
            if exists and not ours and not self.force:
                raise SinkError(
                    f"sink.uri: table {self.table!r} exists and thresher did not write it; "
                    "choose another table or set sink.force = true"
                )
            if self.mode == "overwrite":
                cur.execute(f'DROP TABLE IF EXISTS "{self.table}"')
                cur.execute(f"DELETE FROM {PARTS_TABLE} WHERE table_name = ?", (self.table,))
                if fs.exists(f"{side}/{ERRORS}"):
                    fs.rm(f"{side}/{ERRORS}", recursive=True)
            conn.commit()

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), "parquet")

    def commit_part(self, staged: StagedPart) -> None:
        if staged.path is None:
            return
        fs, path = filesystem(staged.path)
        with closing(self._connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute(
                f"SELECT 1 FROM {PARTS_TABLE} WHERE job_id = ? AND table_name = ? AND shard = ?",
                (self.job_id, self.table, staged.shard),
            )
            if cur.fetchone() is None:
                with fs.open(path, "rb") as f:
                    reader = pq.ParquetFile(f)
                    for batch in reader.iter_batches(batch_size=65536):
                        cur.adbc_ingest(self.table, batch, mode="create_append")
                cur.execute(
                    f"INSERT INTO {PARTS_TABLE} VALUES (?, ?, ?, ?)",
                    (self.job_id, self.table, staged.shard, staged.rows),
                )
                conn.commit()
        fs.rm(path)

    def finish(self, manifest: dict[str, Any]) -> None:
        fs, side = filesystem(self.side_dir)
        _remove_staging(fs, side)
        _write_json(fs, f"{side}/{SUCCESS}", {**manifest, "table": self.table})

    def abort(self) -> None:
        fs, side = filesystem(self.side_dir)
        _remove_staging(fs, side)

    @property
    def error_layout(self) -> PartLayout:
        layout = self._layout()
        return PartLayout(f"{self.side_dir}/{ERRORS}", layout.prefix, ".jsonl", layout.width)

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout

    def _connect(self) -> Any:
        try:
            import adbc_driver_sqlite.dbapi as sqlite_adbc
        except ImportError as exc:
            raise SinkError("sink.uri: a sqlite sink needs `pip install thresher[sqlite]`") from exc
        return sqlite_adbc.connect(self.db_path)


def _table_exists(cur: Any, table: str) -> bool:
    cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    return cur.fetchone() is not None


def read_manifest(side_dir: str) -> dict[str, Any]:
    """The `_SUCCESS` manifest beside a SQLite table (for tests and tools)."""
    fs, side = filesystem(side_dir)
    with fs.open(f"{side}/{SUCCESS}", "r") as f:
        return json.load(f)  # type: ignore[no-any-return]
