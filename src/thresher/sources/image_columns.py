"""Images in a column of any tabular source (`source.images`): a CSV of `id,image_url`, a
Parquet table whose `image` column holds each file's bytes, a SQL query's paths.

    [source]
    uri = "photos.csv"
    id_column = "id"
    images = { column = "image_url" }     # fetched into the column `image`

This wraps the source the spec's format names. Its plan is the inner plan with the image
column marked in the schema (media/columns.py), so the worker decodes and prepares it for
the model as it does a folder of images. A column of bytes is marked where it is; a
column of paths or URLs stays as it is (it may be the id) and each row's file is fetched
into `into` by the reader, a chunk of at most `chunk_rows` rows at a time, on
`threads` threads (sources/fetch.py). A row whose file cannot be fetched is a bad record
of stage `fetch` naming the input's file and line; the others go on.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from thresher.errors import SourceError
from thresher.media.columns import ENCODED, as_image, image_field, media_kind
from thresher.media.settings import ImageColumnSection
from thresher.places import table_format
from thresher.records import BadRecord
from thresher.sources.bad_rows import bad_row
from thresher.sources.base import Chunk, Plan, Shard, ShardReader, Source
from thresher.sources.fetch import Fetcher
from thresher.spec import SourceSection


def folder_of(section: SourceSection) -> str:
    """Where a row's relative path is: the folder of the source's file (or the folder it
    names, or its URL prefix); the working folder for a database's rows."""
    uri = section.files[0] if section.files else section.uri
    if table_format(uri) is not None:
        return ""  # a query or a table: no folder of its own
    if "://" in uri and not uri.startswith("file://"):
        return uri if uri.endswith("/") else posixpath.dirname(uri)
    path = uri.removeprefix("file://")
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


@dataclass
class ImageColumnSource:
    """`inner` with the column `images.column` as images (held, or fetched from `base`
    within `roots`)."""

    inner: Source
    images: ImageColumnSection
    base: str
    roots: tuple[str, ...] = ()
    id_column: str | None = None

    def plan(self) -> Plan:
        plan = self.inner.plan()
        return Plan(plan.shards, self.planned_schema(plan.schema))

    def planned_schema(self, schema: pa.Schema) -> pa.Schema:
        """`schema` with the image column marked (bytes) or added (paths)."""
        column, limit = self.images.column, self.images.max_pixels
        if column not in schema.names:
            names = ", ".join(schema.names)
            raise SourceError(f"source.images.column: no column {column!r} (it has: {names})")
        kind = schema.field(column).type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            index = schema.get_field_index(column)
            return schema.set(index, as_image(schema.field(index), limit))
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise SourceError(
                f"source.images.column: {column!r} is {kind}; it must hold a file's bytes"
                " (binary) or its path or URL (string)"
            )
        if self.images.into in schema.names:
            raise SourceError(
                f"source.images.into: the input already has a column {self.images.into!r};"
                " name another for the fetched files"
            )
        return schema.append(image_field(self.images.into, limit))

    def reader(self, schema: pa.Schema, columns: list[str]) -> ShardReader:
        column = self.images.column
        if media_kind(schema.field(column)) == ENCODED:  # a column of bytes
            inner = self.inner.reader(_unmarked(schema, column), columns)
            return MarkedReader(inner, column, self.images)
        into = self.images.into
        wanted = [c for c in columns if c != into]
        read = wanted if column in wanted else [*wanted, column]
        inner_schema = schema.remove(schema.get_field_index(into))
        images = self.images
        fetcher = Fetcher(
            self.base, self.roots, images.threads, images.retries, images.timeout, images.max_bytes
        )
        return FetchingReader(self.inner.reader(inner_schema, read), columns, self, fetcher)


def _unmarked(schema: pa.Schema, column: str) -> pa.Schema:
    """The inner source's own schema: the bytes column without the image mark (its
    reader reads the type it planned)."""
    index = schema.get_field_index(column)
    return schema.set(index, schema.field(index).remove_metadata())


@dataclass
class MarkedReader:
    """Reads a column of image bytes and marks it so, `chunk_rows` rows at a time."""

    inner: ShardReader
    column: str
    images: ImageColumnSection

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        limit = self.images.max_pixels
        for chunk in self.inner.read(shard, min(rows_per_chunk, self.images.chunk_rows)):
            table = chunk.table
            index = table.schema.get_field_index(self.column)
            marked = as_image(table.schema.field(index), limit)
            yield Chunk(
                table.set_column(index, marked, table.column(index)), chunk.positions, chunk.bad
            )

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return self.inner.locate(shard, position)


@dataclass
class FetchingReader:
    """Reads a column of paths or URLs and fetches each row's file into the image
    column, `chunk_rows` rows at a time; rows that fail go to the chunk's bad records."""

    inner: ShardReader
    columns: list[str]  # what the caller asked for, in its order
    source: ImageColumnSource
    fetcher: Fetcher = field(repr=False)

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        images = self.source.images
        for chunk in self.inner.read(shard, min(rows_per_chunk, images.chunk_rows)):
            yield self._fetched(shard, chunk)

    def _fetched(self, shard: Shard, chunk: Chunk) -> Chunk:
        images, table = self.source.images, chunk.table
        results = self.fetcher.fetch_all(table.column(images.column).to_pylist())
        bad: list[BadRecord] = list(chunk.bad)
        kept: list[bool] = []
        for index, result in enumerate(results):
            kept.append(isinstance(result, bytes))
            if not isinstance(result, bytes):
                why = (result.stage, result.error, str(result))
                rows = (table, chunk.positions)
                id_column = self.source.id_column
                bad.append(bad_row(self, shard, rows, index=index, id_column=id_column, why=why))
        data = pa.array([r if isinstance(r, bytes) else b"" for r in results], pa.large_binary())
        table = table.append_column(image_field(images.into, images.max_pixels), data)
        mask = pa.array(kept)
        return Chunk(table.filter(mask).select(self.columns), chunk.positions[kept], bad)

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        return self.inner.locate(shard, position)
