"""In-memory input to an Arrow IPC file, and the output back in the input's own kind.

pandas, polars, a pyarrow Table, RecordBatch, RecordBatchReader or Dataset: each is
written, batch by batch, to one IPC file (`sources/arrow_ipc.py`), with a `ROW_COLUMN` of
row numbers so the output can be put back in input order and, for pandas, on the frame's
own index. A file, not a copy per worker: every worker maps the same pages.

A pandas column that Arrow cannot make one type of (an `object` column of numbers with a
stray string) is not a failed call: its values that fit the column's main type are kept,
and each other row is marked bad with a message naming the column and the value
(`BAD_ROW_COLUMN`), so it reaches the errors as a bad line of a file does.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.errors import SpecError
from thresher.sources.arrow_ipc import BAD_ROW_COLUMN

__all__ = ["ROW_COLUMN", "InputKind", "Written", "is_in_memory", "restore", "write_input"]

ROW_COLUMN = "_row"  # the input's row number (0-based): the id when the caller names none
BATCH_ROWS = 65_536  # rows per IPC record batch: what a shard is cut into, at least
MIN_BATCH_ROWS = 1_024
InputKind = Literal["pandas", "polars", "arrow"]


@dataclass(frozen=True)
class Written:
    """An input written for workers: where, how many rows, its kind, its pandas index (to
    put back), and the SHA-256 of the file (the data's fingerprint)."""

    path: Path
    rows: int
    kind: InputKind
    index: Any
    sha256: str


def is_in_memory(data: Any) -> bool:
    """Whether `data` is a table in memory (else a path or URL a spec's source takes)."""
    return _kind(data) is not None


def write_input(data: Any, folder: Path) -> Written:
    """`data` written to `folder/<sha256>.arrow`, with `ROW_COLUMN` added."""
    kind = _kind(data)
    if kind is None:
        raise SpecError([f"data: a {type(data).__name__} is not a table; pass a DataFrame or path"])
    index = data.index if kind == "pandas" else None
    folder.mkdir(parents=True, exist_ok=True)
    # A name of its own: two processes may write the same data into one folder at once.
    staging = folder / f"input-{secrets.token_hex(4)}.arrow.partial"
    digest = hashlib.sha256()
    rows = 0
    with pa.OSFile(str(staging), "wb") as file:
        writer: pa.ipc.RecordBatchFileWriter | None = None
        schema: pa.Schema | None = None
        for batch in _batches(data, kind):
            if ROW_COLUMN in batch.schema.names:
                raise SpecError(
                    [f"data: has a column {ROW_COLUMN!r}, which thresher adds; rename it"]
                )
            numbered = batch.append_column(
                ROW_COLUMN, pa.array(np.arange(rows, rows + batch.num_rows, dtype=np.int64))
            )
            if writer is None:
                schema = numbered.schema
                writer = pa.ipc.new_file(file, schema)
            elif numbered.schema != schema:
                numbered = numbered.cast(schema)
            writer.write_batch(numbered)
            rows += batch.num_rows
        if writer is None:
            raise SpecError(["data: is empty (no columns); pass a table with rows"])
        writer.close()
    with open(staging, "rb") as written:
        for block in iter(lambda: written.read(1 << 22), b""):
            digest.update(block)
    path = folder / f"{digest.hexdigest()}.arrow"
    staging.replace(path)
    return Written(path, rows, kind, index, digest.hexdigest())


def restore(table: pa.Table, written: Written, keep_row: bool = False) -> Any:
    """The output (`ROW_COLUMN` among its columns) in input order, in the input's kind:
    pandas on the input's own index, polars, or Arrow."""
    order = np.argsort(table.column(ROW_COLUMN).to_numpy(), kind="stable")
    if not np.array_equal(order, np.arange(len(order))):
        table = table.take(pa.array(order))
    rows = table.column(ROW_COLUMN).to_numpy()
    if not keep_row:
        table = table.drop_columns([ROW_COLUMN])
    if written.kind == "pandas":
        frame = table.to_pandas()
        frame.index = written.index[rows]
        return frame
    if written.kind == "polars":
        import polars as pl

        return pl.from_arrow(table)
    return table


def _kind(data: Any) -> InputKind | None:
    module = type(data).__module__.split(".")[0]
    if module == "pandas" and hasattr(data, "columns"):
        return "pandas"
    if module == "polars":
        return "polars"
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return "arrow"
    if module == "pyarrow" and hasattr(data, "to_batches"):  # pyarrow.dataset.Dataset
        return "arrow"
    return None


def batch_rows(rows: int) -> int:
    """Rows per record batch for an input of `rows`: `BATCH_ROWS`, or fewer where that
    would leave a core's worker without a batch of its own (a shard is whole batches)."""
    per_core = -(-rows // (4 * (os.cpu_count() or 1)))
    return max(MIN_BATCH_ROWS, min(BATCH_ROWS, per_core))


def _batches(data: Any, kind: InputKind) -> Iterator[pa.RecordBatch]:
    if kind == "pandas":
        # Only an `object` column can hold a value of the wrong type; where there is one,
        # every batch has the bad-row column, so the file's batches share one schema.
        marked = any(dtype.kind == "O" for dtype in data.dtypes)
        step = batch_rows(len(data))
        for start in range(0, max(len(data), 1), step):
            yield pandas_batch(data.iloc[start : start + step], start, marked)
        return
    if kind == "polars":
        frame = data.collect() if hasattr(data, "collect") else data  # a LazyFrame
        data = frame.to_arrow()
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        step = batch_rows(data.num_rows)
        yield from data.combine_chunks().to_batches(max_chunksize=step)
        return
    batches = data if isinstance(data, pa.RecordBatchReader) else data.to_batches()
    yield from _rebatched(batches)


def _rebatched(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A stream's batches (never held whole) as batches of `BATCH_ROWS` rows: a reader's
    many small batches would otherwise plan as many shards."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        held.append(batch)
        rows += batch.num_rows
        while rows >= BATCH_ROWS:
            whole = pa.Table.from_batches(held).combine_chunks()
            yield whole.slice(0, BATCH_ROWS).to_batches()[0]
            rest = whole.slice(BATCH_ROWS)
            held, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield from pa.Table.from_batches(held).combine_chunks().to_batches()


def pandas_batch(frame: Any, first_row: int, marked: bool) -> pa.RecordBatch:
    """A slice of a DataFrame as a batch; a column of mixed values kept by its main type,
    the other rows marked bad (see the module docstring), when `marked`."""
    bad: list[str | None] = [None] * len(frame)
    try:
        batch = pa.RecordBatch.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        if not marked:
            raise
        arrays = [_column(frame[name], str(name), first_row, bad) for name in frame.columns]
        batch = pa.RecordBatch.from_arrays(arrays, names=[str(n) for n in frame.columns])
    if not marked:
        return batch
    return batch.append_column(BAD_ROW_COLUMN, pa.array(bad, pa.string()))


def _column(values: Any, name: str, first_row: int, bad: list[str | None]) -> pa.Array:
    """One column as Arrow: as it is when Arrow takes it, else numbers when most values
    are numbers (the rest marked bad), else text."""
    import pandas as pd

    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    numbers = pd.to_numeric(values, errors="coerce")
    present = values.notna().to_numpy()
    numeric = numbers.notna().to_numpy()
    if numeric.sum() * 2 < present.sum():  # mostly text: numbers become their text
        return pa.array([None if v is None else str(v) for v in values.where(present, None)])
    for at in np.flatnonzero(present & ~numeric):
        if bad[at] is None:
            value = values.iloc[at]
            bad[at] = f"column {name!r}: {value!r} is not a number (row {first_row + at})"
    return pa.array(numbers.to_numpy(dtype="float64"), from_pandas=True)
