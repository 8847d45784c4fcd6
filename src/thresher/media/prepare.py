"""A chunk's encoded images decoded and preprocessed on a pool of threads.

Pillow releases the GIL while it decodes and resizes, so a few threads decode a chunk in
parallel, and the worker runs this on its reading thread, a chunk ahead of the model (see
worker/prepare.py): the model does not wait for JPEG decoding while cores allow. An image
that fails is left out of the chunk and reported with its stage; the others go on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from thresher.media.columns import (
    DECODED,
    ENCODED,
    MEDIA_KEY,
    TENSOR,
    columns_holding,
    decoded_column,
    max_pixels,
    tensor_column,
)
from thresher.media.decode import MediaError, decode, pillow_limit
from thresher.media.preprocess import Transform

DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own default limit (0.25 GB of RGBA)
Failures = dict[int, tuple[str, str, str]]  # row -> (stage, error type, message)


@dataclass
class ImagePreparer:
    """Decodes the encoded image columns of a chunk (all of them, or `column`) and, with
    a `transform`, preprocesses each image into a tensor of one shape; without one,
    keeps the decoded pixels (for a `python` model)."""

    transform: Transform | None = None
    threads: int = 1
    column: str | None = None
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _limit: int | None = field(default=None, init=False, repr=False)

    def prepare(self, table: pa.Table) -> tuple[pa.Table, Failures]:
        """The table with its image columns decoded, less the rows that failed."""
        names = columns_holding(table.schema, ENCODED)
        if self.column is not None:
            names = [n for n in names if n == self.column]
        failures: Failures = {}
        for name in names:
            table = self._prepare_column(table, name, failures)
        if failures:
            keep = np.ones(table.num_rows, dtype=bool)
            keep[list(failures)] = False
            table = table.filter(pa.array(keep))
        return table, failures

    def _prepare_column(self, table: pa.Table, name: str, failures: Failures) -> pa.Table:
        index = table.schema.get_field_index(name)
        limit = max_pixels(table.schema.field(index), DEFAULT_MAX_PIXELS)
        if self._limit != limit:
            pillow_limit(limit)
            self._limit = limit
        files = table.column(index).to_pylist()
        results = self._map(lambda data: self._one(data, limit), files)
        if self.transform is not None:
            _refuse_odd_shapes(results)
        for row, result in enumerate(results):
            if isinstance(result, MediaError):
                failures.setdefault(row, (result.stage, result.error, str(result)))
        good = [r for r in results if isinstance(r, np.ndarray)]
        # A failed row is dropped after every column is done: until then it holds a
        # placeholder of the good rows' shape (of any shape, when none is good).
        filler = good[0] if good else np.zeros((1, 1, 3), np.uint8)
        arrays = [r if isinstance(r, np.ndarray) else filler for r in results]
        if self.transform is None:
            column, kind = decoded_column(arrays), DECODED
        else:
            stack = np.stack(arrays) if arrays else np.zeros((0, *filler.shape), np.float32)
            column, kind = tensor_column(stack), TENSOR
        field = pa.field(name, column.type, metadata={MEDIA_KEY: kind})
        return table.set_column(index, field, column)

    def _one(self, data: bytes | None, limit: int) -> np.ndarray | MediaError:
        try:
            image = decode(data or b"", limit)
        except MediaError as exc:
            return exc
        if self.transform is None:
            return np.asarray(image)
        try:
            return np.asarray(self.transform(image), dtype=np.float32)
        except Exception as exc:  # a processor may raise anything on an odd image
            return MediaError("preprocess", type(exc).__name__, str(exc) or type(exc).__name__)

    def _map(
        self, work: Callable[[bytes | None], np.ndarray | MediaError], items: list[bytes | None]
    ) -> list[np.ndarray | MediaError]:
        if self.threads <= 1 or len(items) < 2:
            return [work(i) for i in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="thresher-decode")
        return list(self._pool.map(work, items))


def _refuse_odd_shapes(results: list[np.ndarray | MediaError]) -> None:
    """Preprocessed images must share one shape to make a batch: those of another shape
    than most (a recipe without `crop` keeps each image's aspect ratio) become
    preprocess errors, in place."""
    shapes = Counter(r.shape for r in results if isinstance(r, np.ndarray))
    if len(shapes) < 2:
        return
    common = shapes.most_common(1)[0][0]
    for row, result in enumerate(results):
        if isinstance(result, np.ndarray) and result.shape != common:
            results[row] = MediaError(
                "preprocess",
                "ShapeMismatch",
                f"preprocessed to shape {result.shape}, the chunk's images to {common};"
                " set model.options.image.crop so every image ends the same size",
            )
