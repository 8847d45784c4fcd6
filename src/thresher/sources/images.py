"""Images: a folder, a glob or an fsspec URL of image files, one row per file.

    [source]
    uri = "photos/"          # or "photos/**/*.jpg", "s3://bucket/uploads/2026-05-01/"
    format = "images"
    id_column = "path"

A row is the file's `path`, `size`, `mtime` and `format` (`jpeg`, `png`, `webp`, `tiff`,
`gif`, `bmp`: what the bytes are, whatever the name says; `file_rows.py` lists, shards and
reads the files) and `image`, the file's bytes, decoded and prepared by the worker for
the model (media/). A file that is not an image by its first bytes is a bad record
(stage `decode`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import Field

from thresher.media.columns import image_field
from thresher.media.kinds import SNIFF_BYTES, sniff
from thresher.sources.file_rows import FileRowsOptions, FileRowsSource, Refused
from thresher.spec import SourceSection

__all__ = ["ImageContent", "ImageSourceOptions", "image_files", "image_source"]


class ImageSourceOptions(FileRowsOptions):
    """`source.options` of `format = "images"`."""

    # Rows read, decoded and held at once: a chunk's decoded images are in memory
    # together (256 at 224x224 float32: 150 MB), and no batch is larger.
    chunk_images: int = Field(default=256, ge=1)
    # The most pixels an image may claim (a decompression bomb's 1 KB file claims
    # billions): Pillow's default, 89.5 million.
    max_pixels: int = Field(default=89_478_485, ge=1)


@dataclass(frozen=True)
class ImageContent:
    """An image file's row: its bytes, as the `image` column (decoded by the worker)."""

    max_pixels: int
    chunk_images: int

    def fields(self) -> list[pa.Field]:
        return [image_field("image", self.max_pixels)]

    def chunk_rows(self) -> int:
        return self.chunk_images

    def row(self, data: bytes) -> tuple[str, dict[str, Any]]:
        kind = sniff(data[:SNIFF_BYTES])
        if kind is None:
            message = f"not an image file (its first bytes are {data[:8]!r})"
            raise Refused("decode", "NotAnImage", message)
        return kind, {"image": data}


def image_files(
    uri: str, shard_bytes: int, options: ImageSourceOptions, **more: Any
) -> FileRowsSource:
    """An image source over `uri` (the `images` plug-in's, for a caller that has no spec)."""
    content = ImageContent(options.max_pixels, options.chunk_images)
    return FileRowsSource(uri, shard_bytes, options, content, **more)


def image_source(section: SourceSection, keep_columns: Sequence[str], min_shards: int) -> Any:
    """The `images` source plug-in."""
    return image_files(
        section.uri,
        section.shard_bytes,
        ImageSourceOptions.model_validate(section.options),
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
        files=tuple(section.files),
        id_column=section.id_column,
    )
