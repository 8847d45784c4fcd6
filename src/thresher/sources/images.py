"""Images: a folder, a glob or an fsspec URL of image files, one row per file.

    [source]
    uri = "photos/"          # or "photos/**/*.jpg", "s3://bucket/uploads/2026-05-01/"
    format = "images"
    id_column = "path"

A row is `path` (the file's URL), `size` (bytes), `mtime` (UTC), `format` (`jpeg`,
`png`, `webp`, `tiff`, `gif`, `bmp`: what the bytes are, whatever the name says) and
`image` (the file's bytes, decoded and prepared by the worker for the model: see
media/). A folder is listed whole (hidden and `_` files aside), so each file is a row:
one that is empty or is not an image by its first bytes is a bad record (stage
`decode`), as is one that vanished after planning (stage `read`).

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
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from thresher.errors import SourceError
from thresher.media.columns import image_field
from thresher.media.kinds import SNIFF_BYTES, sniff
from thresher.plugins import Options
from thresher.records import BadRecord
from thresher.sources.base import Chunk, Plan, Shard, shard_size
from thresher.sources.files import filesystem, list_files
from thresher.spec import SourceSection

LISTING_KEY = b"thresher.files"  # the frozen listing: [[url, size, mtime_ns], ...]
CHUNK_BYTES = 64 * 1024 * 1024  # encoded bytes read at once, at most


class ImageSourceOptions(Options):
    """`source.options` of `format = "images"`."""

    shard_files: int = Field(default=1_000, ge=1)  # files per shard, at most
    # Rows read, decoded and held at once: a chunk's decoded images are in memory
    # together (256 at 224x224 float32: 150 MB), and no batch is larger.
    chunk_images: int = Field(default=256, ge=1)
    # The most pixels an image may claim (a decompression bomb's 1 KB file claims
    # billions): Pillow's default, 89.5 million.
    max_pixels: int = Field(default=89_478_485, ge=1)
    suffixes: list[str] | None = None  # list only files ending so (a folder); none: all


@dataclass(frozen=True)
class ImageSource:
    uri: str
    shard_bytes: int
    options: ImageSourceOptions
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
        schema = image_schema(self.options.max_pixels).with_metadata(
            {LISTING_KEY: json.dumps(listing).encode()}
        )
        return Plan(shards=shards, schema=schema)

    def reader(self, schema: pa.Schema, columns: list[str]) -> ImageReader:
        listing = json.loads((schema.metadata or {})[LISTING_KEY])
        return ImageReader(
            listing=tuple((url, size, mtime) for url, size, mtime in listing),
            columns=tuple(columns),
            schema=schema.remove_metadata(),
            chunk_images=self.options.chunk_images,
            id_column=self.id_column,
        )


def image_schema(max_pixels: int) -> pa.Schema:
    """The columns of an image source's rows."""
    return pa.schema(
        [
            pa.field("path", pa.string()),
            pa.field("size", pa.int64()),
            pa.field("mtime", pa.timestamp("us", tz="UTC")),
            pa.field("format", pa.string()),
            image_field("image", max_pixels),
        ]
    )


@dataclass(frozen=True)
class ImageReader:
    listing: tuple[tuple[str, int, int], ...]
    columns: tuple[str, ...]
    schema: pa.Schema
    chunk_images: int
    id_column: str | None = None

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        rows = min(rows_per_chunk, self.chunk_images)
        fields = [self.schema.field(name) for name in self.columns]
        missing = [n for n in self.columns if self.schema.get_field_index(n) < 0]
        if missing:
            raise SourceError(f"{shard.path}: no column(s) {', '.join(missing)} in an image row")
        pending: list[tuple[int, dict[str, Any]]] = []
        bad: list[BadRecord] = []
        size = 0
        for number in range(shard.start, shard.stop):
            row = self._row(number, bad)
            if row is not None:
                pending.append((number, row))
                size += len(row["image"])
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
        row["format"] = kind = sniff(data[:SNIFF_BYTES])
        if not data:
            bad.append(self._bad(row, number, "decode", "EmptyFile", "the file is empty (0 bytes)"))
        elif kind is None:
            message = f"not an image file (its first bytes are {data[:8]!r})"
            bad.append(self._bad(row, number, "decode", "NotAnImage", message))
        else:
            return {**row, "image": data}
        return None

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


def image_source(section: SourceSection, keep_columns: Sequence[str], min_shards: int) -> Any:
    """The `images` source plug-in."""
    return ImageSource(
        uri=section.uri,
        shard_bytes=section.shard_bytes,
        options=ImageSourceOptions.model_validate(section.options),
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
        files=tuple(section.files),
        id_column=section.id_column,
    )
