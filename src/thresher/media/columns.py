"""Images in Arrow columns, marked by their field's metadata so any stage can find them.

A column's field says what it holds under `thresher.media`:

- `image`: a file's encoded bytes (`large_binary`), as a source reads them;
- `decoded`: decoded pixels of any size, `struct<pixels: large_binary, shape:
  fixed_size_list<int32>[3]>` (height, width, channels; the layout of Arrow's variable
  shape tensor, which pyarrow does not expose yet), for a `python` model;
- `tensor`: preprocessed images of one shape, Arrow's `fixed_shape_tensor<float32>`.

Field metadata survives slicing, filtering and selecting, so the mark travels with the
rows through batching; the column's type alone would not say a binary column is an image.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

MEDIA_KEY = b"thresher.media"
MAX_PIXELS_KEY = b"thresher.max_pixels"  # the source's pixel limit, read by the decoder
ENCODED, DECODED, TENSOR = b"image", b"decoded", b"tensor"
_SHAPE = pa.list_(pa.int32(), 3)
DECODED_TYPE = pa.struct([("pixels", pa.large_binary()), ("shape", _SHAPE)])


def image_field(name: str, max_pixels: int) -> pa.Field:
    """The field of a column of encoded image files, with the pixel limit to decode by."""
    metadata = {MEDIA_KEY: ENCODED, MAX_PIXELS_KEY: str(max_pixels).encode()}
    return pa.field(name, pa.large_binary(), metadata=metadata)


def as_image(field: pa.Field, max_pixels: int) -> pa.Field:
    """A binary field of a table (image files' bytes) marked as `image_field`'s are."""
    metadata = {
        **(field.metadata or {}),
        MEDIA_KEY: ENCODED,
        MAX_PIXELS_KEY: str(max_pixels).encode(),
    }
    return field.with_metadata(metadata)


def media_kind(field: pa.Field) -> bytes | None:
    """What a field holds (`ENCODED`, `DECODED`, `TENSOR`), or None for any other column."""
    return (field.metadata or {}).get(MEDIA_KEY)


def columns_holding(schema: pa.Schema, kind: bytes) -> list[str]:
    """The names of `schema`'s columns that hold `kind`, in order."""
    return [f.name for f in schema if media_kind(f) == kind]


def max_pixels(field: pa.Field, default: int) -> int:
    """The pixel limit the source set on an encoded image column (`default` if none)."""
    value = (field.metadata or {}).get(MAX_PIXELS_KEY)
    return int(value) if value else default


def decoded_column(images: Sequence[np.ndarray]) -> pa.Array:
    """Decoded `(height, width, channels)` uint8 images as one `DECODED_TYPE` array."""
    pixels = pa.array([np.ascontiguousarray(i).tobytes() for i in images], pa.large_binary())
    shapes = pa.array([list(i.shape) for i in images], _SHAPE)
    return pa.StructArray.from_arrays([pixels, shapes], fields=list(DECODED_TYPE))


def decoded_arrays(column: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """A `DECODED_TYPE` column as one uint8 array per row, each a view of its bytes."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    images: list[np.ndarray] = []
    for chunk in chunks:
        shapes = chunk.field("shape").to_pylist()
        for data, shape in zip(chunk.field("pixels"), shapes, strict=True):
            buffer = data.as_buffer()
            images.append(np.frombuffer(buffer, dtype=np.uint8).reshape(shape))
    return images


def tensor_column(stack: np.ndarray) -> pa.Array:
    """A `(rows, ...)` float32 array as a fixed shape tensor column (no copy)."""
    return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(stack, np.float32))


def tensor_batch(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed shape tensor column as one `(rows, ...)` array (a view when one chunk)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    arrays = [c.to_numpy_ndarray() for c in chunks if len(c)]
    if not arrays:
        shape = column.type.shape
        return np.empty((0, *shape), dtype=np.float32)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
