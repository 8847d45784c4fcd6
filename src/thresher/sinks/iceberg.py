"""Apache Iceberg tables (`pyiceberg`: no Spark, no JVM), committed exactly once.

    [sink]
    format = "iceberg"
    uri = "sales.scores"          # namespace.table in the catalog (the namespace must exist)
    mode = "append"               # or "overwrite" (the default), or "merge"
    options.catalog = { type = "sql", uri = "sqlite:///catalog.db", warehouse = "lake" }
    options.partition_by = ["region"]   # identity partitions, when thresher creates the table

Workers stage each shard as a Parquet part under `<table location>/_thresher/_staging/`;
the coordinator commits it to `_thresher/_pending/<job>/`, and `finish` makes the job's
parts the table's in one snapshot (`iceberg_commit.py`): `append` adds them to its rows,
`overwrite` replaces its content, `merge` upserts them by the source's id column (or
`options.merge_on`): a row whose id the table holds replaces that row, any other is
added, in one commit (a delete and an append). Readers of the previous snapshot are never disturbed,
and a job that fails, is killed or is cancelled leaves that snapshot current (as every
sink: nothing is published before the job's end). A retry round appends its fixed rows
shard by shard (merges them, in merge mode), to a job that did publish.

Iceberg has no idempotent transactions of its own, so each snapshot's summary names its
commit (`thresher.commit`: `thresher/<job>/publish`, a retry round's
`thresher/<job>.r<round>/<shard>`), and a commit first looks for a snapshot of that name:
found, it writes nothing. With the job id, the model's and spec's sha256 and the rows.

The table's location is the catalog's (for a table not made yet, where the catalog would
put it; thresher then makes it there), and thresher's side folder `_thresher/` lies in it,
as in a Delta table: bad records, the `_SUCCESS` manifest (with `iceberg_snapshot_id`, the
snapshot the job made) and the publish record. Iceberg readers read only the files its
metadata lists, and Spark's orphan-file removal skips `_`-prefixed folders.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pydantic import Field

from thresher.errors import SinkError, SpecError
from thresher.faults import crash_point
from thresher.plugins import Options
from thresher.sinks.files import FilePartTarget
from thresher.sinks.iceberg_commit import commit_parts, find_snapshot
from thresher.sinks.modes import check_unique_keys
from thresher.sinks.parts import StagedPart
from thresher.sinks.publish import (
    MARKER,
    SUCCESS,
    PendingOutput,
    discard_pending,
    published_by,
    read_published_errors,
    remove_staging,
    write_json,
)
from thresher.sinks.side_folder import SIDE, SideFolder
from thresher.sources.files import as_url, filesystem
from thresher.sources.iceberg_catalog import (
    CatalogSetting,
    describe,
    new_table_location,
    open_catalog,
    table_exists,
    table_identifier,
)
from thresher.spec import SinkSection

CATALOG_FIELD = "sink.options.catalog"


class IcebergSinkOptions(Options):
    """`sink.options` of the `iceberg` sink."""

    catalog: CatalogSetting = None
    partition_by: list[str] = Field(default_factory=list)
    # merge: the column rows are matched on; filled in from source.id_column (sinks/modes.py)
    merge_on: str | None = None


@dataclass
class IcebergSink:
    """An Iceberg table, appended to, replaced or merged into (upsert by `merge_on`) in
    one commit at job end."""

    uri: str  # the table's identifier, `namespace.table`
    catalog: CatalogSetting = None
    mode: str = "overwrite"
    force: bool = False
    partition_by: tuple[str, ...] = ()
    merge_on: str | None = None
    side: SideFolder | None = field(default=None, init=False)  # the started job's
    _opened: Any = field(default=None, init=False, repr=False)
    _location: str | None = field(default=None, init=False, repr=False)

    @property
    def location(self) -> str:
        """The table's location: its own, or where the catalog would make it."""
        if self._location is None:
            catalog = self._catalog()
            if table_exists(catalog, self.uri, "sink.uri", self.catalog):
                self._location = str(catalog.load_table(self.uri).location())
            else:
                self._location = new_table_location(catalog, self.uri, "sink.uri")
        return self._location.rstrip("/")

    @property
    def side_dir(self) -> str:
        return f"{self.location}/{SIDE}"

    def written_paths(self) -> list[str]:
        return [self.side_dir]

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """A retry round's rows are appended to the table in snapshots of the round's
        own, so they add to a shard's rows, never replace them."""
        self.side = SideFolder.of(self.side_dir, self.uri, job_id, shard_count, retry_round)
        return self.side.start(
            resume=resume, overwrite=self.mode == "overwrite", force=self.force,
            marker={"format": "iceberg", "table": self.uri}, check_table=self._check_table,
            publish=self._publish_table,
        )  # fmt: skip

    def _check_table(self) -> None:
        """Refuse a table thresher did not write (unless forced), and partitions other
        than the table's."""
        catalog = self._catalog()
        if not table_exists(catalog, self.uri, "sink.uri", self.catalog):
            return
        fs, side = filesystem(self.side_dir)
        if not fs.exists(f"{side}/{MARKER}") and not self.force:
            raise SinkError(
                f"sink.uri: table {self.uri} in the Iceberg {describe(self.catalog)} exists"
                " and thresher did not write it; choose another table or set sink.force ="
                " true to write into it"
            )
        table = catalog.load_table(self.uri)
        spec, schema = table.spec(), table.schema()
        columns = [schema.find_column_name(f.source_id) for f in spec.fields]
        if self.partition_by and columns != list(self.partition_by):
            raise SpecError(
                [
                    f"sink.options.partition_by: table {self.uri} is partitioned by "
                    f"{columns or 'nothing'}, not {list(self.partition_by)}"
                ]
            )

    def part_target(self) -> FilePartTarget:
        return self._side().part_target()

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """The output part and the error part, into the job's side folder (a retry
        round's output appended to the table)."""
        # The publish at the job's end reads the parts' footers with pyiceberg's Arrow
        # layer, whose import (pyarrow.dataset, pandas: 0.13 s) is paid here, while the
        # workers still run, not after the last shard (where its failure, if any, is told).
        with contextlib.suppress(ImportError):
            import pyiceberg.io.pyarrow  # noqa: F401

        self._side().commit(output, errors, self._append)

    def _append(self, staged: StagedPart) -> None:
        """One snapshot of a retried shard's rows, named by its commit: a part the table
        already has is not appended again."""
        if staged.path is None:
            return  # no rows: nothing to append
        job = self._side()
        commit_id = f"thresher/{job.ledger_key}/{staged.shard}"
        fs, path = filesystem(staged.path)
        if not fs.exists(path):
            return  # appended, and the part removed, by an earlier commit
        if self._snapshot_of(commit_id) is None:
            properties = {
                "thresher.commit": commit_id,
                "thresher.job_id": job.job_id,
                "thresher.shard": str(staged.shard),
            }
            merge_on = self._merge_key()
            if merge_on is not None:
                check_unique_keys([path], fs, merge_on, self.uri)
            self._commit([staged.path], False, properties, merge_on=merge_on)
            crash_point("after_table_commit", staged.shard)
        fs.rm(path)

    def finish(self, manifest: dict[str, Any]) -> None:
        """Publish: the one snapshot that appends the job's rows or replaces the table's
        content with them; then the error parts and `_SUCCESS`. Adds
        `iceberg_snapshot_id`, the snapshot the job made, to `manifest` (which the store
        records)."""
        job = self._side()
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)
        manifest.update(table=self.uri)
        if job.retry_round is not None:
            manifest.update(iceberg_snapshot_id=self._job_snapshot(job.ledger_key))
            write_json(fs, f"{side}/{SUCCESS}", manifest)
            return
        pending = PendingOutput(self.side_dir, job.job_id)
        if pending.published():
            self._check_published(job.job_id)
            manifest.update(iceberg_snapshot_id=self._job_snapshot(job.job_id))
            return  # published before a crash cut the job's own bookkeeping short
        merge_on = self._merge_key()
        if merge_on is not None:  # refused before the publish is decided
            parts = sorted(fs.glob(f"{filesystem(pending.folder)[1]}/part-*.parquet"))
            check_unique_keys(parts, fs, merge_on, self.uri)
        extra = {"merge_on": merge_on} if merge_on else {}
        pending.publish(manifest, self.mode == "overwrite", self._publish_table, extra)
        manifest.update(iceberg_snapshot_id=self._job_snapshot(job.job_id))

    def _check_published(self, job_id: str) -> None:
        """A job whose pending folder is gone published, unless the folder was never
        here: a catalog that puts a new table somewhere else on every ask (a random
        location) moved the side folder between the job's start and its resume."""
        if self._job_snapshot(job_id) is None and published_by(self.side_dir) != job_id:
            raise SinkError(
                f"sink.uri: job {job_id}'s committed parts are not in {self.side_dir}:"
                f" the table {self.uri} was to be made at another location; run the job again"
            )

    def _publish_table(self, job_id: str, record: dict[str, Any]) -> None:
        """Job `job_id`'s publish: its pending parts appended to the table, made its whole
        content or merged into it (as the job's `_PUBLISH` record says: this sink may be
        another job's, rolling it forward), in one commit (`thresher/<job>/publish`), then
        the parts go. Run again after it committed (a crash before the publish finished),
        it writes nothing."""
        fs, folder = filesystem(PendingOutput(self.side_dir, job_id).folder)
        commit_id = f"thresher/{job_id}/publish"
        if self._snapshot_of(commit_id) is None:
            manifest = record["manifest"]
            properties = {
                "thresher.commit": commit_id,
                "thresher.job_id": job_id,
                "thresher.model_sha256": str(manifest.get("model", {}).get("sha256")),
                "thresher.spec_sha256": str(manifest.get("spec_sha256")),
                "thresher.rows": str(manifest.get("rows_out")),
            }
            parts = self._homed(job_id, fs, sorted(fs.glob(f"{folder}/part-*.parquet")))
            urls = [as_url(fs, part) for part in parts]
            kept = self._commit(urls, record["overwrite"], properties, True, record.get("merge_on"))
            crash_point("after_table_commit")
            for part in [] if kept else parts:
                fs.rm(part)  # rewritten as the table's own files
        record["manifest"]["iceberg_snapshot_id"] = self._job_snapshot(job_id)

    def _homed(self, job_id: str, fs: Any, pending: list[str]) -> list[str]:
        """The job's parts moved from its pending folder to `data/thresher-<job>/` in the
        table's location, where the snapshot takes them as its data files (a move redone
        after a crash finds the ones moved before); every part there, in order."""
        _, home = filesystem(f"{self.location}/data/thresher-{job_id}")
        fs.makedirs(home, exist_ok=True)
        for part in pending:
            fs.mv(part, f"{home}/{part.rsplit('/', 1)[-1]}")
        return sorted(fs.glob(f"{home}/part-*.parquet"))

    def _merge_key(self) -> str | None:
        return self.merge_on if self.mode == "merge" else None

    def _commit(
        self,
        parts: list[str],
        overwrite: bool,
        properties: dict[str, str],
        register: bool = False,
        merge_on: str | None = None,
    ) -> bool:
        return commit_parts(
            self._catalog(),
            self.uri,
            location=self.location,
            parts=parts,
            overwrite=overwrite,
            properties=properties,
            partition_by=self.partition_by,
            register=register,
            merge_on=merge_on,
        )

    def _snapshot_of(self, commit_id: str) -> int | None:
        """The snapshot commit `commit_id` made; None if there is none (or no table)."""
        catalog = self._catalog()
        if not catalog.table_exists(table_identifier(self.uri, "sink.uri")):
            return None
        return find_snapshot(catalog.load_table(self.uri), commit_id)

    def _job_snapshot(self, key: str) -> int | None:
        """The latest snapshot job `key` (or its retry round) made; None if none."""
        catalog = self._catalog()
        if not catalog.table_exists(table_identifier(self.uri, "sink.uri")):
            return None
        job_id = key.split(".r", maxsplit=1)[0]
        for snapshot in reversed(catalog.load_table(self.uri).snapshots()):
            if snapshot.summary is not None and snapshot.summary["thresher.job_id"] == job_id:
                return int(snapshot.snapshot_id)
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
        """The table's rows at its current snapshot (a table has no order)."""
        catalog = self._catalog()
        if catalog.table_exists(table_identifier(self.uri, "sink.uri")):
            for batch in catalog.load_table(self.uri).scan().to_arrow_batch_reader():
                yield pa.Table.from_batches([batch])

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The published bad records: one shard's (after `start`), or all, in order."""
        part = None if shard is None else self._side().errors().final(shard)
        return read_published_errors(self.side_dir, part)

    def _catalog(self) -> Any:
        if self._opened is None:
            self._opened = open_catalog(self.catalog, CATALOG_FIELD)
        return self._opened

    def _side(self) -> SideFolder:
        if self.side is None:
            raise SinkError("the sink was not started")
        return self.side


def iceberg_sink(section: SinkSection) -> IcebergSink:
    """The `iceberg` sink plug-in."""
    options = IcebergSinkOptions.model_validate(section.options)
    table_identifier(section.uri, "sink.uri")
    partition_by = tuple(options.partition_by)
    return IcebergSink(
        section.uri, options.catalog, section.mode, section.force, partition_by, options.merge_on
    )
