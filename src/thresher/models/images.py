"""Models fed images: the rows' image files decoded and preprocessed by the worker
(`prepare`, on its reading thread), then one `(rows, ...)` float32 tensor per batch.

`kind = "torch"` and `kind = "onnx"` with `model.options.image` become such models (the
module gets the tensor, its output is `prediction`), and so does every `vision` model
(models/vision.py), which reads its output as labels or embeddings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.errors import ModelOutputError
from thresher.media.columns import TENSOR, columns_holding, tensor_batch
from thresher.media.prepare import ImagePreparer
from thresher.media.preprocess import ImageOptions, Transform, recipe
from thresher.models.base import Column, Failures
from thresher.models.outputs import as_column

Runner = Callable[[np.ndarray], Any]  # a (rows, ...) float32 batch -> the model's output
Head = Callable[[Any], Mapping[str, Column]]  # the model's output -> output columns


def raw_output(output: Any) -> Mapping[str, Column]:
    """The model's output as it is: one array is `prediction`, a dict one column a key."""
    if isinstance(output, Mapping):
        return {str(k): as_column(np.asarray(v), str(k)) for k, v in output.items()}
    return {"prediction": as_column(np.asarray(output))}


class ImageTensorModel:
    """`runner` over a batch's preprocessed images, its output made columns by `head`."""

    def __init__(
        self, runner: Runner, head: Head, transform: Transform, threads: int, column: str | None
    ) -> None:
        self._runner = runner
        self._head = head
        self._preparer = ImagePreparer(transform=transform, threads=threads, column=column)
        self._column = column

    def prepare(self, table: pa.Table) -> tuple[pa.Table, Failures]:
        """Decode and preprocess the chunk's images (see media/prepare.py)."""
        table, failures = self._preparer.prepare(table)
        return table, failures  # type: ignore[return-value]

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of prepared images."""
        return self._head(self._runner(tensor_batch(batch.column(self._tensor(batch)))))

    def _tensor(self, batch: pa.Table) -> str:
        names = columns_holding(batch.schema, TENSOR)
        if self._column is not None and self._column in names:
            return self._column
        if len(names) != 1:
            raise ModelOutputError(
                "model: an image model needs one image column among the inputs (an `images`"
                f" source's `image`); found {len(names)}; set source.columns or image_column"
            )
        return names[0]


def image_options(options: Mapping[str, Any]) -> ImageOptions | None:
    """`model.options.image`, validated, or None when the model takes no images."""
    value = options.get("image")
    if value is None:
        return None
    return value if isinstance(value, ImageOptions) else ImageOptions.model_validate(value)


def tensor_model(
    runner: Runner, options: ImageOptions, threads: int, column: str | None = None
) -> ImageTensorModel:
    """A torch or ONNX model fed images preprocessed by the `image` recipe, its output as
    it is."""
    return ImageTensorModel(runner, raw_output, recipe(options), threads, column)
