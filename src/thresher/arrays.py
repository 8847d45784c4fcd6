"""NumPy <-> Arrow for plain numbers, without pandas.

When pandas is installed, pyarrow imports it on the first `pa.array(ndarray)` or
`Array.to_numpy` (to look for pandas objects): a third of a second and tens of MiB in
every worker of every job, for nothing when the values are plain numbers. These move
fixed-width integers and floats through the Arrow buffer directly and leave everything
else (nulls, booleans, text, objects) to pyarrow; `to_matrix` lays a table's columns
into the dense matrix a model or the tree engine eats.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

_PLAIN = "iuf"  # NumPy kinds: signed, unsigned, float


def to_numpy(array: pa.Array) -> np.ndarray:
    """The array's values; a view of its buffer when they are numbers without nulls."""
    dtype = _numpy_dtype(array.type)
    if dtype is not None and array.null_count == 0 and len(array):
        start = array.offset * dtype.itemsize
        return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=start)
    converted: np.ndarray = array.to_numpy(zero_copy_only=False)
    return converted


def column_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column's values as `to_numpy` gives each chunk's (a view when it is one chunk of
    numbers without nulls), joined: pyarrow's own `ChunkedArray.to_numpy` imports pandas."""
    if isinstance(column, pa.Array):
        return to_numpy(column)
    chunks = column.chunks
    if len(chunks) == 1:
        return to_numpy(chunks[0])
    if not chunks:
        return to_numpy(pa.array([], column.type))
    return np.concatenate([to_numpy(chunk) for chunk in chunks])


def vector_rows(column: pa.FixedSizeListArray | pa.ChunkedArray) -> np.ndarray:
    """A column of fixed-size lists of numbers (an `embedding` column) as a (rows, width)
    matrix, through `to_numpy` (a view when there are no nulls)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    width = column.type.list_size
    return to_numpy(column.flatten()).reshape(-1, width)


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-D NumPy array as an Arrow array; numbers are wrapped without a copy (when
    contiguous), and the Arrow array keeps the NumPy one alive. Long doubles,
    booleans and objects go through pyarrow."""
    if values.dtype.kind in _PLAIN and not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))  # Arrow holds native order
    dtype = values.dtype
    if values.ndim == 1 and dtype.kind in _PLAIN and dtype.itemsize <= 8:
        data = np.ascontiguousarray(values)
        buffers = [None, pa.py_buffer(data)]
        return pa.Array.from_buffers(pa.from_numpy_dtype(dtype), len(data), buffers)
    return pa.array(values)


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
            matrix[start : start + len(chunk), j] = to_numpy(chunk)  # no pandas
            start += len(chunk)
    return matrix


def _numpy_dtype(kind: pa.DataType) -> np.dtype | None:
    if pa.types.is_floating(kind):
        code = "f"
    elif pa.types.is_signed_integer(kind):
        code = "i"
    elif pa.types.is_unsigned_integer(kind):
        code = "u"
    else:
        return None
    return np.dtype(f"={code}{kind.bit_width // 8}")
