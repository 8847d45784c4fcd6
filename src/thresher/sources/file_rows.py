"""Files as rows: a folder, a glob or an fsspec URL of files (images, documents), one row
per file, each file's content made into its columns by a `FileContent` (`images.py`,
`documents.py`).

A row is `path` (the file's URL), `size` (bytes), `mtime` (UTC), `format` (what the
bytes are, whatever the name says) and the content's own columns. A folder is listed
whole (hidden and `_` files aside), so each file is a row: one that is empty or that the
content refuses is a bad record (its stage and reason the content's), as is one that
vanished after planning (stage `read`).

Planning lists the files once, with their sizes and times, in path order, and freezes the
listing in the plan (in its schema's metadata, which every reader of the plan is given):
a resumed job reads the very files it planned, whatever landed in the folder since. A
shard is a run of files, cut at `shard_files` files or `shard_bytes` bytes, whichever
comes first; a row's position is its file's place in the listing, which error records
give as `row`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np
import pyarrow as pa
from pydantic import Field

from thresher.errors import SourceError
from thresher.plugins import Options
from thresher.records import BadRecord
from thresher.sources.base import Chunk, Plan, Shard, shard_size
from thresher.sources.files import filesystem, list_files

LISTING_KEY = b"thresher.files"  # the frozen listing: [[url, size, mtime_ns], ...]
CHUNK_BYTES = 64 * 1024 * 1024  # encoded bytes read at once, at most


class FileRowsOptions(Options):
    """`source.options` every files-as-rows source takes."""

    shard_files: int = Field(default=1_000, ge=1)  # files per shard, at most
    suffixes: list[str] | None = None  # list only files ending so (a folder); none: all


class Refused(Exception):
    """A file its content cannot make a row of: its stage, error and reason."""

    def __init__(self, stage: str, error: str, message: str) -> None:
        super().__init__(message)
        self.stage, self.error, self.message = stage, error, message


class FileContent(Protocol):
    """What one kind of file becomes: its columns, and a file's bytes made into them."""

    def fields(self) -> list[pa.Field]:
        """The content's columns, after `path`, `size`, `mtime` and `format`."""
        ...

    def chunk_rows(self) -> int:
        """Rows read and held at once, at most."""
        ...

    def row(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """The file's format and its content's columns; Refused when it is none."""
        ...


@dataclass(frozen=True)
class FileRowsSource:
    uri: str
    shard_bytes: int
    options: FileRowsOptions
    content: FileContent
    min_shards: int = 1
    roots: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    id_column: str | None = None

    def plan(self) -> Plan:
        listing = _listing(self.uri, self.options.suffixes, self.roots, self.files)
        per_shard = min(
            self.options.shard_files,
            shard_size(len(listing), len(listing), self.min_shards, 1),
        )
        shards: list[Shard] = []
        start, size = 0, 0
        for number, (_, file_size, _) in enumerate(listing):
            size += file_size
            if number + 1 - start >= per_shard or size >= self.shard_bytes:
                shards.append(_shard(len(shards), self.uri, start, number + 1))
                start, size = number + 1, 0
        if start < len(listing):
            shards.append(_shard(len(shards), self.uri, start, len(listing)))
        schema = pa.schema([*FILE_FIELDS, *self.content.fields()])
        schema = schema.with_metadata({LISTING_KEY: json.dumps(listing).encode()})
        return Plan(shards=shards, schema=schema)

    def reader(self, schema: pa.Schema, columns: list[str]) -> FileRowsReader:
        listing = json.loads((schema.metadata or {})[LISTING_KEY])
        return FileRowsReader(
            listing=tuple((url, size, mtime) for url, size, mtime in listing),
            columns=tuple(columns),
            schema=schema.remove_metadata(),
            content=self.content,
            id_column=self.id_column,
        )


FILE_FIELDS = (
    pa.field("path", pa.string()),
    pa.field("size", pa.int64()),
    pa.field("mtime", pa.timestamp("us", tz="UTC")),
    pa.field("format", pa.string()),
)


@dataclass(frozen=True)
class FileRowsReader:
    listing: tuple[tuple[str, int, int], ...]
    columns: tuple[str, ...]
    schema: pa.Schema
    content: FileContent
    id_column: str | None = None

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        rows = min(rows_per_chunk, self.content.chunk_rows())
        fields = [self.schema.field(name) for name in self.columns]
        missing = [n for n in self.columns if self.schema.get_field_index(n) < 0]
        if missing:
            raise SourceError(f"{shard.path}: no column(s) {', '.join(missing)} in a file's row")
        pending: list[tuple[int, dict[str, Any]]] = []
        bad: list[BadRecord] = []
        size = 0
        for number in range(shard.start, shard.stop):
            row = self._row(number, bad)
            if row is not None:
                pending.append((number, row))
                size += self.listing[number][1]
            if len(pending) >= rows or size >= CHUNK_BYTES:
                yield _chunk(pending, bad, fields)
                pending, bad, size = [], [], 0
        if pending or bad:
            yield _chunk(pending, bad, fields)

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return "row", position

    def source_of(self, shard: Shard, position: int) -> str:
        """The file a row came from, which its error records name."""
        return self.listing[position][0]

    def _row(self, number: int, bad: list[BadRecord]) -> dict[str, Any] | None:
        url, size, mtime = self.listing[number]
        row: dict[str, Any] = {"path": url, "size": size}
        row["mtime"] = datetime.fromtimestamp(mtime / 1e9, UTC)
        try:
            data = _read(url)
        except OSError as exc:
            bad.append(self._bad(row, number, "read", type(exc).__name__, f"cannot read: {exc}"))
            return None
        if not data:
            bad.append(self._bad(row, number, "decode", "EmptyFile", "the file is empty (0 bytes)"))
            return None
        try:
            row["format"], content = self.content.row(data)
        except Refused as refused:
            bad.append(self._bad(row, number, refused.stage, refused.error, refused.message))
            return None
        return {**row, **content}

    def _bad(self, row: dict[str, Any], number: int, stage: Any, error: str, why: str) -> BadRecord:
        """A file that is no row, reported with what is known of it (not its bytes)."""
        return BadRecord(
            source=row["path"],
            stage=stage,
            error=error,
            message=why,
            raw=json.dumps(row, default=str),
            row=number,
            id=row.get(self.id_column) if self.id_column else None,
        )


def _chunk(
    pending: list[tuple[int, dict[str, Any]]], bad: list[BadRecord], fields: list[pa.Field]
) -> Chunk:
    columns = [pa.array([row[f.name] for _, row in pending], f.type) for f in fields]
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    positions = np.fromiter((n for n, _ in pending), dtype=np.int64, count=len(pending))
    return Chunk(table=table, positions=positions, bad=bad)


def _shard(index: int, uri: str, start: int, stop: int) -> Shard:
    return Shard(index, uri, start, stop, first_row=start, rows=stop - start)


def _read(url: str) -> bytes:
    fs, path = filesystem(url)
    with fs.open(path, "rb") as file:
        data: bytes = file.read()
    return data


def _listing(
    uri: str, suffixes: list[str] | None, roots: Sequence[str], files: Sequence[str]
) -> list[tuple[str, int, int]]:
    """Every file the source names, in path order, with its size and mtime (ns)."""
    wanted = tuple(s.lower() for s in suffixes) if suffixes else ("",)
    listed = []
    for url in list_files(uri, wanted, roots, files):
        fs, path = filesystem(url)
        try:
            info = fs.info(path)
        except OSError as exc:
            raise SourceError(f"source.uri: cannot read {url}: {exc}") from exc
        if info.get("type") == "directory":
            continue  # a glob that matches folders too
        listed.append((url, int(info.get("size") or 0), _mtime_ns(info)))
    if not listed:
        raise SourceError(f"source.uri: no files at {uri!r}")
    return listed


def _mtime_ns(info: dict[str, Any]) -> int:
    """A listed file's modification time in ns: local disks give `mtime` (seconds), S3
    and kin `LastModified` or `last_modified` (a datetime)."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if isinstance(value, datetime):
        return int(value.timestamp() * 1e9)
    if isinstance(value, int | float):
        return int(value * 1e9)
    return 0
