"""Feature batches in the shapes models eat: a dense matrix, a DataFrame, a dict of arrays.

The engine hands every adapter a `pa.Table` holding only the feature columns, in the
spec's order. These helpers convert it once per batch, without intermediate copies where
Arrow allows, so the conversion stays small next to the model's own work; the dense
matrix itself is `thresher.arrays.to_matrix` (the tree engine takes it too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from thresher.arrays import column_to_numpy, to_matrix
from thresher.media.columns import DECODED, columns_holding, decoded_arrays

if TYPE_CHECKING:
    import pandas as pd

BatchFormat = Literal["pandas", "numpy", "arrow"]


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
    """The table as the spec's `batch_format`: a DataFrame, a numpy dict, or the table.
    Decoded images (media/columns.py) become one uint8 array per row in a DataFrame or a
    numpy dict (an object array); a table keeps them as Arrow structs."""
    images = columns_holding(table.schema, DECODED)
    if batch_format == "arrow":
        return table
    plain = table.drop_columns(images) if images else table
    batch: Any = plain.to_pandas() if batch_format == "pandas" else to_numpy_dict(plain)
    for name in images:
        arrays = decoded_arrays(table.column(name))
        column = np.empty(len(arrays), dtype=object)
        for row, array in enumerate(arrays):  # one by one: a slice would broadcast them
            column[row] = array
        batch[name] = column
    if images and batch_format == "pandas":
        batch = batch[table.column_names]  # the columns in the table's order
    return batch
