"""Apache Iceberg tables as input, at a snapshot frozen in the job's plan.

    [source]
    format = "iceberg"
    uri = "sales.customers"                       # namespace.table in the catalog
    options.catalog = { type = "sql", uri = "sqlite:///catalog.db", warehouse = "lake" }
    options.snapshot_id = 3051729675574597004     # or timestamp = 2026-01-31T00:00:00Z
    options.row_filter = "region = 'eu' and age >= 18"
    # options.snapshots = [first_id, last_id]     # only the rows those snapshots appended

Planning loads the table (`iceberg_catalog.py`), takes its current snapshot or the pinned
one, and plans the data files pyiceberg's scan of it keeps (`row_filter` prunes
partitions and files by their statistics), one shard a file: Iceberg applies its deletes
and column ids file by file, so a file is the smallest piece a reader can take alone.
The plan's metadata records the table's metadata file and the snapshot, so a resume
reads exactly the planned data even if writers moved on, or changed the schema (unless
snapshot expiry removed the files: then the shard fails, naming the table and the file).

A worker reads its file through pyiceberg's own Arrow reader: the snapshot's columns by
field id (renamed and added columns read right), its deletes applied, the row filter
applied to the rows, batch by batch (pyiceberg's public scan holds a whole file in memory
at once, so the reader calls its per-file generator). A row's number in an error report
is its place among the rows the job read from that file.

With `snapshots = [first, last]` (what a table trigger's job reads), the table is read at
`last`, and only the data files those snapshots added are planned when every one of them
is an append (`sources/iceberg_snapshots.py`); if one is not (an overwrite, delete,
replace), the job reads the whole table at `last`, says so at WARNING, and its manifest's
`source_read` records which snapshot and why.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from thresher.errors import SourceError, SpecError
from thresher.plugins import Options
from thresher.sources.base import MAX_COLUMNS, READ_KEY, Chunk, Plan, Shard, check_width
from thresher.sources.files import confine
from thresher.sources.iceberg_catalog import (
    CatalogSetting,
    arrow_schema,
    load_table,
    open_catalog,
    table_identifier,
)
from thresher.sources.iceberg_snapshots import read_snapshots
from thresher.sources.parquet import rechunk
from thresher.sources.table_changes import ChangesRead
from thresher.spec import SourceSection

log = logging.getLogger("thresher.sources.iceberg")

METADATA_KEY = b"thresher.iceberg.metadata"  # the table's metadata file when planned
SNAPSHOT_KEY = b"thresher.iceberg.snapshot"
CATALOG_FIELD = "source.options.catalog"


class IcebergSourceOptions(Options):
    """`source.options` of the `iceberg` source."""

    catalog: CatalogSetting = None
    snapshot_id: int | None = None
    timestamp: datetime | None = None  # the snapshot current then (a naive time is UTC)
    snapshots: tuple[int, int] | None = None  # [first_id, last_id]: only what they added
    row_filter: str | None = None  # pyiceberg's syntax: "region = 'eu' and age >= 18"
    max_columns: int = Field(default=MAX_COLUMNS, ge=1)

    @model_validator(mode="after")
    def _one_pin(self) -> IcebergSourceOptions:
        pins = [self.snapshot_id, self.timestamp, self.snapshots]
        if sum(pin is not None for pin in pins) > 1:
            raise ValueError("snapshot_id: set one of snapshot_id, timestamp and snapshots")
        return self


@dataclass(frozen=True)
class IcebergSource:
    uri: str
    options: IcebergSourceOptions
    # Where its files may be (a service's job: allowed_roots); empty: anywhere.
    roots: tuple[str, ...] = ()

    def plan(self) -> Plan:
        catalog = open_catalog(self.options.catalog, CATALOG_FIELD)
        table = load_table(catalog, self.uri, "source.uri", self.options.catalog)
        snapshot = self._snapshot(table)
        read = self._snapshots_read(table)
        schema = _snapshot_schema(table.metadata, snapshot)
        row_filter = parse_filter(self.options.row_filter, schema)
        scan = table.scan(row_filter=row_filter, snapshot_id=snapshot.snapshot_id)
        tasks = self._tasks(scan, read)
        if self.roots:  # a catalog may name any metadata and data files: only these
            paths = [str(t.file.file_path) for t in tasks]
            confine([str(table.metadata_location), *paths], self.roots)
        if not tasks:
            kept = " that source.options.row_filter keeps" if self.options.row_filter else ""
            raise SourceError(
                f"source.uri: {self.uri} has no data files{kept} at snapshot {snapshot.snapshot_id}"
            )
        planned = arrow_schema(schema)
        check_width(self.uri, len(planned), self.options.max_columns)
        shards = [_shard(index, task) for index, task in enumerate(tasks)]
        metadata = {
            METADATA_KEY: str(table.metadata_location).encode(),
            SNAPSHOT_KEY: str(snapshot.snapshot_id).encode(),
        }
        if read is not None:
            metadata[READ_KEY] = json.dumps(read.describe()).encode()
        return Plan(shards=shards, schema=planned.with_metadata(metadata))

    def _tasks(self, scan: Any, read: ChangesRead | None) -> list[Any]:
        """The scan's tasks by path (only those of the files `read` names, if any)."""
        try:
            tasks = sorted(scan.plan_files(), key=lambda task: str(task.file.file_path))
        except Exception as exc:  # a manifest that cannot be read
            raise SourceError(f"source.uri: cannot plan {self.uri}: {exc}") from exc
        if read is None or read.files is None:
            return tasks
        return [task for task in tasks if str(task.file.file_path) in read.files]

    def _snapshots_read(self, table: Any) -> ChangesRead | None:
        """What `options.snapshots` added (None without it); the whole table, said at
        WARNING, when one of them did more than append."""
        if self.options.snapshots is None:
            return None
        try:
            read = read_snapshots(table, self.uri, *self.options.snapshots)
        except SpecError:
            raise
        except Exception as exc:  # a manifest list or manifest that cannot be read
            raise SourceError(
                f"source.uri: cannot read the snapshots of {self.uri}: {exc}"
            ) from exc
        if read.files is None:
            log.warning(
                "%s: reading the whole table at snapshot %d, not only the rows snapshots"
                " %d..%d added: %s", self.uri, read.last, read.first, read.last, read.why
            )  # fmt: skip
        return read

    def _snapshot(self, table: Any) -> Any:
        """The snapshot to read: pinned by id or time (or the last of `snapshots`), else
        the current one."""
        pinned, at = self.options.snapshot_id, self.options.timestamp
        field = "snapshot_id"
        if self.options.snapshots is not None:
            pinned, field = self.options.snapshots[1], "snapshots"
        if pinned is not None:
            snapshot = table.snapshot_by_id(pinned)
            if snapshot is None:
                known = ", ".join(str(s.snapshot_id) for s in table.snapshots()[-5:]) or "none"
                raise SpecError(
                    [
                        f"source.options.{field}: {self.uri} has no snapshot {pinned} "
                        f"(its latest: {known})"
                    ]
                )
            return snapshot
        if at is not None:
            moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
            snapshot = table.snapshot_as_of_timestamp(int(moment.timestamp() * 1000))
            if snapshot is None:
                raise SpecError(
                    [
                        f"source.options.timestamp: {self.uri} has no snapshot at or before "
                        f"{moment.isoformat()}"
                    ]
                )
            return snapshot
        snapshot = table.current_snapshot()
        if snapshot is None:
            raise SourceError(f"source.uri: {self.uri} has no snapshot yet: nothing to read")
        return snapshot

    def reader(self, schema: pa.Schema, columns: list[str]) -> IcebergReader:
        meta = schema.metadata or {}
        return IcebergReader(
            uri=self.uri,
            catalog=self.options.catalog,
            metadata_location=meta[METADATA_KEY].decode(),
            snapshot_id=int(meta[SNAPSHOT_KEY]),
            row_filter=self.options.row_filter,
            target=pa.schema([schema.field(c) for c in columns]),
        )


def _shard(index: int, task: Any) -> Shard:
    """One data file: its bytes, and its rows when no delete or row filter takes any."""
    whole = not task.delete_files and _always_true(task.residual)
    size = int(task.file.file_size_in_bytes)
    rows = int(task.file.record_count) if whole else None
    return Shard(index, str(task.file.file_path), 0, size, 0, rows)


def _always_true(expression: Any) -> bool:
    from pyiceberg.expressions import AlwaysTrue

    return isinstance(expression, AlwaysTrue)


def _snapshot_schema(metadata: Any, snapshot: Any) -> Any:
    """The schema the snapshot was written with (time travel reads its own columns)."""
    schemas = {s.schema_id: s for s in metadata.schemas}
    return schemas.get(snapshot.schema_id, metadata.schema())


def parse_filter(text: str | None, schema: Any) -> Any:
    """`row_filter` as a pyiceberg expression, checked against `schema`; SpecError naming
    the field for a filter that does not parse or names a column the table lacks."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.parser import parse
    from pyiceberg.expressions.visitors import bind
    from pyparsing import ParseException

    if not text:
        return AlwaysTrue()
    try:
        expression = parse(text)
    except ParseException as exc:
        raise SpecError(
            [f"source.options.row_filter: cannot parse {text!r} at character {exc.loc + 1}"]
        ) from None
    try:
        bind(schema, expression, case_sensitive=True)
    except ValueError as exc:  # a column the table does not have, a value of another type
        raise SpecError([f"source.options.row_filter: {text!r}: {exc}"]) from None
    return expression


@dataclass(frozen=True)
class IcebergReader:
    """Reads a shard's data file at the planned snapshot, batch by batch."""

    uri: str
    catalog: CatalogSetting
    metadata_location: str
    snapshot_id: int
    row_filter: str | None
    target: pa.Schema

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        opened = _open_snapshot(self)
        task = opened.tasks.get(shard.path)
        if task is None:
            raise SourceError(
                f"{self.uri}: data file {shard.path} is not in snapshot {self.snapshot_id}"
            )
        row = 0
        batches = (_conform(b, self.target) for b in opened.batches(task, self.target.names))
        try:
            for table in rechunk(batches, rows_per_chunk):
                positions = np.arange(row, row + table.num_rows, dtype=np.int64)
                row += table.num_rows
                yield Chunk(table=table, positions=positions)
        except SourceError:
            raise
        except Exception as exc:  # pyiceberg's and Arrow's: a file gone, a type that changed
            raise SourceError(f"{self.uri}: cannot read data file {shard.path}: {exc}") from exc

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "row", position


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """A batch with the plan's columns in the reader's order and of the plan's types
    (pyiceberg reads in the table's column order, strings maybe as large_string)."""
    if batch.schema.equals(target):
        return batch
    return batch.select(target.names).cast(target)


@dataclass(frozen=True)
class _Snapshot:
    """A planned snapshot opened in one process: its metadata and schema, its row filter,
    and the scan task of each of its data files, by path."""

    metadata: Any
    io: Any
    schema: Any
    row_filter: Any
    tasks: dict[str, Any]

    def batches(self, task: Any, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files

        projected = self.schema.select(*columns)
        scan = ArrowScan(self.metadata, self.io, projected, self.row_filter)
        deletes = _read_all_delete_files(self.io, [task])
        # The per-file generator: `to_record_batches` lists each file's batches first.
        yield from scan._record_batches_from_scan_tasks_and_deletes([task], deletes)


_OPENED: dict[tuple[Any, ...], _Snapshot] = {}
# Snapshots a process keeps open: a worker reads one job's, but `thresher serve` runs job
# after job in one process, and each holds its table's scan tasks.
KEEP_OPENED = 4


def _open_snapshot(reader: IcebergReader) -> _Snapshot:
    """The reader's snapshot, opened once per process: the key holds the process id, so a
    forked worker opens its own and never shares its parent's catalog connection."""
    key = (os.getpid(), reader.uri, reader.metadata_location, reader.snapshot_id, reader.row_filter)
    if key not in _OPENED:
        while len(_OPENED) >= KEEP_OPENED:
            del _OPENED[next(iter(_OPENED))]  # the oldest
        _OPENED[key] = _open(reader)
    return _OPENED[key]


def _open(reader: IcebergReader) -> _Snapshot:
    """The table's metadata as planned: its current metadata, if still the planned file,
    else the planned file itself, read through the table's own file access (or, for a
    table dropped since, the catalog's: its files may still be there)."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.io import load_file_io
    from pyiceberg.serializers import FromInputFile
    from pyiceberg.table import DataScan

    catalog = open_catalog(reader.catalog, CATALOG_FIELD)
    planned = reader.metadata_location
    try:
        try:
            table = catalog.load_table(table_identifier(reader.uri, "source.uri"))
            io, metadata = table.io, table.metadata
            if table.metadata_location != planned:
                metadata = FromInputFile.table_metadata(io.new_input(planned))
        except NoSuchTableError:
            io = load_file_io(catalog.properties, planned)
            metadata = FromInputFile.table_metadata(io.new_input(planned))
        snapshot = metadata.snapshot_by_id(reader.snapshot_id)
        assert snapshot is not None, "a planned metadata file holds its planned snapshot"
    except Exception as exc:  # its metadata file removed, unreadable
        raise SourceError(
            f"{reader.uri}: cannot open the planned snapshot {reader.snapshot_id} "
            f"({planned}): {exc}"
        ) from exc
    schema = _snapshot_schema(metadata, snapshot)
    row_filter = parse_filter(reader.row_filter, schema)
    scan = DataScan(
        table_metadata=metadata, io=io, row_filter=row_filter, snapshot_id=reader.snapshot_id
    )
    tasks = {str(task.file.file_path): task for task in scan.plan_files()}
    return _Snapshot(metadata, io, schema, row_filter, tasks)


def iceberg_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> IcebergSource:
    """The `iceberg` source plug-in."""
    return IcebergSource(
        uri=section.uri,
        options=IcebergSourceOptions.model_validate(section.options),
        roots=tuple(section.allowed_roots),
    )
