"""Delta Lake tables (the `deltalake` package: no Spark, no JVM), committed exactly once.

    [sink]
    format = "delta"
    uri = "out/scores"            # a table folder, or s3://bucket/scores, ...
    mode = "append"               # or "overwrite" (the default), or "merge"
    options = { partition_by = ["region"] }

Workers stage each shard as a Parquet part under `<table>/_thresher/_staging/`; the
coordinator commits it. Delta's own idempotent transactions make a commit happen once:
each commit carries a `txn` action, application id `thresher/<job>/<shard>` (a retry
round's `thresher/<job>.r<round>/<shard>`, a job's publish `thresher/<job>/publish`),
and a commit whose application id the table already knows writes nothing. One id per
shard, not one per job with the shard as its version: shards finish in any order, and a
`txn` version only says how far an application got.

Committed parts wait in `_thresher/_pending/<job>/`, and `finish` makes them the table's
in one commit: `append` adds them to its rows, `overwrite` replaces its content, `merge`
upserts them on the id column (`sinks/delta_writes.py`: a row whose id the table holds
replaces it, the others are added; the job's rows must not repeat an id). Readers of the
previous version are never disturbed, and a job that fails, is killed or is cancelled
leaves that version current and the table as it was, in every mode (as every sink:
nothing is published before the job's end). A retry round appends (merges, in merge
mode) its fixed rows shard by shard, to a job that did publish.

Every commit's metadata names the job (`thresher.job_id`; a retry round's, the shard);
a job's commit also the model's and spec's sha256. Bad records, the `_SUCCESS`
manifest (with `delta_version`, the version the job produced) and the publish record
live in `<table>/_thresher/`, as a SQL sink's side folder: `_`-prefixed, so Delta
readers and VACUUM leave it alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pydantic import Field

from thresher.errors import SinkError
from thresher.faults import crash_point
from thresher.plugins import Options
from thresher.sinks.delta_writes import TableWrite, parquet_reader
from thresher.sinks.files import FilePartTarget
from thresher.sinks.modes import check_unique_keys
from thresher.sinks.parts import StagedPart
from thresher.sinks.publish import (
    MARKER,
    SUCCESS,
    PendingOutput,
    discard_pending,
    read_published_errors,
    remove_staging,
    write_json,
)
from thresher.sinks.side_folder import SIDE, SideFolder
from thresher.sources.files import filesystem
from thresher.spec import SinkSection


class DeltaSinkOptions(Options):
    """`sink.options` of the `delta` sink."""

    partition_by: list[str] = Field(default_factory=list)
    # merge: the column rows are matched on; filled in from source.id_column (sinks/modes.py)
    merge_on: str | None = None


@dataclass
class DeltaSink:
    """A Delta table, which a job's rows join (append), replace (overwrite) or upsert
    into (merge) at the job's end."""

    uri: str
    mode: str = "overwrite"
    force: bool = False
    partition_by: tuple[str, ...] = ()
    merge_on: str | None = None
    side: SideFolder | None = field(default=None, init=False)  # the started job's

    @property
    def root(self) -> str:
        return self.uri.rstrip("/")

    @property
    def side_dir(self) -> str:
        return f"{self.root}/{SIDE}"

    def written_paths(self) -> list[str]:
        return [self.root]

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """A retry round's rows are appended to the table under application ids of the
        round's own, so they add to a shard's rows, never replace them."""
        self.side = SideFolder.of(self.side_dir, self.uri, job_id, shard_count, retry_round)
        return self.side.start(
            resume=resume, overwrite=self.mode == "overwrite", force=self.force,
            marker={"format": "delta"}, check_table=self._check_table,
            publish=self._publish_table,
        )  # fmt: skip

    def _check_table(self) -> None:
        """Refuse a folder that holds something else than a Delta table thresher wrote."""
        fs, root = filesystem(self.root)
        if not fs.exists(root):
            return
        if not fs.isdir(root):
            raise SinkError(f"sink.uri: {self.uri} is a file; a delta sink writes a table folder")
        names = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)}
        ours = fs.exists(f"{root}/{SIDE}/{MARKER}")
        if names - {SIDE} and not ours and not self.force:
            what = "a Delta table" if "_delta_log" in names else "files"
            raise SinkError(
                f"sink.uri: {self.uri} holds {what} thresher did not write; choose another"
                " folder or set sink.force = true to write into it"
            )

    def part_target(self) -> FilePartTarget:
        return self._side().part_target()

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """The output part and the error part, into the job's side folder (a retry
        round's output appended to the table)."""
        self._side().commit(output, errors, self._append)

    def _append(self, staged: StagedPart) -> None:
        """One Delta commit of the part's rows, carrying its application id: a part the
        table already has is not appended again."""
        if staged.path is None:
            return  # no rows: nothing to append
        job = self._side()
        app_id = f"thresher/{job.ledger_key}/{staged.shard}"
        fs, path = filesystem(staged.path)
        if not fs.exists(path):
            return  # appended, and the part removed, by an earlier commit
        if not self._has_transaction(app_id):
            metadata = {"thresher.job_id": job.job_id, "thresher.shard": str(staged.shard)}
            if self.mode == "merge" and self.merge_on is not None:
                check_unique_keys([path], fs, self.merge_on, self.uri)
            with fs.open(path, "rb") as f:
                data = parquet_reader([pq.ParquetFile(f)])
                assert data is not None
                self._writes(self.mode if self.mode == "merge" else "append").commit(
                    data, app_id, metadata
                )
        fs.rm(path)

    def finish(self, manifest: dict[str, Any]) -> None:
        """Publish: the one commit that appends the job's rows, replaces the table's
        content with them or merges them in by id; then the error parts and `_SUCCESS`.
        Adds `delta_version`, the table version the job produced, to `manifest` (which
        the store records)."""
        job = self._side()
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)
        manifest.update(table=self.root)
        if job.retry_round is not None:
            manifest.update(delta_version=self._job_version(job.ledger_key))
            write_json(fs, f"{side}/{SUCCESS}", manifest)
            return
        pending = PendingOutput(self.side_dir, job.job_id)
        if pending.published():
            manifest.update(delta_version=self._job_version(job.job_id))
            return  # published before a crash cut the job's own bookkeeping short
        if self.merge_on is not None:  # refused before the publish is decided
            parts = sorted(fs.glob(f"{filesystem(pending.folder)[1]}/part-*.parquet"))
            check_unique_keys(parts, fs, self.merge_on, self.uri)
        extra = {"merge_on": self.merge_on} if self.mode == "merge" else {}
        pending.publish(manifest, self.mode == "overwrite", self._publish_table, extra)
        manifest.update(delta_version=self._job_version(job.job_id))

    def _publish_table(self, job_id: str, record: dict[str, Any]) -> None:
        """Job `job_id`'s publish: its pending parts appended to the table, made its whole
        content or merged into it (as the job's `_PUBLISH` record says: this sink may be
        another job's, rolling it forward), in one commit (application id
        `thresher/<job>/publish`), then the parts go. Run again after it committed (a
        crash before the publish finished), it writes nothing."""
        fs, folder = filesystem(PendingOutput(self.side_dir, job_id).folder)
        parts = sorted(fs.glob(f"{folder}/part-*.parquet"))
        app_id = f"thresher/{job_id}/publish"
        if not self._has_transaction(app_id):
            manifest = record["manifest"]
            metadata = {
                "thresher.job_id": job_id,
                "thresher.model_sha256": str(manifest.get("model", {}).get("sha256")),
                "thresher.spec_sha256": str(manifest.get("spec_sha256")),
                "thresher.rows": str(manifest.get("rows_out")),
            }
            files = [fs.open(p, "rb") for p in parts]
            try:
                data = parquet_reader([pq.ParquetFile(f) for f in files], self._schema())
                mode = "overwrite" if record["overwrite"] else "append"
                mode = "merge" if record.get("merge_on") else mode
                if data is not None:
                    self._writes(mode, record.get("merge_on")).commit(data, app_id, metadata)
            finally:
                for f in files:
                    f.close()
            crash_point("after_publish_commit")
        for part in parts:
            fs.rm(part)
        record["manifest"]["delta_version"] = self._job_version(job_id)

    def _writes(self, mode: str, merge_on: str | None = None) -> TableWrite:
        """How a commit in `mode` writes this table (merging on `merge_on`, or this
        sink's own key)."""
        key = merge_on or self.merge_on
        return TableWrite(self.root, mode, self.uri, key, self.partition_by)

    def _table(self) -> DeltaTable | None:
        """The table at its latest version; None if there is none yet."""
        if not DeltaTable.is_deltatable(self.root):
            return None
        return DeltaTable(self.root)

    def _has_transaction(self, app_id: str) -> bool:
        table = self._table()
        return table is not None and table.transaction_version(app_id) is not None

    def _schema(self) -> pa.Schema | None:
        """The table's schema: what an overwrite with no rows leaves."""
        table = self._table()
        return None if table is None else pa.schema(table.schema().to_arrow())

    def _job_version(self, job_id: str) -> int | None:
        """The latest table version a commit of job `job_id` (or of its retry round)
        made; None if it made none."""
        table = self._table()
        if table is None:
            return None
        for commit in table.history():
            if commit.get("thresher.job_id") == job_id.split(".r", maxsplit=1)[0]:
                return int(commit["version"])
        return None

    def discard(self, job_id: str) -> None:
        """A rejected held job: its pending parts in the side folder go; the table is as
        it was (nothing of the job reached it before `finish`)."""
        discard_pending(self.side_dir, job_id)

    def abort(self) -> None:
        """Staging goes; pending parts wait for `thresher resume`."""
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)

    def read_output(self) -> Iterator[pa.Table]:
        """The table's rows at its latest version (a table has no order)."""
        table = self._table()
        if table is not None:
            yield pa.table(table.to_pyarrow_table())

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (after `start`), or all, in order."""
        part = None if shard is None else self._side().errors().final(shard)
        return read_published_errors(self.side_dir, part)

    def _side(self) -> SideFolder:
        if self.side is None:
            raise SinkError("the sink was not started")
        return self.side


def delta_sink(section: SinkSection) -> DeltaSink:
    """The `delta` sink plug-in."""
    options = DeltaSinkOptions.model_validate(section.options)
    partition_by = tuple(options.partition_by)
    return DeltaSink(section.uri, section.mode, section.force, partition_by, options.merge_on)
