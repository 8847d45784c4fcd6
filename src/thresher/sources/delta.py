"""Delta Lake tables as input, at a version frozen in the job's plan.

    [source]
    format = "delta"
    uri = "lake/customers"                       # a table folder, or s3://bucket/customers
    options = { version = 12 }                   # or timestamp = 2026-01-31T00:00:00Z
    options.partitions = [["region", "=", "eu"]] # read only these partitions' files
    # options = { versions = [13, 15] }          # only the rows versions 13..15 added

Planning opens the table at its latest version (or the pinned one), takes the data files
that version holds, keeps those of the partitions asked for, and plans them as the
Parquet source does (runs of row groups, cut by rows when small), with `files=`. The
plan's shards name the exact files, so a resume reads exactly the planned data even if
writers moved on (unless VACUUM removed the files: then the read fails, naming the file).

With `versions = [first, last]` (what a table trigger's job reads), the table is opened
at `last` and only the files those versions' commits added are planned, when every one
of them only added files (`sources/delta_versions.py`); if one removed or rewrote files
(an overwrite, DELETE, MERGE, OPTIMIZE), the job reads the whole table at `last`, says
so at WARNING, and its manifest's `source_read` records which version and why.

Delta keeps partition values in its log, not in the data files: the plan's schema is the
table's own, its metadata carries each file's partition values and the version read, and
the reader adds the partition columns to each chunk. Tables with deletion vectors or
column mapping are refused at planning: their files alone do not say their rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from pydantic import Field, model_validator

from thresher.errors import SourceError
from thresher.plugins import Options
from thresher.sources.base import MAX_COLUMNS, READ_KEY, Chunk, Plan, Shard
from thresher.sources.delta_versions import read_versions
from thresher.sources.parquet import ParquetReader, ParquetSource
from thresher.sources.table_changes import ChangesRead
from thresher.spec import SourceSection

log = logging.getLogger("thresher.sources.delta")

VERSION_KEY = b"thresher.delta.version"
PARTITIONS_KEY = b"thresher.delta.partitions"  # {file url: {column: value as text}}
UNREADABLE_FEATURES = ("deletionVectors", "columnMapping")
FILTERS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in")


class DeltaSourceOptions(Options):
    """`source.options` of the `delta` source."""

    version: int | None = Field(default=None, ge=0)
    timestamp: datetime | None = None
    versions: tuple[int, int] | None = None  # [first, last]: only what they added
    # [column, op, value]: op one of FILTERS; `in` and `not in` take a list
    partitions: list[tuple[str, str, Any]] = Field(default_factory=list)
    max_columns: int = Field(default=MAX_COLUMNS, ge=1)

    @model_validator(mode="after")
    def _one_pin(self) -> DeltaSourceOptions:
        pins = [self.version, self.timestamp, self.versions]
        if sum(pin is not None for pin in pins) > 1:
            raise ValueError("version: set one of version, timestamp and versions")
        if self.versions is not None and not 0 <= self.versions[0] <= self.versions[1]:
            raise ValueError("versions: [first, last], 0 <= first <= last")
        for column, op, _ in self.partitions:
            if op not in FILTERS:
                raise ValueError(f"partitions: {column} {op!r}: op must be one of {FILTERS}")
        return self


@dataclass(frozen=True)
class DeltaSource:
    uri: str
    shard_bytes: int
    options: DeltaSourceOptions
    min_shards: int = 1
    roots: tuple[str, ...] = ()

    def plan(self) -> Plan:
        table = self._open()
        _check_readable(self.uri, table)
        schema = pa.schema(table.schema().to_arrow())
        partition_columns = list(table.metadata().partition_columns)
        unknown = [c for c, _, _ in self.options.partitions if c not in partition_columns]
        if unknown:
            raise SourceError(
                f"source.options.partitions: {', '.join(unknown)} is not a partition column of"
                f" {self.uri} (its partition columns: {', '.join(partition_columns) or 'none'})"
            )
        read = self._versions_read()
        files = self._files(table, partition_columns, read)
        if not files:
            raise SourceError(f"source.uri: {self.uri} has no data files to read")
        planned = ParquetSource(
            uri=self.uri,
            shard_bytes=self.shard_bytes,
            min_shards=self.min_shards,
            roots=self.roots,
            max_columns=self.options.max_columns,
            files=tuple(sorted(files)),
        ).plan()
        metadata = {VERSION_KEY: str(table.version()).encode()}
        if read is not None:
            metadata[READ_KEY] = json.dumps(read.describe()).encode()
        if partition_columns:
            metadata[PARTITIONS_KEY] = json.dumps(files, sort_keys=True).encode()
        return Plan(shards=planned.shards, schema=schema.with_metadata(metadata))

    def _versions_read(self) -> ChangesRead | None:
        """What `options.versions` added (None without it); the whole table, said at
        WARNING, when one of them did more than add."""
        if self.options.versions is None:
            return None
        read = read_versions(self.uri, *self.options.versions)
        if read.files is None:
            log.warning(
                "%s: reading the whole table at version %d, not only the rows versions"
                " %d..%d added: %s", self.uri, read.last, read.first, read.last, read.why
            )  # fmt: skip
        return read

    def _open(self) -> DeltaTable:
        pinned = self.options.versions[1] if self.options.versions else self.options.version
        try:
            table = DeltaTable(self.uri, version=pinned)
            if self.options.timestamp is not None:
                table.load_as_version(self.options.timestamp)
        except Exception as exc:  # deltalake's: no table there, no such version
            raise SourceError(f"source.uri: cannot open the Delta table {self.uri}: {exc}") from exc
        if self.options.timestamp is not None:
            self._check_made_by(table, self.options.timestamp)
        return table

    def _check_made_by(self, table: DeltaTable, moment: datetime) -> None:
        """deltalake loads the first version for a moment before it: a table read as it
        was then would hold rows written later, so that is refused. (The history is read
        from the latest version: deltalake numbers it wrongly from an older one.)"""
        history = DeltaTable(self.uri).history()
        made = next((c for c in history if c.get("version") == table.version()), None)
        if made is None or made.get("timestamp") is None:
            return  # its commit is no longer in the log: nothing to judge it by
        at = datetime.fromtimestamp(made["timestamp"] / 1000, UTC)
        if at > (moment if moment.tzinfo else moment.replace(tzinfo=UTC)):
            raise SourceError(
                f"source.options.timestamp: the Delta table {self.uri} has no version as"
                f" early as {moment.isoformat()} (the earliest it holds is of {at.isoformat()})"
            )

    def _files(
        self, table: DeltaTable, partition_columns: list[str], read: ChangesRead | None
    ) -> dict[str, dict[str, Any]]:
        """The version's data files (URLs) kept by the partition filters (and, reading
        what some versions added, only those), each with its partition values as text
        (None: null)."""
        root = table.table_uri.rstrip("/").removeprefix("file://")
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        only = None if read is None else read.files
        files = {}
        for action in actions:
            if only is not None and unquote(action["path"]) not in only:
                continue
            values = {c: action[f"partition.{c}"] for c in partition_columns}
            if all(_matches(values[c], op, want) for c, op, want in self.options.partitions):
                text = {c: None if v is None else str(v) for c, v in values.items()}
                files[f"{root}/{unquote(action['path'])}"] = text
        return files

    def reader(self, schema: pa.Schema, columns: list[str]) -> DeltaReader:
        partitions = json.loads((schema.metadata or {}).get(PARTITIONS_KEY, b"{}"))
        return DeltaReader(schema=schema, columns=tuple(columns), partitions=partitions)


def _check_readable(uri: str, table: DeltaTable) -> None:
    features = set(table.protocol().reader_features or [])
    refused = sorted(features & set(UNREADABLE_FEATURES))
    if refused:
        raise SourceError(
            f"source.uri: {uri} uses {', '.join(refused)}, which the delta source does not"
            " read; rewrite the table without it (OPTIMIZE / REORG ... APPLY (PURGE))"
        )


def _matches(value: Any, op: str, want: Any) -> bool:
    """Whether a file's partition value passes one filter (a null passes only `!=`/`not
    in` a non-null)."""
    if op in ("in", "not in"):
        inside = value in list(want)
        return inside if op == "in" else not inside
    if op == "=":
        return bool(value == want)
    if op == "!=":
        return bool(value != want)
    if value is None:
        return False
    compare = {"<": value < want, "<=": value <= want, ">": value > want, ">=": value >= want}
    return bool(compare[op])


@dataclass(frozen=True)
class DeltaReader:
    """Reads a shard's Parquet rows and adds its file's partition columns."""

    schema: pa.Schema
    columns: tuple[str, ...]
    partitions: dict[str, dict[str, str | None]]

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        values = self.partitions.get(shard.path, {})
        stored = tuple(c for c in self.columns if c not in values)
        target = pa.schema([self.schema.field(c) for c in self.columns])
        for chunk in ParquetReader(columns=stored).read(shard, rows_per_chunk):
            rows = chunk.table.num_rows
            arrays = []
            for column in self.columns:
                kind = target.field(column).type
                if column in values:
                    arrays.append(pa.array([values[column]] * rows, pa.string()).cast(kind))
                else:
                    arrays.append(chunk.table.column(column).cast(kind))
            table = pa.Table.from_arrays(arrays, schema=target)
            yield Chunk(table=table, positions=chunk.positions, bad=chunk.bad)

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "row", position


def delta_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> DeltaSource:
    """The `delta` source plug-in."""
    return DeltaSource(
        uri=section.uri,
        shard_bytes=section.shard_bytes,
        options=DeltaSourceOptions.model_validate(section.options),
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
    )
