"""Features joined point-in-time: an entity table, each row given every feature table's
latest values at or before its "as of" time (Feast's `get_historical_features`).

    [source]
    format = "features"
    uri = "data/entities.parquet"        # the entity table: ids, keys and as-of times
    id_column = "customer_id"
    [source.options]
    timestamp = "as_of"
    [[source.options.tables]]
    uri = "data/transactions_features.parquet"   # Parquet or CSV files (a glob, a folder)
    key = "customer_id"                  # or ["a", "b"]; `entity_key` if named otherwise
    timestamp = "event_time"
    columns = ["spend_30d", "txn_count_30d"]     # default: all but key, timestamp
    ttl = "30d"                          # older than that: null (s, m, h, d, w)
    # or uri = "duckdb:///data/shop.duckdb" with table = "transactions_features",
    # or uri = "lake/features" with format = "delta" (and version = 12 to pin one)

For each entity row and each table: the row with an equal key and the greatest timestamp
≤ the entity's (never a later one: no leakage), its columns null when there is none or
it is older than `ttl`. Ties (rows with the same key and timestamp): the one with the
greatest `tie_break` column if the table names one, then the last in file order (files
by name, rows in order; a Delta table's files in the order written; a DuckDB table: by
rowid; CSV: the greatest feature values).

Entity rows keep their order and every column, followed by each table's feature columns;
a feature column whose name is taken (an entity column, another table's) is a spec error
unless the table sets `full_names = true` (columns named `<name>__<column>`, `name`
defaulting to the file's or table's). When every table lists its `columns`, they are
the model's inputs unless `source.columns` says otherwise.

The plan shards the entity files as the Parquet source does and freezes each table's
file list (in the plan schema's metadata), so a resume reads the same files; `asof.py`
reads a shard with one DuckDB `ASOF JOIN` per table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import unquote

import pyarrow as pa
from pydantic import Field, field_validator, model_validator

from thresher.errors import SourceError, SpecError
from thresher.plugins import Options
from thresher.sources.asof import (
    METADATA_KEY,
    FeaturesReader,
    TableRead,
    describe,
    nanoseconds,
)
from thresher.sources.base import MAX_COLUMNS, Plan
from thresher.sources.files import confine, list_files
from thresher.sources.parquet import ParquetSource
from thresher.spec import SourceSection

_TTL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_KINDS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


class FeatureTable(Options):
    """One feature table of `source.options.tables`."""

    uri: str
    table: str | None = None  # a duckdb:/// uri's table
    format: Literal["delta"] | None = None  # else files by their suffix, or a duckdb table
    version: int | None = Field(default=None, ge=0)  # a Delta table's, else its latest
    name: str | None = None
    key: list[str] = Field(min_length=1)
    entity_key: list[str] | None = None  # the entity's key columns, if named otherwise
    timestamp: str
    columns: list[str] | None = None
    ttl: timedelta | None = None
    tie_break: str | None = None
    full_names: bool = False

    @field_validator("key", "entity_key", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("ttl", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        match = _TTL.match(value) if isinstance(value, str) else None
        return timedelta(**{_UNITS[match[2]]: float(match[1])}) if match else value

    @model_validator(mode="after")
    def _consistent(self) -> FeatureTable:
        if self.entity_key is not None and len(self.entity_key) != len(self.key):
            raise ValueError("entity_key: needs as many columns as key")
        if self.uri.startswith("duckdb://") != (self.table is not None):
            raise ValueError("table: a duckdb:///file.duckdb uri needs one, files take none")
        if self.table is None and self.format is None and _kind(self.uri) is None:
            raise ValueError(f"uri: {self.uri!r} is not .parquet, .pq or .csv files")
        if self.version is not None and self.format != "delta":
            raise ValueError('version: only a format = "delta" table has versions')
        if self.ttl is not None and self.ttl <= timedelta(0):
            raise ValueError("ttl: must be positive (30d, 12h, 90m)")
        return self

    def table_name(self) -> str:
        if self.name:
            return self.name
        if self.table:
            return self.table.rpartition(".")[2]
        path = PurePosixPath(self.uri.rstrip("/"))
        if any(ch in path.name for ch in "*?["):
            path = path.parent
        return path.name.split(".")[0]


class FeaturesOptions(Options):
    """`source.options` of the `features` source."""

    timestamp: str  # the entity table's as-of column
    tables: list[FeatureTable] = Field(min_length=1)
    max_columns: int = Field(default=MAX_COLUMNS, ge=1)

    @model_validator(mode="after")
    def _distinct_names(self) -> FeaturesOptions:
        names = [t.table_name() for t in self.tables]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tables: two tables named {twice[0]!r}; give each a `name`")
        return self


def _kind(uri: str) -> str | None:
    name = uri.rstrip("/").rsplit("/", 1)[-1].lower()
    suffix = PurePosixPath(name).suffix
    return _KINDS.get(suffix) if suffix else "parquet"  # a folder: Parquet files


def complete_features_spec(spec: Any) -> None:
    """The model's inputs: every table's listed columns, unless `source.columns` names
    them or a table lists none (the `completes` hook of the plug-in)."""
    source = spec.source
    options = FeaturesOptions.model_validate(source.options)
    if source.columns or any(t.columns is None for t in options.tables):
        return
    source.columns = [
        f"{t.table_name()}__{c}" if t.full_names else c
        for t in options.tables
        for c in t.columns or ()
    ]


@dataclass(frozen=True)
class FeaturesSource:
    entities: ParquetSource
    options: FeaturesOptions
    roots: tuple[str, ...] = ()

    def plan(self) -> Plan:
        plan = self.entities.plan()
        entity = plan.schema
        _check_temporal(entity, self.options.timestamp, "source.options.timestamp", "the entities")
        taken = set(entity.names)
        tables, fields = [], list(entity)
        for index, table in enumerate(self.options.tables):
            read, types = self._resolve(index, table, entity, taken)
            tables.append(asdict(read))
            fields += [pa.field(n, t) for n, t in zip(read.outputs, types, strict=True)]
        metadata = {
            METADATA_KEY: json.dumps({"timestamp": self.options.timestamp, "tables": tables})
        }
        return Plan(shards=plan.shards, schema=pa.schema(fields, metadata=metadata))

    def reader(self, schema: pa.Schema, columns: list[str]) -> FeaturesReader:
        return FeaturesReader.for_plan(schema, columns)

    def _resolve(
        self, index: int, table: FeatureTable, entity: pa.Schema, taken: set[str]
    ) -> tuple[TableRead, list[pa.DataType]]:
        field = f"source.options.tables[{index}]"
        read = self._located(table, field)
        schema = describe(read, field)
        entity_key = table.entity_key or table.key
        for ours, theirs in zip(entity_key, table.key, strict=True):
            _check_key(entity, schema, (ours, theirs), field, table.uri)
        _check_temporal(schema, table.timestamp, f"{field}.timestamp", table.uri)
        _check_same_zone(entity.field(self.options.timestamp).type, schema, table, field)
        if table.tie_break is not None:
            _need(schema, [table.tie_break], f"{field}.tie_break", table.uri)
        reserved = {*table.key, table.timestamp, table.tie_break}
        columns = table.columns or [n for n in schema.names if n not in reserved]
        _need(schema, columns, f"{field}.columns", table.uri)
        outputs = [f"{read.name}__{c}" if table.full_names else c for c in columns]
        for name in outputs:
            if name in taken:
                raise SpecError(
                    [
                        f"{field}.columns: {name!r} from {table.uri} is already a column of the "
                        "entities or of another table; set full_names = true on this table"
                    ]
                )
            taken.add(name)
        done = replace(
            read,
            entity_key=tuple(entity_key),
            columns=tuple(columns),
            outputs=tuple(outputs),
            nanoseconds=nanoseconds(schema.field(table.timestamp).type),
        )
        return done, [schema.field(c).type for c in columns]

    def _located(self, table: FeatureTable, field: str) -> TableRead:
        """The table with its files listed (and confined to the allowed roots) now."""
        if table.table is not None:
            path = "/" + table.uri.removeprefix("duckdb://").lstrip("/")
            try:
                files = confine([path], self.roots) if self.roots else [path]
            except SourceError as exc:
                raise SpecError([f"{field}.uri: {str(exc).removeprefix('source.uri: ')}"]) from None
            kind = "duckdb"
        else:
            kind = _kind(table.uri) or "parquet"
            suffixes = (".csv",) if kind == "csv" else (".parquet", ".pq")
            try:
                if table.format == "delta":
                    kind, files = "delta", delta_files(table, field)
                    files = confine(files, self.roots) if self.roots else files
                else:
                    files = list_files(table.uri, suffixes, self.roots)
            except SourceError as exc:
                raise SpecError([f"{field}.uri: {str(exc).removeprefix('source.uri: ')}"]) from None
        ttl = None if table.ttl is None else int(table.ttl / timedelta(microseconds=1))
        return TableRead(
            name=table.table_name(),
            uri=table.uri,
            kind=kind,
            files=tuple(files),
            table=table.table,
            key=tuple(table.key),
            entity_key=tuple(table.key),
            timestamp=table.timestamp,
            columns=(),
            outputs=(),
            ttl_us=ttl,
            tie_break=table.tie_break,
        )


def delta_files(table: FeatureTable, field: str) -> list[str]:
    """The data files of a Delta feature table at its pinned (or latest) version: the
    plan freezes them, so a resume joins the same rows. Partition values (which Delta
    keeps in its log) come back from the files' hive-style paths."""
    from deltalake import DeltaTable

    from thresher.sources.delta import UNREADABLE_FEATURES

    try:
        delta = DeltaTable(table.uri, version=table.version)
    except Exception as exc:  # deltalake's: no table there, no such version
        raise SpecError([f"{field}.uri: cannot open the Delta table {table.uri}: {exc}"]) from None
    refused = sorted(set(delta.protocol().reader_features or []) & set(UNREADABLE_FEATURES))
    if refused:
        raise SpecError([f"{field}.uri: {table.uri} uses {', '.join(refused)}, which a feature"
                         " table cannot be read with; rewrite the table without it"])  # fmt: skip
    root = delta.table_uri.rstrip("/").removeprefix("file://")
    actions = pa.table(delta.get_add_actions(flatten=True)).select(["path", "modification_time"])
    if not actions.num_rows:
        raise SpecError([f"{field}.uri: the Delta table {table.uri} has no data files"])
    # in the order written: a tie goes to the row written last, as files by name elsewhere
    written = sorted(actions.to_pylist(), key=lambda a: (a["modification_time"], a["path"]))
    return [f"{root}/{unquote(a['path'])}" for a in written]


def _need(schema: pa.Schema, names: Sequence[str], field: str, where: str) -> None:
    missing = [n for n in names if n not in schema.names]
    if missing:
        have = ", ".join(schema.names[:8]) + (", …" if len(schema.names) > 8 else "")
        raise SpecError([f"{field}: {where} has no column {missing[0]!r} (it has {have})"])


def _check_temporal(schema: pa.Schema, name: str, field: str, where: str) -> None:
    _need(schema, [name], field, where)
    kind = schema.field(name).type
    if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
        raise SpecError([f"{field}: {name!r} in {where} is {kind}, not a timestamp or date"])


def _check_same_zone(ours: pa.DataType, schema: pa.Schema, table: FeatureTable, where: str) -> None:
    theirs = schema.field(table.timestamp).type
    zoned = [pa.types.is_timestamp(t) and t.tz is not None for t in (ours, theirs)]
    if zoned[0] != zoned[1]:
        raise SpecError(
            [
                f"{where}.timestamp: {table.timestamp!r} in {table.uri} is {theirs} but the "
                f"entities' as-of "
                f"column is {ours}; both need a time zone or neither"
            ]
        )


def _key_family(kind: pa.DataType) -> str:
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or kind == pa.string_view():
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    return str(kind)


def _check_key(
    entity: pa.Schema, schema: pa.Schema, names: tuple[str, str], field: str, uri: str
) -> None:
    ours, theirs = names
    _need(entity, [ours], f"{field}.entity_key", "the entities")
    _need(schema, [theirs], f"{field}.key", uri)
    a, b = entity.field(ours).type, schema.field(theirs).type
    if _key_family(a) != _key_family(b):
        raise SpecError(
            [
                f"{field}.key: {theirs!r} in {uri} is {b} but the entities' {ours!r} is {a}; "
                "keys must be of one type (cast one of them)"
            ]
        )


def features_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> FeaturesSource:
    """The `features` source plug-in: the entity files, planned as Parquet, joined."""
    options = FeaturesOptions.model_validate(section.options)
    entities = ParquetSource(
        uri=section.uri,
        shard_bytes=section.shard_bytes,
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
        max_columns=options.max_columns,
        files=tuple(section.files),
    )
    return FeaturesSource(entities, options, tuple(section.allowed_roots))
