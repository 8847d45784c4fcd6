"""SQL tables through ADBC (Arrow-native ingest, no row-by-row INSERTs), for every database
(DuckDB's own client, shaped as an ADBC connection: `duckdb.py`).

Workers stage each shard as a Parquet file in a local side folder; the coordinator commits
it in one transaction that checks the ledger `_thresher_parts(job_id, table_name, shard)`,
ingests the part (`adbc_ingest(..., mode="create_append")`), records the shard in the
ledger and commits. A commit that finds its shard already recorded ingests nothing, so a
crash between the commit and the store's bookkeeping never doubles rows.

What differs between databases (connecting, placeholders, finding a table, naming the
place in messages) is a small `Dialect`; `sqlite.py`, `postgresql.py` and `duckdb.py` hold
one each. The side folder keeps the staging parts, `_errors/` (pending under `_pending/<job>/` until
the job finishes, as a file sink's parts) and the `_SUCCESS` manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.sinks.files import FilePartTarget, check_directory
from thresher.sinks.parts import PartLayout, StagedPart, commit_file
from thresher.sinks.publish import (
    MARKER,
    SUCCESS,
    PendingOutput,
    discard_pending,
    error_layout,
    read_published_errors,
    recover,
    remove_staging,
    write_json,
)
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
    """A table in a SQL database, committed part by part through the ledger.

    A job's parts go to a staging table of its own, `_thresher_stage_<job>`; `finish`
    puts it in the table's place (overwrite) or appends its rows (append) in one
    transaction, so until then readers see the previous table, whole."""

    dialect: Dialect
    table: str
    side_dir: str
    mode: str = "overwrite"
    force: bool = False
    database_files: tuple[str, ...] = ()  # where the database itself lives (SQLite's file)
    job_id: str = field(default="", init=False)
    ledger_key: str = field(default="", init=False)
    target: str = field(default="", init=False)  # the table parts are ingested into
    layout: PartLayout | None = field(default=None, init=False)
    # The connection a job's commits share: one per shard opened the database anew each
    # time (DuckDB: 40 ms a shard, a fifth of its commit); closed before `finish` and
    # `abort`, whose connection may be the only one a file allows.
    _open: Any = field(default=None, init=False, repr=False)

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """A retry round's rows go to the table itself under ledger key `<job>.r<round>`,
        staged as `part-<job>-00003.r1.parquet`, so they add to a shard's rows, never
        replace them."""
        self.job_id = self.ledger_key = job_id
        self.target = stage_table(job_id)
        width = max(5, len(str(max(shard_count - 1, 0))))
        suffix = ".parquet"
        if retry_round is not None:
            self.ledger_key, self.target = f"{job_id}.r{retry_round}", self.table
            suffix = f".r{retry_round}{suffix}"
        self.layout = PartLayout(self.side_dir, f"part-{job_id}-", suffix, width)
        fs, side = filesystem(self.side_dir)
        fs.makedirs(side, exist_ok=True)
        if resume or retry_round is not None:
            remove_staging(fs, side)  # the ledger knows what was committed
        else:
            # Its publish replaces what the side folder holds, as a file sink's does.
            check_directory(fs, side, self.force, self.side_dir, "sink.staging")
            if not fs.exists(f"{side}/{MARKER}"):
                write_json(fs, f"{side}/{MARKER}", {"format": "sql"})
            self._check_table()
            PendingOutput(self.side_dir, job_id).create()
        recover(self.side_dir, skip=job_id, first=self._swap)  # publishes cut short
        return self._errors().root

    def written_paths(self) -> list[str]:
        return [self.side_dir, *self.database_files]

    def _check_table(self) -> None:
        """Create the ledger; refuse a table thresher did not write."""
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
            conn.commit()

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), self._errors(), "parquet")

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """The output part's rows into the target table, then the error part."""
        if output is not None:
            self._ingest(output)
        if output is not None and errors is not None:
            crash_point("mid_commit", output.shard)
        if errors is not None:
            self._commit_errors(errors)

    def _ingest(self, staged: StagedPart) -> None:
        """Ingest a staged part and record it in the ledger, in one transaction. Idempotent:
        a shard already in the ledger is not ingested again."""
        if staged.path is None:
            return
        fs, path = filesystem(staged.path)
        conn = self._connection()
        try:
            self._ingest_once(conn, staged, fs, path)
        except Exception:
            with suppress(Exception):  # the ingest's error is the one to tell
                self._close()  # its transaction rolled back: a retried commit starts afresh
            raise
        if fs.exists(path):
            fs.rm(path)

    def _ingest_once(self, conn: Any, staged: StagedPart, fs: Any, path: str) -> None:
        sql, key = self.dialect.sql, (self.ledger_key, self.target, staged.shard)
        with closing(conn.cursor()) as cur:
            where = "job_id = ? AND table_name = ? AND shard = ?"
            cur.execute(sql(f"SELECT 1 FROM {PARTS_TABLE} WHERE {where}"), key)
            if cur.fetchone() is not None:
                return
            with fs.open(path, "rb") as f:
                parquet = pq.ParquetFile(f)
                batches = parquet.iter_batches(batch_size=INGEST_BATCH_ROWS)
                reader = pa.RecordBatchReader.from_batches(parquet.schema_arrow, batches)
                # A cursor of its own, apart from the ledger's statements (ADBC's
                # DuckDB driver kept an ingest's target on its cursor).
                with closing(conn.cursor()) as ingest:
                    ingest.adbc_ingest(self.target, reader, mode="create_append")
            cur.execute(sql(f"INSERT INTO {PARTS_TABLE} VALUES (?, ?, ?, ?)"), (*key, staged.rows))
            conn.commit()

    def _commit_errors(self, errors: StagedPart) -> None:
        """The error part waits in the side folder's pending folder, published at finish
        (a retry round's replaces the published one)."""
        final = self._errors().final(errors.shard)
        if self.target == self.table:
            commit_file(errors, self._errors())
        else:
            PendingOutput(self.side_dir, self.job_id).commit(
                errors, final.removeprefix(self.side_dir.rstrip("/") + "/")
            )

    def _connection(self) -> Any:
        if self._open is None:
            self._open = self.dialect.connect()
        return self._open

    def _close(self) -> None:
        conn, self._open = self._open, None
        if conn is not None:
            conn.close()

    def finish(self, manifest: dict[str, Any]) -> None:
        self._close()
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)
        manifest = {**manifest, "table": self.table}
        if self.target == self.table:  # a retry round
            write_json(fs, f"{side}/{SUCCESS}", manifest)
            return
        pending = PendingOutput(self.side_dir, self.job_id)
        if pending.published():
            return  # published before a crash cut the job's own bookkeeping short
        pending.publish(manifest, self.mode == "overwrite", first=self._swap)

    def _swap(self, job_id: str, record: dict[str, Any]) -> None:
        """Put job `job_id`'s staging table in the table's place (`record["overwrite"]`, from
        its `_PUBLISH` record) or append its rows, in one transaction. Run again after it
        committed, it finds the staging table gone and
        the ledger's rows moved to the table, and does nothing. (A job with no rows has
        no staging table: in overwrite mode the table is dropped, which is as safe to redo
        while the job's pending folder is there: another job's start would first have
        finished this publish.)"""
        overwrite = bool(record["overwrite"])
        sql, stage = self.dialect.sql, stage_table(job_id)
        with closing(self.dialect.connect()) as conn, closing(conn.cursor()) as cur:
            staged = self.dialect.table_exists(cur, stage)
            where = "job_id = ? AND table_name = ?"
            cur.execute(sql(f"SELECT 1 FROM {PARTS_TABLE} WHERE {where}"), (job_id, self.table))
            if not staged and (not overwrite or cur.fetchone() is not None):
                return
            if overwrite:
                cur.execute(f'DROP TABLE IF EXISTS "{self.table}"')
                cur.execute(sql(f"DELETE FROM {PARTS_TABLE} WHERE table_name = ?"), (self.table,))
            if staged and self.dialect.table_exists(cur, self.table):
                cur.execute(f'SELECT * FROM "{stage}" WHERE 1 = 0')
                columns = ", ".join(f'"{d[0]}"' for d in cur.description)
                cur.fetchall()
                cur.execute(
                    f'INSERT INTO "{self.table}" ({columns}) SELECT {columns} FROM "{stage}"'
                )
                cur.execute(f'DROP TABLE "{stage}"')
            elif staged:
                cur.execute(f'ALTER TABLE "{stage}" RENAME TO "{self.table}"')
            cur.execute(
                sql(f"UPDATE {PARTS_TABLE} SET table_name = ? WHERE table_name = ?"),
                (self.table, stage),
            )
            conn.commit()

    def discard(self, job_id: str) -> None:
        """A rejected held job: its staging table and its ledger rows go in one
        transaction, then its pending error parts; the table is as it was."""
        stage = stage_table(job_id)
        with closing(self.dialect.connect()) as conn, closing(conn.cursor()) as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{stage}"')
            if self.dialect.table_exists(cur, PARTS_TABLE):
                forget = f"DELETE FROM {PARTS_TABLE} WHERE job_id = ? AND table_name = ?"
                cur.execute(self.dialect.sql(forget), (job_id, stage))
            conn.commit()
        discard_pending(self.side_dir, job_id)

    def abort(self) -> None:
        """Staging goes; the staging table and pending errors wait for `thresher resume`."""
        self._close()
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)

    def read_output(self) -> Iterator[pa.Table]:
        """The table's rows (a table has no order; sort by the id to join them back)."""
        with closing(self.dialect.connect()) as conn, closing(conn.cursor()) as cur:
            if self.dialect.table_exists(cur, self.table):
                cur.execute(f'SELECT * FROM "{self.table}"')
                yield cur.fetch_arrow_table()

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (after `start`), or all, in order."""
        part = None if shard is None else self._errors().final(shard)
        return read_published_errors(self.side_dir, part)

    def _errors(self) -> PartLayout:
        return error_layout(self.side_dir, self._layout())

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout


def stage_table(job_id: str) -> str:
    """The table a job's parts are ingested into until it finishes."""
    return f"_thresher_stage_{job_id.replace('-', '_').replace('.', '_')}"
