"""Delta Lake tables as input, at a version frozen in the job's plan.

    [source]
    format = "delta"
    uri = "lake/customers"                       # a table folder, or s3://bucket/customers
    options = { version = 12 }                   # or timestamp = 2026-01-31T00:00:00Z
    options.partitions = [["region", "=", "eu"]] # read only these partitions' files

Planning opens the table at its latest version (or the pinned one), takes the data files
that version holds, keeps those of the partitions asked for, and plans them as the
Parquet source does (runs of row groups, cut by rows when small), with `files=`. The
plan's shards name the exact files, so a resume reads exactly the planned data even if
writers moved on (unless VACUUM removed the files: then the read fails, naming the file).

Delta keeps partition values in its log, not in the data files: the plan's schema is the
table's own, its metadata carries each file's partition values and the version read, and
the reader adds the partition columns to each chunk. Tables with deletion vectors or
column mapping are refused at planning: their files alone do not say their rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from pydantic import Field, model_validator

from thresher.errors import SourceError
from thresher.plugins import Options
from thresher.sources.base import MAX_COLUMNS, Chunk, Plan, Shard
from thresher.sources.parquet import ParquetReader, ParquetSource
from thresher.spec import SourceSection

VERSION_KEY = b"thresher.delta.version"
PARTITIONS_KEY = b"thresher.delta.partitions"  # {file url: {column: value as text}}
UNREADABLE_FEATURES = ("deletionVectors", "columnMapping")
FILTERS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in")


class DeltaSourceOptions(Options):
    """`source.options` of the `delta` source."""

    version: int | None = Field(default=None, ge=0)
    timestamp: datetime | None = None
    # [column, op, value]: op one of FILTERS; `in` and `not in` take a list
    partitions: list[tuple[str, str, Any]] = Field(default_factory=list)
    max_columns: int = Field(default=MAX_COLUMNS, ge=1)

    @model_validator(mode="after")
    def _one_pin(self) -> DeltaSourceOptions:
        if self.version is not None and self.timestamp is not None:
            raise ValueError("version: set version or timestamp, not both")
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
        files = self._files(table, partition_columns)
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
        if partition_columns:
            metadata[PARTITIONS_KEY] = json.dumps(files, sort_keys=True).encode()
        return Plan(shards=planned.shards, schema=schema.with_metadata(metadata))

    def _open(self) -> DeltaTable:
        try:
            table = DeltaTable(self.uri, version=self.options.version)
            if self.options.timestamp is not None:
                table.load_as_version(self.options.timestamp)
        except Exception as exc:  # deltalake's: no table there, no such version
            raise SourceError(f"source.uri: cannot open the Delta table {self.uri}: {exc}") from exc
        return table

    def _files(self, table: DeltaTable, partition_columns: list[str]) -> dict[str, dict[str, Any]]:
        """The version's data files (URLs) kept by the partition filters, each with its
        partition values as text (None: null)."""
        root = table.table_uri.rstrip("/").removeprefix("file://")
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        files = {}
        for action in actions:
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
