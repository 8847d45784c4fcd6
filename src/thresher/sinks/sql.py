"""SQL tables through ADBC (Arrow-native ingest, no row-by-row INSERTs), for every database.

Workers stage each shard as a Parquet file in a local side folder; the coordinator commits
it in one transaction that checks the ledger `_thresher_parts(job_id, table_name, shard)`,
ingests the part (`adbc_ingest(..., mode="create_append")`), records the shard in the
ledger and commits. A commit that finds its shard already recorded ingests nothing, so a
crash between the commit and the store's bookkeeping never doubles rows.

What differs between databases (connecting, placeholders, finding a table, naming the
place in messages) is a small `Dialect`; `sqlite.py` and `postgresql.py` hold one each.
The side folder keeps the staging parts, `_errors/` and the `_SUCCESS` manifest.
"""

from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from thresher.errors import SinkError
from thresher.sinks.files import ERRORS, SUCCESS, FilePartTarget, _remove_staging, _write_json
from thresher.sinks.parts import PartLayout, StagedPart
from thresher.sources.files import filesystem

PARTS_TABLE = "_thresher_parts"
INGEST_BATCH_ROWS = 65_536


class Dialect(Protocol):
    """One database's part of a SQL sink."""

    @property
    def location(self) -> str:
        """Where the tables are, for messages (never with a password)."""
        ...

    def connect(self) -> Any:
        """An ADBC DB-API connection with autocommit off."""
        ...

    def sql(self, statement: str) -> str:
        """`statement` with its `?` placeholders in the driver's style."""
        ...

    def table_exists(self, cur: Any, table: str) -> bool:
        """Whether `table` exists where ingest would write it."""
        ...


def check_table_name(table: str) -> str:
    """A table name thresher can quote the same way in every database."""
    if not table or not table.replace("_", "").isalnum():
        raise SinkError(f"sink.uri: table name {table!r} must be letters, digits and _")
    return table


@dataclass
class SqlSink:
    """A table in a SQL database, committed part by part through the ledger."""

    dialect: Dialect
    table: str
    side_dir: str
    mode: str = "overwrite"
    force: bool = False
    job_id: str = field(default="", init=False)
    ledger_key: str = field(default="", init=False)
    layout: PartLayout | None = field(default=None, init=False)

    def start(self, job_id: str, shard_count: int, resume: bool) -> None:
        self.job_id = self.ledger_key = job_id
        width = max(5, len(str(max(shard_count - 1, 0))))
        self.layout = PartLayout(self.side_dir, f"part-{job_id}-", ".parquet", width)
        fs, side = filesystem(self.side_dir)
        fs.makedirs(side, exist_ok=True)
        if fs.exists(f"{side}/{SUCCESS}"):
            fs.rm(f"{side}/{SUCCESS}")
        if resume:
            _remove_staging(fs, side)  # the ledger knows what was committed
            return
        self._prepare_table()
        if self.mode == "overwrite" and fs.exists(f"{side}/{ERRORS}"):
            fs.rm(f"{side}/{ERRORS}", recursive=True)

    def _prepare_table(self) -> None:
        """Create the ledger; refuse a table thresher did not write; clear on overwrite."""
        sql = self.dialect.sql
        with closing(self.dialect.connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {PARTS_TABLE} "
                "(job_id TEXT, table_name TEXT, shard INTEGER, rows BIGINT, "
                "PRIMARY KEY (job_id, table_name, shard))"
            )
            exists = self.dialect.table_exists(cur, self.table)
            cur.execute(
                sql(f"SELECT COUNT(*) FROM {PARTS_TABLE} WHERE table_name = ?"), (self.table,)
            )
            ours = cur.fetchone()[0] > 0
            if exists and not ours and not self.force:
                raise SinkError(
                    f"sink.uri: table {self.table!r} in {self.dialect.location} exists and "
                    "thresher did not write it; choose another table or set sink.force = true"
                )
            if self.mode == "overwrite":
                cur.execute(f'DROP TABLE IF EXISTS "{self.table}"')
                cur.execute(sql(f"DELETE FROM {PARTS_TABLE} WHERE table_name = ?"), (self.table,))
            conn.commit()

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), "parquet")

    def commit_part(self, staged: StagedPart) -> None:
        """Ingest a staged part and record it in the ledger, in one transaction. Idempotent:
        a shard already in the ledger is not ingested again."""
        if staged.path is None:
            return
        sql = self.dialect.sql
        key = (self.ledger_key, self.table, staged.shard)
        fs, path = filesystem(staged.path)
        with closing(self.dialect.connect()) as conn, closing(conn.cursor()) as cur:
            where = "job_id = ? AND table_name = ? AND shard = ?"
            cur.execute(sql(f"SELECT 1 FROM {PARTS_TABLE} WHERE {where}"), key)
            if cur.fetchone() is None:
                with fs.open(path, "rb") as f:
                    parquet = pq.ParquetFile(f)
                    batches = parquet.iter_batches(batch_size=INGEST_BATCH_ROWS)
                    reader = pa.RecordBatchReader.from_batches(parquet.schema_arrow, batches)
                    cur.adbc_ingest(self.table, reader, mode="create_append")
                cur.execute(
                    sql(f"INSERT INTO {PARTS_TABLE} VALUES (?, ?, ?, ?)"), (*key, staged.rows)
                )
                conn.commit()
        if fs.exists(path):
            fs.rm(path)

    def finish(self, manifest: dict[str, Any]) -> None:
        fs, side = filesystem(self.side_dir)
        _remove_staging(fs, side)
        _write_json(fs, f"{side}/{SUCCESS}", {**manifest, "table": self.table})

    def abort(self) -> None:
        fs, side = filesystem(self.side_dir)
        _remove_staging(fs, side)

    def for_retry(self, round_number: int) -> SqlSink:
        """Retried rows go to the same table under ledger key `<job>.r<round>`, staged as
        `part-<job>-00003.r1.parquet`, so they add to a shard's rows, never replace them."""
        layout = self._layout()
        retry = replace(self)
        retry.job_id, retry.ledger_key = self.job_id, f"{self.job_id}.r{round_number}"
        retry.layout = replace(layout, suffix=f".r{round_number}{layout.suffix}")
        return retry

    @property
    def error_layout(self) -> PartLayout:
        layout = self._layout()
        return PartLayout(f"{self.side_dir}/{ERRORS}", layout.prefix, ".jsonl", layout.width)

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout


def read_manifest(side_dir: str) -> dict[str, Any]:
    """The `_SUCCESS` manifest in a SQL sink's side folder (for tests and tools)."""
    fs, side = filesystem(side_dir)
    with fs.open(f"{side}/{SUCCESS}", "r") as f:
        return json.load(f)  # type: ignore[no-any-return]
