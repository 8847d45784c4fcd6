"""`source.images`, the spec's section for images in a column of any tabular source (read
by sources/image_columns.py; the fetching in sources/fetch.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ImageColumnSection"]


class ImageColumnSection(BaseModel):
    """`source.images`: a column of a file's bytes, or of its path or URL (relative: to
    the source's folder) fetched into `into` by the workers (sources/image_columns.py)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    column: str
    into: str = "image"
    threads: int = Field(default=16, ge=1, le=256)  # fetches at once, per worker
    retries: int = Field(default=3, ge=0, le=10)  # after a timeout, a 5xx, a 429
    timeout: float = Field(default=30.0, gt=0)  # seconds, per try
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1)  # a fetched file's most bytes
    chunk_rows: int = Field(default=256, ge=1)  # rows fetched and decoded at once
    max_pixels: int = Field(default=89_478_485, ge=1)  # as `images`' (a bomb's claim)
