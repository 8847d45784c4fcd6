"""Feature batches in the shapes models eat: a dense matrix, a DataFrame, a dict of arrays.

The engine hands every adapter a `pa.Table` holding only the feature columns, in the
spec's order. These helpers convert it once per batch, without intermediate copies where
Arrow allows, so the conversion stays small next to the model's own work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from thresher.arrays import column_to_numpy, to_numpy

if TYPE_CHECKING:
    import pandas as pd

BatchFormat = Literal["pandas", "numpy", "arrow"]


def to_matrix(table: pa.Table, dtype: np.dtype[Any] | type = np.float64) -> np.ndarray:
    """The table as one C-ordered `(rows, columns)` array, columns in table order.

    Nulls become NaN for float dtypes. A value that cannot be cast (text for a float
    model) raises ValueError, which the engine reports as a bad row.

        >>> to_matrix(pa.table({"a": [1, 2], "b": [0.5, None]})).tolist()
        [[1.0, 0.5], [2.0, nan]]
    """
    # One allocation, then each column (chunk by chunk) copied straight into place:
    # no per-column temporaries are stacked, and no chunks are concatenated first.
    matrix = np.empty((table.num_rows, table.num_columns), dtype=dtype)
    for j, column in enumerate(table.columns):
        start = 0
        for chunk in column.chunks:
            matrix[start : start + len(chunk), j] = to_numpy(chunk)  # no pandas (see arrays)
            start += len(chunk)
    return matrix


def is_numeric(table: pa.Table) -> bool:
    """Whether every column is a number or a boolean, so `to_matrix` can hold it."""
    return all(
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
        for t in table.schema.types
    )


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The table as a pandas DataFrame with the table's column names.

    Numeric tables go through `to_matrix`, so the frame is one float64 block that
    scikit-learn reads without copying again; other tables keep their own dtypes (text
    columns for a pipeline that encodes categories).
    """
    import pandas as pd

    if is_numeric(table):
        return pd.DataFrame(to_matrix(table), columns=table.column_names, copy=False)
    frame: pd.DataFrame = table.to_pandas()
    return frame


def to_numpy_dict(table: pa.Table) -> dict[str, np.ndarray]:
    """The table as `{column name: 1-D numpy array}`; values and nulls as Arrow's
    `to_numpy` gives them, numbers without nulls as views of Arrow's buffers where a
    column is one chunk, and no pandas imported (see `column_to_numpy`)."""
    return {
        name: column_to_numpy(column)
        for name, column in zip(table.column_names, table.columns, strict=True)
    }


def to_batch_format(table: pa.Table, batch_format: BatchFormat) -> Any:
    """The table as the spec's `batch_format`: a DataFrame, a numpy dict, or the table."""
    if batch_format == "pandas":
        return table.to_pandas()
    if batch_format == "numpy":
        return to_numpy_dict(table)
    return table
