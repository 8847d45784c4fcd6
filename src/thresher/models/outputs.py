"""Model outputs made into named columns: one value per input row, never a bare 2-D array.

Column naming, shared by every adapter:

- `prediction`: the model's main output (a label, a score, a vector);
- `proba_<class>`: one probability column per class, the class label made safe for a
  column name (`proba_0`, `proba_yes`, `proba_not_spam`);
- anything else keeps its own name, made safe the same way.

A 2-D output of shape `(rows, k)` becomes an Arrow FixedSizeList column (k values per
row); `(rows, 1)` is flattened.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.errors import ModelOutputError
from thresher.models.base import Column

_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")


def safe_name(label: Any) -> str:
    """A label as a column-name fragment: runs of other characters become one `_`.

    >>> safe_name("not spam"), safe_name(3), safe_name("dense/BiasAdd:0")
    ('not_spam', '3', 'dense_BiasAdd_0')
    """
    return _UNSAFE.sub("_", str(label)).strip("_") or "_"


def proba_names(classes: Iterable[Any]) -> list[str]:
    """`proba_<class>` per class, in class order; a clash gets the class index appended."""
    names: list[str] = []
    for index, label in enumerate(classes):
        name = f"proba_{safe_name(label)}"
        # Distinct labels can meet after cleaning ("a b" and "a-b"); keep every column.
        names.append(f"{name}_{index}" if name in names else name)
    return names


def proba_columns(names: list[str], proba: np.ndarray) -> dict[str, np.ndarray]:
    """Split a `(rows, classes)` probability matrix into one column per class."""
    if proba.ndim != 2 or proba.shape[1] != len(names):
        raise ModelOutputError(
            f"expected class probabilities of shape (rows, {len(names)}), got {proba.shape}"
        )
    # Columns of a C-ordered matrix are strided views; copy each so sinks get contiguous data.
    return {name: np.ascontiguousarray(proba[:, i]) for i, name in enumerate(names)}


def as_column(values: Any, name: str = "prediction") -> Column:
    """One output as a column: Arrow arrays pass through, numpy keeps its dtype, a
    `(rows, k)` array becomes a FixedSizeList column, lists and Series go through Arrow."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    if isinstance(values, np.ndarray):
        return _tensor_column(values, name)
    if _is_pandas(values, "Series"):
        return pa.Array.from_pandas(values)
    if isinstance(values, list | tuple):
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ModelOutputError(f"output {name!r}: cannot make a column of it: {exc}") from exc
    raise ModelOutputError(
        f"output {name!r} is a {type(values).__name__}; return an array, a list or a Series"
    )


def as_columns(result: Any) -> dict[str, Column]:
    """Whatever a Python model returned, as `{name: column}`.

    Accepted: a mapping of columns, a pandas DataFrame, an Arrow Table or RecordBatch,
    or a single array / list / Series, which becomes `prediction`.
    """
    if isinstance(result, Mapping):
        return {_column_name(key): as_column(value, str(key)) for key, value in result.items()}
    if isinstance(result, pa.Table | pa.RecordBatch):
        return dict(zip(result.column_names, result.columns, strict=True))
    if _is_pandas(result, "DataFrame"):
        return {_column_name(key): pa.Array.from_pandas(series) for key, series in result.items()}
    return {"prediction": as_column(result)}


def _tensor_column(array: np.ndarray, name: str) -> Column:
    if array.ndim == 1:
        return array
    if array.ndim == 2 and array.shape[1] == 1:
        return array.reshape(-1)
    if array.ndim == 2:
        flat = pa.array(np.ascontiguousarray(array).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, array.shape[1])
    raise ModelOutputError(
        f"output {name!r} has shape {array.shape}; return one value or one vector per row"
    )


def _column_name(key: Any) -> str:
    if not isinstance(key, str):
        raise ModelOutputError(f"output names must be strings, got {key!r}")
    return key


def _is_pandas(value: Any, class_name: str) -> bool:
    # Looked up, not imported: if pandas was never imported, the value cannot be pandas,
    # and models that return numpy or Arrow never pay for importing it.
    pandas = sys.modules.get("pandas")
    cls = getattr(pandas, class_name, None)
    return cls is not None and isinstance(value, cls)
